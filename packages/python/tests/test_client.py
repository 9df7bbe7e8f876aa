"""The psycopg clients (sync and async) and the HTTP client against a real database.

ASYNCFLOW_TEST_URL: a migrated database (required); ASYNCFLOW_TEST_SERVER (and
ASYNCFLOW_TEST_TOKEN): an `asyncflow serve` on it, for the HTTP client's tests.
"""

import asyncio
import json
import os
import threading
import time
import unittest
import uuid

import psycopg

import asyncflow
import asyncflow._task
import asyncflow.aio
import asyncflow.http

URL = os.environ.get("ASYNCFLOW_TEST_URL")
if not URL:
    raise SystemExit("ASYNCFLOW_TEST_URL must name a migrated asyncflow database")


def new_type(conn: psycopg.Connection) -> str:
    name = "py" + uuid.uuid4().hex[:12]
    conn.execute("select asyncflow.register_task_type(%s)", (name,))
    return name


class SyncClient(unittest.TestCase):
    def setUp(self) -> None:
        self.conn = psycopg.connect(URL, autocommit=True)
        self.type = new_type(self.conn)

    def tearDown(self) -> None:
        self.conn.close()

    def test_a_task_enqueued_in_a_rolled_back_transaction_never_existed(self) -> None:
        with psycopg.connect(URL) as app:
            kept = asyncflow.enqueue(app, self.type, {"order": 1})
        app = psycopg.connect(URL)
        gone = asyncflow.enqueue(app, self.type, {"order": 2})
        self.assertIsNotNone(asyncflow.get_task(app, gone), "seen inside its own transaction")
        app.rollback()
        app.close()
        self.assertIsNone(asyncflow.get_task(self.conn, gone))
        task = asyncflow.get_task(self.conn, kept)
        assert task is not None
        self.assertEqual((task.type, task.status, task.context), (self.type, "pending", {"order": 1}))

    def test_enqueue_takes_its_options_and_an_idempotency_key_names_one_task(self) -> None:
        first = asyncflow.enqueue(self.conn, self.type, {"a": 1}, priority=7, idempotency_key="k1", user_id="u",
                                  queue_key="q", stage="second")
        again = asyncflow.enqueue(self.conn, self.type, {"a": 2}, idempotency_key="k1")
        self.assertEqual(first, again)
        task = asyncflow.get_task(self.conn, first)
        assert task is not None
        self.assertEqual((task.priority, task.user_id, task.queue_key, task.stage, task.idempotency_key),
                         (7, "u", "q", "second", "k1"))
        self.assertIsNotNone(task.created_at.tzinfo)
        self.assertFalse(task.ended)

    def test_enqueue_many_answers_the_ids_in_order(self) -> None:
        ids = asyncflow.enqueue_many(self.conn, self.type, [{"context": {"n": n}, "priority": n} for n in range(5)])
        self.assertEqual(len(ids), 5)
        got = [asyncflow.get_task(self.conn, i) for i in ids]
        self.assertEqual([t.context["n"] for t in got if t], list(range(5)))
        with self.assertRaises(TypeError):
            asyncflow.enqueue_many(self.conn, self.type, [{"contxt": {}}])

    def test_a_debounced_enqueue_replaces_the_pending_task_and_moves_its_start(self) -> None:
        import datetime

        first = asyncflow.enqueue(self.conn, self.type, {"v": 1}, debounce_key="doc:1", debounce_for=30)
        again = asyncflow.enqueue(self.conn, self.type, {"v": 2}, debounce_key="doc:1",
                                  debounce_for=datetime.timedelta(minutes=1))
        self.assertEqual(again, first)
        many = asyncflow.enqueue_many(self.conn, self.type, [{"context": {"v": 3}, "debounce_key": "doc:1",
                                                             "debounce_for": datetime.timedelta(seconds=5)}])
        self.assertEqual(many, [first])
        task = asyncflow.get_task(self.conn, first)
        assert task is not None
        self.assertEqual(task.context, {"v": 3})
        with self.assertRaises(psycopg.Error) as caught:
            asyncflow.enqueue(self.conn, self.type, {}, debounce_key="doc:1", debounce_for=-1)
        self.assertEqual(caught.exception.sqlstate, "AF006")

    def test_a_bad_type_name_is_refused_with_its_af_code(self) -> None:
        with self.assertRaises(psycopg.Error) as caught:
            asyncflow.enqueue(self.conn, "Not A Type!", {})
        self.assertTrue(str(caught.exception.sqlstate).startswith("AF"), caught.exception.sqlstate)

    def test_get_task_of_no_task_is_none_and_cancel_and_retry_answer_what_they_did(self) -> None:
        self.assertIsNone(asyncflow.get_task(self.conn, self.type + "-1-999999"))
        self.assertIsNone(asyncflow.get_task(self.conn, "not an id"))
        task_id = asyncflow.enqueue(self.conn, self.type)
        self.assertTrue(asyncflow.cancel(self.conn, task_id))
        self.assertFalse(asyncflow.cancel(self.conn, task_id))
        task = asyncflow.get_task(self.conn, task_id)
        assert task is not None
        self.assertEqual(task.status, "cancelled")
        self.assertTrue(task.ended)
        self.assertTrue(asyncflow.retry(self.conn, task_id))
        self.assertFalse(asyncflow.retry(self.conn, task_id))

    def test_wait_returns_the_task_once_it_ends_and_times_out_with_the_task_as_it_is(self) -> None:
        task_id = asyncflow.enqueue(self.conn, self.type, {"x": 1})
        with self.assertRaises(asyncflow.TaskTimeout) as caught:
            asyncflow.wait(URL, task_id, timeout=0.2)
        self.assertIsInstance(caught.exception, TimeoutError)
        self.assertEqual((caught.exception.task.id, caught.exception.task.status), (task_id, "pending"))

        def cancel_later() -> None:
            time.sleep(0.3)
            with psycopg.connect(URL, autocommit=True) as other:
                asyncflow.cancel(other, task_id)

        threading.Thread(target=cancel_later).start()
        task = asyncflow.wait(self.conn, task_id, timeout=30)
        self.assertEqual(task.status, "cancelled")
        with self.assertRaises(asyncflow.TaskNotFound):
            asyncflow.wait(self.conn, self.type + "-1-999999", timeout=1)


