"""The function loop (standard library only; no database)."""

import asyncio
import contextlib
import io
import json
import sys
import unittest

from asyncflow import function


def lines(*calls):
    return io.BytesIO(b"".join(json.dumps(c).encode() + b"\n" for c in calls))


def replies(out):
    return [json.loads(x) for x in out.getvalue().splitlines()]


class SyncLoop(unittest.TestCase):
    def test_warm_calls_are_answered_in_order_with_their_ids_and_a_throw_is_a_retried_failure(self):
        def handle(call):
            if call["context"].get("boom"):
                raise RuntimeError("boom")
            return {"result": call["context"]}

        out = io.BytesIO()
        status = function.serve(handle, lines({"id": "1", "context": {"a": 1}}, {"id": "2", "context": {"boom": True}}), out)
        self.assertEqual(status, 0)
        got = replies(out)
        self.assertEqual(got[0], {"result": {"a": 1}, "id": "1"})
        self.assertEqual((got[1]["id"], got[1]["retry"]), ("2", True))
        self.assertIn("RuntimeError: boom", got[1]["error"])

    def test_a_call_without_id_is_answered_once_and_a_non_object_reply_is_refused(self):
        out = io.BytesIO()
        function.serve(lambda call: [1], lines({"context": {}}, {"id": "9", "context": {}}), out)
        self.assertEqual(replies(out), [{"error": "the handler returned list, not a reply object", "retry": False}])

    def test_the_last_progress_goes_with_the_reply_unless_the_handler_gives_its_own(self):
        def handle(call):
            for value in call["context"]["report"]:
                function.progress(value)
            return dict(call["context"].get("reply", {}), result=None)

        out = io.BytesIO()
        with contextlib.redirect_stderr(io.StringIO()):
            function.serve(handle, lines({"id": "1", "context": {"report": [1, {"p": 2}]}},
                                         {"id": "2", "context": {"report": []}},
                                         {"id": "3", "context": {"report": [None]}},
                                         {"id": "4", "context": {"report": [5], "reply": {"progress": "own"}}}), out)
        self.assertEqual(replies(out), [{"result": None, "progress": {"p": 2}, "id": "1"}, {"result": None, "id": "2"},
                                        {"result": None, "progress": None, "id": "3"},
                                        {"progress": "own", "result": None, "id": "4"}])
        with self.assertRaises(RuntimeError):
            function.checkpoint({})  # the loop has returned: no call is being served


class AsyncLoop(unittest.TestCase):
    def test_async_calls_run_at_once_and_a_cancel_line_ends_its_call_alone(self):
        state = {"now": 0, "most": 0}

        async def handle(call):
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            try:
                await asyncio.sleep(call["context"]["s"])
            finally:
                state["now"] -= 1
            return {"result": call["context"]["n"]}

        calls = [{"id": str(n), "context": {"n": n, "s": 0.2}} for n in range(20)]
        calls.insert(5, {"id": "long", "context": {"n": -1, "s": 60}})
        stdin = _Slow(calls, then=[{"cancel": "long"}])
        out = io.BytesIO()
        self.assertEqual(asyncio.run(function.serve_async(handle, stdin, out)), 0)
        got = {r["id"]: r for r in replies(out)}
        self.assertEqual(got["long"], {"id": "long", "cancelled": True})
        self.assertEqual(sorted(r["result"] for k, r in got.items() if k != "long"), list(range(20)))
        self.assertEqual(state["most"], 21, "every call was in flight at once")

    def test_progress_names_the_call_it_is_made_in(self):
        async def handle(call):
            await asyncio.sleep(0.01)
            function.progress({"n": call["context"]["n"]})
            return {"result": None}

        err = io.StringIO()
        real, sys.stderr = sys.stderr, err
        try:
            asyncio.run(function.serve_async(handle, lines(*[{"id": "c%d" % n, "context": {"n": n}} for n in range(3)]),
                                             io.BytesIO()))
        finally:
            sys.stderr = real
        self.assertEqual(sorted(err.getvalue().splitlines()),
                         ['asyncflow:progress:c%d {"n":%d}' % (n, n) for n in range(3)])
        with self.assertRaises(ValueError):
            function.progress("x" * 5000)


