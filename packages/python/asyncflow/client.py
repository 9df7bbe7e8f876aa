"""The client on the application's own psycopg 3 connection, in its transaction.

    with psycopg.connect(url) as conn:          # a transaction; committed when the block ends
        order_id = save_order(conn)
        task_id = asyncflow.enqueue(conn, "invoice", {"order": order_id})

Each call is one statement on `conn`, in whatever transaction `conn` is in: nothing here
commits or rolls back, so a task enqueued in a transaction that rolls back never existed.
`wait` needs to see other transactions' commits and to hear notifications, which arrive only
between transactions: give it a URL (it opens its own connection), or a connection in
autocommit mode, or one outside a transaction (it is put in autocommit for the wait).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from typing import Any, Iterable, List, Mapping, Optional, Union

import psycopg

from . import _sql
from . import _task
from ._task import Task, TaskNotFound, TaskTimeout

__all__ = ["enqueue", "enqueue_many", "get_task", "cancel", "retry", "send_event", "wait"]


def enqueue(
    conn: psycopg.Connection[Any],
    task_type: str,
    context: Optional[Mapping[str, Any]] = None,
    *,
    priority: int = 0,
    run_at: Optional[_dt.datetime] = None,
    stage: Optional[str] = None,
    idempotency_key: Optional[str] = None,
    user_id: Optional[str] = None,
    queue_key: Optional[str] = None,
    unique_key: Optional[str] = None,
    unique_for: Optional[int] = None,
    traceparent: Optional[str] = None,
    debounce_key: Optional[str] = None,
    debounce_for: Optional[Union[float, _dt.timedelta]] = None,
) -> str:
    """Creates one task of `task_type` in `conn`'s transaction; returns its id.

    With an `idempotency_key` already used by a task of the type, that task's id is returned and
    nothing is created. With a `debounce_key` and `debounce_for` (seconds or a timedelta), the
    task starts no earlier than `debounce_for` from now; while the key's task is pending and has
    not started, another enqueue with the key replaces its context, moves its start and returns
    its id. Errors of the SQL API (an unknown type, a bad priority) are raised as
    psycopg errors whose SQLSTATE is of class AF (see docs/sql-api.md).
    """
    params = _sql.enqueue_params(
        task_type, context, priority, run_at, stage, idempotency_key, user_id, queue_key, unique_key, unique_for, traceparent,
        debounce_key, debounce_for,
    )
    row = conn.execute(_sql.ENQUEUE, params).fetchone()
    return str(row[0]) if row else ""


def enqueue_many(conn: psycopg.Connection[Any], task_type: str, tasks: Iterable[Mapping[str, Any]]) -> List[str]:
    """Creates many tasks of one type in one statement; their ids in order.

    Each task is a mapping of the optional fields `context`, `priority`, `run_at`, `stage`,
    `idempotency_key`, `user_id`, `queue_key`, `traceparent`, `debounce_key`, `debounce_for`.
    """
    rows = conn.execute(_sql.ENQUEUE_MANY, _sql.enqueue_many_params(task_type, tasks)).fetchall()
    return [str(r[0]) for r in rows]


def get_task(conn: psycopg.Connection[Any], task_id: str) -> Optional[Task]:
    """The task, or None when there is none."""
    row = conn.execute(_sql.GET_TASK, (task_id,)).fetchone()
    return Task.from_json(json.loads(row[0])) if row and row[0] is not None else None


def cancel(conn: psycopg.Connection[Any], task_id: str) -> bool:
    """Cancels a pending or running task; False when it had already ended."""
    row = conn.execute(_sql.CANCEL, (task_id,)).fetchone()
    return bool(row and row[0])


def retry(conn: psycopg.Connection[Any], task_id: str) -> bool:
    """Queues a failed or cancelled task again; False when it was neither."""
    row = conn.execute(_sql.RETRY, (task_id,)).fetchone()
    return bool(row and row[0])


def send_event(conn: psycopg.Connection[Any], event_key: str, payload: Any = None) -> int:
    """Sends an event in `conn`'s transaction: every task waiting for `event_key` goes on to the
    stage it named, its call carrying `payload` (a JSON value, `{}` by default); a wait that
    begins later, within the event retention, finds it too. Returns how many waiting tasks it woke.
    """
    row = conn.execute(_sql.SEND_EVENT, (event_key, json.dumps({} if payload is None else payload))).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def wait(conn_or_url: Union[psycopg.Connection[Any], str], task_id: str, timeout: float) -> Task:
    """Returns the task once it has ended (succeeded, failed, cancelled).

    Raises `TaskTimeout` (a TimeoutError, with `.task` as it is) after `timeout` seconds, and
    `TaskNotFound` when there is no such task. Woken by the notification the task's end sends
    (LISTEN asyncflow_ended, then `asyncflow.watch_task`), with a read every `RECHECK` seconds
    as a backstop. A URL: a connection of its own. A connection: one outside a transaction
    (notifications arrive between transactions), switched to autocommit for the wait.
    """
    if isinstance(conn_or_url, str):
        with psycopg.connect(conn_or_url, autocommit=True) as conn:
            return _wait(conn, task_id, timeout)
    conn = conn_or_url
    if conn.autocommit:
        return _wait(conn, task_id, timeout)
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError(
            "wait needs a connection outside a transaction (a notification arrives only between "
            "transactions): commit or roll back first, or give a URL"
        )
    conn.autocommit = True
    try:
        return _wait(conn, task_id, timeout)
    finally:
        conn.autocommit = False


def _wait(conn: psycopg.Connection[Any], task_id: str, timeout: float) -> Task:
    deadline = time.monotonic() + timeout
    conn.execute(_sql.LISTEN)
    try:
        row = conn.execute(_sql.WATCH_TASK, (task_id, min(max(timeout, 0.0), _sql.WATCH_MAX))).fetchone()
        task = Task.from_json(json.loads(row[0])) if row and row[0] is not None else None
        while True:
            if task is None:
                raise TaskNotFound(task_id)
            if task.ended:
                return task
            left = deadline - time.monotonic()
            if left <= 0:
                raise TaskTimeout(task, timeout)
            # closed here, not when collected: it holds the connection's lock while open
            notes = conn.notifies(timeout=min(left, _task.RECHECK))
            try:
                for note in notes:
                    if note.payload == task_id:
                        break
            finally:
                notes.close()
            task = get_task(conn, task_id)
    finally:
        conn.execute(_sql.UNLISTEN)
