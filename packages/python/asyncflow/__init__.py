"""asyncflow for Python: enqueue in the application's transaction, wait, write functions.

    import asyncflow, psycopg

    with psycopg.connect(url) as conn:                   # the application's transaction
        task_id = asyncflow.enqueue(conn, "invoice", {"order": 7})
    task = asyncflow.wait(url, task_id, timeout=30)      # the ended task, or TaskTimeout

- `asyncflow.enqueue`, `enqueue_many`, `get_task`, `cancel`, `retry`, `send_event`, `wait`
  (`asyncflow.client`):
  on a psycopg 3 connection; `asyncflow.aio` has the same for `psycopg.AsyncConnection`.
- `asyncflow.http.Client`: the same calls against `asyncflow serve` (standard library only).
- `asyncflow.function`: the loop of a function (`run`, `progress`; standard library only).

The client names (and the task's) are loaded on first use, so that `import asyncflow.function`
(and `asyncflow.http`) work without psycopg installed, and a function's process starts sooner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - for type checkers; loaded lazily below
    from ._task import ENDED, Task, TaskNotFound, TaskTimeout
    from .client import cancel, enqueue, enqueue_many, get_task, retry, send_event, wait

__all__ = [
    "ENDED",
    "Task",
    "TaskNotFound",
    "TaskTimeout",
    "cancel",
    "enqueue",
    "enqueue_many",
    "get_task",
    "retry",
    "send_event",
    "wait",
]

__version__ = "0.1.0"

_CLIENT = {"cancel", "enqueue", "enqueue_many", "get_task", "retry", "send_event", "wait"}
_TASK = {"ENDED", "Task", "TaskNotFound", "TaskTimeout"}


def __getattr__(name: str) -> Any:
    if name in _CLIENT or name in _TASK:
        import importlib

        value = getattr(importlib.import_module(".client" if name in _CLIENT else "._task", __name__), name)
        globals()[name] = value  # looked up here once: the next use finds it directly
        return value
    raise AttributeError("module 'asyncflow' has no attribute %r" % name)