class ReplyJson(unittest.TestCase):
    def test_a_reply_is_written_as_json_dumps_writes_it(self):
        loop = []
        loop.append(loop)
        for value in [{"result": None}, {"a": [1, -2.5, 1e300, True, False, None, "\u00e9\n\"\\", "\ud800"]},
                      {"nested": {"x": {}, "y": []}, 1: "int key", 2.5: "float key", None: "null key"},
                      {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}, "text", 7, [], {}]:
            self.assertEqual(function._encode(value), json.dumps(value, separators=(",", ":")))
        for bad, error in [({"loop": loop}, ValueError), ({"set": {1}}, TypeError), ({(1, 2): "tuple key"}, TypeError)]:
            with self.assertRaises(error):
                json.dumps(bad, separators=(",", ":"))
            with self.assertRaises(error):
                function._encode(bad)
        # the memo of the containers seen starts empty at each reply, after a failure too
        shared = [1]
        self.assertEqual(function._encode({"a": shared, "b": shared}), '{"a":[1],"b":[1]}')


class Checkpoints(unittest.TestCase):
    def test_step_runs_its_fn_once_across_a_retry_and_is_checkpointed_before_the_reply(self):
        runs = []

        def handle(call):
            charged = function.step("charge", lambda: runs.append(1) or {"receipt": "r-%d" % len(runs)})
            if call["attempt"] == 1:
                raise RuntimeError("flaky after the charge")
            return {"result": {"charged": charged, "context": call["context"]}}

        out = io.BytesIO()
        function.serve(handle, lines({"id": "1", "attempt": 1, "context": {"order": 7}}), out)
        first = replies(out)
        saved = {"order": 7, "_steps": {"charge": {"receipt": "r-1"}}}
        self.assertEqual(first[0], {"id": "1", "checkpoint": saved})
        self.assertEqual((first[1]["id"], first[1]["retry"]), ("1", True))
        # the retry starts from the checkpointed context: the step is not run again
        out = io.BytesIO()
        function.serve(handle, lines({"id": "2", "attempt": 2, "context": first[0]["checkpoint"]}), out)
        self.assertEqual(len(runs), 1)
        self.assertEqual(replies(out), [{"id": "2", "result": {"charged": {"receipt": "r-1"}, "context": saved}}])

    def test_async_steps_and_checkpoints_keep_each_concurrent_call_its_own(self):
        runs = []

        async def fetch(n):
            await asyncio.sleep(0.01)
            runs.append(n)
            return n * 10

        async def handle(call):
            n = call["context"]["n"]
            got = await function.step("fetch", lambda: fetch(n))
            again = await function.step("fetch", lambda: fetch(n))
            with self.assertRaises(TypeError):
                function.checkpoint([1])
            with self.assertRaises(TypeError):
                function.checkpoint({"x": float("nan")})
            return {"result": [got, again]}

        out = io.BytesIO()
        asyncio.run(function.serve_async(handle, lines(*[{"id": str(n), "attempt": 1, "context": {"n": n}} for n in range(4)]),
                                         out))
        got = replies(out)
        saved = {r["id"]: r["checkpoint"] for r in got if "checkpoint" in r}
        self.assertEqual(saved, {str(n): {"n": n, "_steps": {"fetch": n * 10}} for n in range(4)})
        self.assertEqual({r["id"]: r["result"] for r in got if "result" in r}, {str(n): [n * 10] * 2 for n in range(4)})
        self.assertEqual(sorted(runs), [0, 1, 2, 3], "each call ran its step once")
        with self.assertRaises(RuntimeError):
            function.checkpoint({})

    def test_one_call_per_process_sends_its_checkpoint_on_stderr_and_keeps_it_in_the_calls_context(self):
        def handle(call):
            function.step("a", lambda: 1)
            return {"next_stage": "b", "context": call["context"]}

        out, err = io.BytesIO(), io.StringIO()
        with contextlib.redirect_stderr(err):
            function.serve(handle, lines({"attempt": 1, "context": {"k": "v"}}), out)
        self.assertEqual(replies(out), [{"next_stage": "b", "context": {"k": "v", "_steps": {"a": 1}}}])
        # the line the worker writes to the database before the reply
        self.assertEqual(err.getvalue(), 'asyncflow:checkpoint {"k":"v","_steps":{"a":1}}\n')


class _Slow(io.RawIOBase):
    """stdin that gives `calls`, then after a pause the lines of `then`, then ends."""

    def __init__(self, calls, then):
        self.first = [json.dumps(c).encode() + b"\n" for c in calls]
        self.then = [json.dumps(c).encode() + b"\n" for c in then]

    def readline(self, size=-1):
        if self.first:
            return self.first.pop(0)
        if self.then:
            import time

            time.sleep(0.1)
            return self.then.pop(0)
        return b""


if __name__ == "__main__":
    unittest.main()
