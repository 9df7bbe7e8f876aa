"""The types the clients share: `Task`, `TaskTimeout`, and the arguments of an enqueue.

Standard library only: `asyncflow.http` uses it without psycopg.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

__all__ = ["Task", "TaskTimeout", "ENDED", "task_fields"]

# The statuses a task does not leave by itself (a retry by hand queues it again).
ENDED = frozenset({"succeeded", "failed", "cancelled"})

# While waiting for a task to end, woken by its notification (asyncflow_ended): the task is
# read again at least this often (seconds), a backstop for a notification that cannot come (a
# connection through a pooler that does not pass LISTEN on, an end that sends none).
RECHECK = 5.0

_FRACTION = re.compile(r"\.(\d+)")


def _time(value: Any) -> Optional[_dt.datetime]:
    """An RFC 3339 time as PostgreSQL writes it in JSON (any number of fraction digits)."""
    if value is None or isinstance(value, _dt.datetime):
        return value
    text = str(value).replace("Z", "+00:00")
    text = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], text, count=1)
    return _dt.datetime.fromisoformat(text)


@dataclass(frozen=True)
class Task:
    """A task as `get_task` shows it (see docs/sql-api.md, get_task)."""

    id: str
    type: str
    stage: str
    status: str
    priority: int
    attempt: int
    retry_count: int
    max_retry_num: int
    max_retry_interval: int
    claim_seq: int
    context: Any
    created_at: _dt.datetime
    updated_at: _dt.datetime
    order_time: Optional[_dt.datetime] = None
    owner: Optional[str] = None
    lease_until: Optional[_dt.datetime] = None
    user_id: Optional[str] = None
    queue_key: Optional[str] = None
    idempotency_key: Optional[str] = None
    result: Any = None
    error: Optional[str] = None
    schedule_log: List[Dict[str, Any]] = field(default_factory=list)
    finished_at: Optional[_dt.datetime] = None
    progress: Any = None
    schedule: Optional[str] = None
    traceparent: Optional[str] = None
    #: every field as the server sent it, those above and any newer one
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ended(self) -> bool:
        """Whether the task succeeded, failed for good, or was cancelled."""
        return self.status in ENDED

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "Task":
        """The task from get_task's JSON object."""
        known = {name for name in cls.__dataclass_fields__ if name != "raw"}
        kwargs = {k: v for k, v in value.items() if k in known}
        for name in ("created_at", "updated_at", "order_time", "lease_until", "finished_at"):
            if name in kwargs:
                kwargs[name] = _time(kwargs[name])
        kwargs.setdefault("schedule_log", [])
        return cls(raw=dict(value), **kwargs)


class TaskTimeout(TimeoutError):
    """The wait ran out before the task ended; `task` is the task as it was then."""

    def __init__(self, task: Task, timeout: float) -> None:
        super().__init__("task %s is still %s after %s s" % (task.id, task.status, timeout))
        self.task = task


class TaskNotFound(LookupError):
    """No task has this id."""

    def __init__(self, task_id: str) -> None:
        super().__init__("no task %s" % task_id)
        self.task_id = task_id


def _json_time(value: Any) -> Any:
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return value.isoformat() if isinstance(value, _dt.datetime) else value


def seconds(value: Any) -> Any:
    """A duration as seconds (a timedelta or a number), None kept: how debounce_for is sent."""
    return value.total_seconds() if isinstance(value, _dt.timedelta) else value


# The optional fields of one task, as create_tasks takes them.
TASK_FIELDS = (
    "context", "priority", "run_at", "stage", "idempotency_key", "user_id", "queue_key", "traceparent",
    "debounce_key", "debounce_for",
)


def task_fields(task: Mapping[str, Any]) -> Dict[str, Any]:
    """One element of enqueue_many: the fields given, times as RFC 3339 text, durations
    (debounce_for) as seconds."""
    unknown = set(task) - set(TASK_FIELDS)
    if unknown:
        raise TypeError("unknown task field(s) %s; known: %s" % (sorted(unknown), ", ".join(TASK_FIELDS)))
    return {k: _json_time(v) for k, v in task.items() if v is not None}
