"""The SQL the psycopg clients send: one statement per call, values as parameters."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Iterable, Mapping, Optional, Tuple, Union

from ._task import seconds, task_fields

ENQUEUE = (
    "select asyncflow.create_task(%s, %s::jsonb, priority => %s, run_at => %s, stage => %s,"
    " idempotency_key => %s, user_id => %s, queue_key => %s, unique_key => %s, unique_for => %s,"
    " traceparent => %s, debounce_key => %s, debounce_for => make_interval(secs => %s))"
)
ENQUEUE_MANY = "select asyncflow.create_tasks(%s, %s::jsonb)"
GET_TASK = "select asyncflow.get_task(%s)::text"
CANCEL = "select asyncflow.cancel_task(%s)"
RETRY = "select asyncflow.retry_task(%s)"
SEND_EVENT = "select asyncflow.send_event(%s, %s::jsonb)"
# waiting: LISTEN first, then the task read after its waiter is registered (docs/sql-api.md)
LISTEN = "listen asyncflow_ended"
UNLISTEN = "unlisten asyncflow_ended"
WATCH_TASK = "select asyncflow.watch_task(%s, %s)::text"
# the longest wait watch_task registers (a year, in seconds)
WATCH_MAX = 31536000.0


def enqueue_params(
    task_type: str,
    context: Optional[Mapping[str, Any]],
    priority: int,
    run_at: Optional[_dt.datetime],
    stage: Optional[str],
    idempotency_key: Optional[str],
    user_id: Optional[str],
    queue_key: Optional[str],
    unique_key: Optional[str],
    unique_for: Optional[int],
    traceparent: Optional[str],
    debounce_key: Optional[str] = None,
    debounce_for: Optional[Union[float, _dt.timedelta]] = None,
) -> Tuple[Any, ...]:
    return (
        task_type,
        json.dumps({} if context is None else context),
        priority,
        run_at,
        stage,
        idempotency_key,
        user_id,
        queue_key,
        unique_key,
        unique_for,
        traceparent,
        debounce_key,
        seconds(debounce_for),
    )


def enqueue_many_params(task_type: str, tasks: Iterable[Mapping[str, Any]]) -> Tuple[Any, ...]:
    return (task_type, json.dumps([task_fields(t) for t in tasks]))
