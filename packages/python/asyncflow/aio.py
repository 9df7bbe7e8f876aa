"""The client on the application's own `psycopg.AsyncConnection`, in its transaction.

The same calls as `asyncflow.client` (see there), awaited:

    async with await psycopg.AsyncConnection.connect(url) as conn:
        task_id = await asyncflow.aio.enqueue(conn, "invoice", {"order": 7})
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


async def enqueue(
    conn: psycopg.AsyncConnection[Any],
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
    """Creates one task in `conn`'s transaction; returns its id (see `asyncflow.client.enqueue`)."""
    params = _sql.enqueue_params(
        task_type, context, priority, run_at, stage, idempotency_key, user_id, queue_key, unique_key, unique_for, traceparent,
        debounce_key, debounce_for,
    )
    cur = await conn.execute(_sql.ENQUEUE, params)
    row = await cur.fetchone()
    return str(row[0]) if row else ""


async def enqueue_many(
    conn: psycopg.AsyncConnection[Any], task_type: str, tasks: Iterable[Mapping[str, Any]]
) -> List[str]:
    """Creates many tasks of one type in one statement; their ids in order."""
    cur = await conn.execute(_sql.ENQUEUE_MANY, _sql.enqueue_many_params(task_type, tasks))
    return [str(r[0]) for r in await cur.fetchall()]


async def get_task(conn: psycopg.AsyncConnection[Any], task_id: str) -> Optional[Task]:
    """The task, or None when there is none."""
    cur = await conn.execute(_sql.GET_TASK, (task_id,))
    row = await cur.fetchone()
    return Task.from_json(json.loads(row[0])) if row and row[0] is not None else None


async def cancel(conn: psycopg.AsyncConnection[Any], task_id: str) -> bool:
    """Cancels a pending or running task; False when it had already ended."""
    cur = await conn.execute(_sql.CANCEL, (task_id,))
    row = await cur.fetchone()
    return bool(row and row[0])


async def retry(conn: psycopg.AsyncConnection[Any], task_id: str) -> bool:
    """Queues a failed or cancelled task again; False when it was neither."""
    cur = await conn.execute(_sql.RETRY, (task_id,))
    row = await cur.fetchone()
    return bool(row and row[0])


async def send_event(conn: psycopg.AsyncConnection[Any], event_key: str, payload: Any = None) -> int:
    """Sends an event in `conn`'s transaction; how many waiting tasks it woke (see
    `asyncflow.client.send_event`)."""
    cur = await conn.execute(_sql.SEND_EVENT, (event_key, json.dumps({} if payload is None else payload)))
    row = await cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


async def wait(conn_or_url: Union[psycopg.AsyncConnection[Any], str], task_id: str, timeout: float) -> Task:
    """The task once it has ended; `TaskTimeout` (with `.task`) after `timeout` seconds. Woken by
    the notification of its end (see `asyncflow.client.wait`, which takes the same arguments)."""
    if isinstance(conn_or_url, str):
        async with await psycopg.AsyncConnection.connect(conn_or_url, autocommit=True) as conn:
            return await _wait(conn, task_id, timeout)
    conn = conn_or_url
    if conn.autocommit:
        return await _wait(conn, task_id, timeout)
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError(
            "wait needs a connection outside a transaction (a notification arrives only between "
            "transactions): commit or roll back first, or give a URL"
        )
    await conn.set_autocommit(True)
    try:
        return await _wait(conn, task_id, timeout)
    finally:
        await conn.set_autocommit(False)


async def _wait(conn: psycopg.AsyncConnection[Any], task_id: str, timeout: float) -> Task:
    deadline = time.monotonic() + timeout
    await conn.execute(_sql.LISTEN)
    try:
        cur = await conn.execute(_sql.WATCH_TASK, (task_id, min(max(timeout, 0.0), _sql.WATCH_MAX)))
        row = await cur.fetchone()
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
                async for note in notes:
                    if note.payload == task_id:
                        break
            finally:
                await notes.aclose()
            task = await get_task(conn, task_id)
    finally:
        await conn.execute(_sql.UNLISTEN)