def claim_one(conn: psycopg.Connection, task_type: str) -> tuple:
    """Claims one task of the type as a worker would: (task id, claim_seq)."""
    row = conn.execute("select task_id, claim_seq from asyncflow.claim_tasks(%s, 'pyworker', 1)", (task_type,)).fetchone()
    assert row is not None, "nothing to claim"
    return str(row[0]), int(row[1])


def report(conn: psycopg.Connection, task_id: str, claim_seq: int, **fields) -> None:
    body = dict(task_id=task_id, claim_seq=claim_seq, **fields)
    conn.execute("select * from asyncflow.report_tasks('pyworker', %s::jsonb)", (json.dumps([body]),))


class Notified(unittest.TestCase):
    """wait is woken by the notification of the task's end, not by its backstop re-read."""

    def setUp(self) -> None:
        self.conn = psycopg.connect(URL, autocommit=True)
        self.type = new_type(self.conn)
        self.recheck = asyncflow._task.RECHECK
        asyncflow._task.RECHECK = 600.0  # a wake-up can only be the notification

    def tearDown(self) -> None:
        asyncflow._task.RECHECK = self.recheck
        self.conn.close()

    def test_a_reported_success_wakes_the_waiter_at_once(self) -> None:
        task_id = asyncflow.enqueue(self.conn, self.type, {"n": 1})
        claimed, seq = claim_one(self.conn, self.type)
        self.assertEqual(claimed, task_id)

        def succeed_later() -> None:
            time.sleep(0.5)
            with psycopg.connect(URL, autocommit=True) as worker:
                report(worker, task_id, seq, outcome="succeed", result={"ok": True})

        threading.Thread(target=succeed_later).start()
        started = time.monotonic()
        task = asyncflow.wait(URL, task_id, timeout=60)
        self.assertEqual((task.status, task.result), ("succeeded", {"ok": True}))
        self.assertLess(time.monotonic() - started, 10, "woken by the notification, not at the timeout")

    def test_a_task_that_ended_before_the_wait_is_answered_at_once_and_a_failure_wakes_too(self) -> None:
        done = asyncflow.enqueue(self.conn, self.type)
        asyncflow.cancel(self.conn, done)
        self.assertEqual(asyncflow.wait(self.conn, done, timeout=60).status, "cancelled")
        self.conn.execute("select asyncflow.register_task_type(%s, '{\"max_retry_num\": 0}')", (self.type,))
        task_id = asyncflow.enqueue(self.conn, self.type)
        claimed, seq = claim_one(self.conn, self.type)

        def fail_later() -> None:
            time.sleep(0.5)
            with psycopg.connect(URL, autocommit=True) as worker:
                report(worker, claimed, seq, outcome="fail", error="boom", retry=False)

        threading.Thread(target=fail_later).start()
        task = asyncflow.wait(self.conn, task_id, timeout=60)
        self.assertEqual((task.status, task.error), ("failed", "boom"))

    def test_an_end_notifies_only_when_somebody_waits(self) -> None:
        listener = psycopg.connect(URL, autocommit=True)
        listener.execute("listen asyncflow_ended")
        unwatched = asyncflow.enqueue(self.conn, self.type)
        watched = asyncflow.enqueue(self.conn, self.type)
        asyncflow.cancel(self.conn, unwatched)
        self.assertEqual([n.payload for n in listener.notifies(timeout=0.5)], [], "nobody waits: no NOTIFY")
        row = self.conn.execute("select asyncflow.watch_task(%s, 30)::text", (watched,)).fetchone()
        self.assertEqual(json.loads(row[0])["status"], "pending")
        asyncflow.cancel(self.conn, watched)
        self.assertEqual([n.payload for n in listener.notifies(timeout=2, stop_after=1)], [watched])
        left = self.conn.execute("select count(*) from asyncflow.task_waiters where task_type = %s", (self.type,))
        self.assertEqual(left.fetchone()[0], 0, "the waiter's row goes with the notification")
        listener.close()

    def test_a_connection_inside_a_transaction_is_refused_and_one_outside_is_left_as_it_was(self) -> None:
        task_id = asyncflow.enqueue(self.conn, self.type)
        app = psycopg.connect(URL)
        asyncflow.get_task(app, task_id)  # a transaction is open
        with self.assertRaises(ValueError):
            asyncflow.wait(app, task_id, timeout=0.1)
        app.rollback()
        with self.assertRaises(asyncflow.TaskTimeout):
            asyncflow.wait(app, task_id, timeout=0.1)
        self.assertFalse(app.autocommit)
        app.close()


class Events(unittest.TestCase):
    def test_send_event_wakes_the_tasks_waiting_for_its_key_in_the_senders_transaction(self) -> None:
        with psycopg.connect(URL, autocommit=True) as conn:
            task_type = new_type(conn)
            task_id = asyncflow.enqueue(conn, task_type)
            claimed, seq = claim_one(conn, task_type)
            report(conn, claimed, seq, outcome="wait", event="order:%s/paid" % task_id, timeout=600, stage="paid")
            task = asyncflow.get_task(conn, task_id)
            assert task is not None
            self.assertEqual(task.status, "waiting")
            with psycopg.connect(URL) as app:
                self.assertEqual(asyncflow.send_event(app, "order:%s/paid" % task_id, {"amount": 5}), 1)
                app.rollback()  # rolled back: the task still waits
            self.assertEqual(asyncflow.get_task(conn, task_id).status, "waiting")
            self.assertEqual(asyncflow.send_event(conn, "order:%s/paid" % task_id, {"amount": 5}), 1)
            task = asyncflow.get_task(conn, task_id)
            assert task is not None
            self.assertEqual((task.status, task.stage), ("pending", "paid"))
            self.assertEqual(asyncflow.send_event(conn, "nobody:waits"), 0)
            with self.assertRaises(psycopg.Error) as caught:
                asyncflow.send_event(conn, "not a key!")
            self.assertTrue(str(caught.exception.sqlstate).startswith("AF"))


class AsyncClient(unittest.IsolatedAsyncioTestCase):
    async def test_the_async_client_enqueues_in_the_transaction_and_waits(self) -> None:
        async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
            task_type = "pya" + uuid.uuid4().hex[:12]
            await conn.execute("select asyncflow.register_task_type(%s)", (task_type,))
        app = await psycopg.AsyncConnection.connect(URL)
        gone = await asyncflow.aio.enqueue(app, task_type, {"n": 1})
        await app.rollback()
        kept = await asyncflow.aio.enqueue(app, task_type, {"n": 2}, priority=3)
        many = await asyncflow.aio.enqueue_many(app, task_type, [{"context": {"n": 3}}, {}])
        await app.commit()
        self.assertIsNone(await asyncflow.aio.get_task(app, gone))
        task = await asyncflow.aio.get_task(app, kept)
        assert task is not None
        self.assertEqual((task.priority, task.context), (3, {"n": 2}))
        self.assertEqual(len(many), 2)
        await app.rollback()
        await app.set_autocommit(True)
        with self.assertRaises(asyncflow.TaskTimeout):
            await asyncflow.aio.wait(app, kept, timeout=0.1)

        async def cancel_later() -> None:
            await asyncio.sleep(0.3)
            async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as other:
                self.assertTrue(await asyncflow.aio.cancel(other, kept))

        recheck, asyncflow._task.RECHECK = asyncflow._task.RECHECK, 600.0  # only the notification wakes
        try:
            waiting = asyncio.ensure_future(asyncflow.aio.wait(URL, kept, timeout=60))
            await cancel_later()
            self.assertEqual((await asyncio.wait_for(waiting, 10)).status, "cancelled")
        finally:
            asyncflow._task.RECHECK = recheck
        self.assertTrue(await asyncflow.aio.retry(app, kept))
        self.assertEqual(await asyncflow.aio.send_event(app, "nobody:waits", {"x": 1}), 0)
        await app.close()


SERVER = os.environ.get("ASYNCFLOW_TEST_SERVER")


@unittest.skipUnless(SERVER, "ASYNCFLOW_TEST_SERVER is not set (the suite sets it)")
class HttpClient(unittest.TestCase):
    def test_the_http_client_makes_the_same_calls_and_long_polls_the_end(self) -> None:
        client = asyncflow.http.Client(SERVER or "", token=os.environ.get("ASYNCFLOW_TEST_TOKEN"))
        with psycopg.connect(URL, autocommit=True) as conn:
            task_type = new_type(conn)
        task_id = client.enqueue(task_type, {"h": 1}, priority=2, idempotency_key="hk")
        self.assertEqual(client.enqueue(task_type, {"h": 2}, idempotency_key="hk"), task_id)
        ids = client.enqueue_many(task_type, [{"context": {"n": 1}}, {"context": {"n": 2}}])
        self.assertEqual(len(ids), 2)
        task = client.get_task(task_id)
        assert task is not None
        self.assertEqual((task.priority, task.context, task.status), (2, {"h": 1}, "pending"))
        self.assertIsNone(client.get_task(task_type + "-1-999999"))
        with self.assertRaises(asyncflow.TaskTimeout) as caught:
            client.wait(task_id, timeout=0.3)
        self.assertEqual(caught.exception.task.status, "pending")

        def cancel_later() -> None:
            time.sleep(0.5)
            client.cancel(task_id)

        threading.Thread(target=cancel_later).start()
        self.assertEqual(client.wait(task_id, timeout=30).status, "cancelled")
        self.assertFalse(client.cancel(task_id))
        self.assertTrue(client.retry(task_id))
        self.assertEqual(client.send_event("nobody:waits", {"x": 1}), 0)
        with self.assertRaises(asyncflow.http.HttpError) as bad_key:
            client.send_event("not a key!")
        self.assertEqual(bad_key.exception.status, 400)
        with self.assertRaises(asyncflow.http.HttpError) as refused:
            client.enqueue("Not A Type!")
        self.assertEqual((refused.exception.status, refused.exception.code), (400, "invalid_type_name"))
        debounced = client.enqueue(task_type, {"d": 1}, debounce_key="dk", debounce_for=30)
        self.assertEqual(client.enqueue(task_type, {"d": 2}, debounce_key="dk", debounce_for=30), debounced)
        self.assertEqual(client.get_task(debounced).context, {"d": 2})


if __name__ == "__main__":
    unittest.main()
