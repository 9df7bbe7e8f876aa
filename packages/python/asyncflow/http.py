"""The same calls against `asyncflow serve`, over HTTP (standard library only).

    client = asyncflow.http.Client("http://localhost:8080", token="...")
    task_id = client.enqueue("invoice", {"order": 7})
    task = client.wait(task_id, timeout=30)

Each call is its own request, so its own transaction on the server: use the psycopg client
(`asyncflow.enqueue`) to enqueue in the application's transaction. An error answer raises
`HttpError` with the server's status, code and message.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from ._task import Task, TaskNotFound, TaskTimeout, seconds, task_fields

__all__ = ["Client", "HttpError", "WAIT_MAX"]

# The longest wait the server holds one request for (GET /v1/tasks/{id}?wait=SECONDS).
WAIT_MAX = 60


class HttpError(Exception):
    """An error answer: `status` (HTTP), `code` and `message` (the server's error body)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__("%s %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message


class Client:
    """A client of one server; `token` is a bearer token of its ASYNCFLOW_TOKENS."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read()
            # the server's error body is {"code", "message"}
            try:
                err = json.loads(text)
            except ValueError:
                err = {}
            if not isinstance(err, dict):
                err = {}
            raise HttpError(e.code, str(err.get("code", "")), str(err.get("message", text[:200]))) from None

    def enqueue(
        self,
        task_type: str,
        context: Optional[Mapping[str, Any]] = None,
        *,
        priority: Optional[int] = None,
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
        """Creates one task (POST /v1/tasks); returns its id."""
        body: Dict[str, Any] = {"type": task_type}
        fields = {
            "context": context,
            "priority": priority,
            "run_at": run_at.isoformat() if run_at else None,
            "stage": stage,
            "idempotency_key": idempotency_key,
            "user_id": user_id,
            "queue_key": queue_key,
            "unique_key": unique_key,
            "unique_for": unique_for,
            "traceparent": traceparent,
            "debounce_key": debounce_key,
            "debounce_for": seconds(debounce_for),
        }
        body.update({k: v for k, v in fields.items() if v is not None})
        return str(self._call("POST", "/v1/tasks", body)["id"])

    def enqueue_many(self, task_type: str, tasks: Iterable[Mapping[str, Any]]) -> List[str]:
        """Creates many tasks of one type (POST /v1/tasks/bulk); their ids in order."""
        body = {"type": task_type, "tasks": [task_fields(t) for t in tasks]}
        return [str(i) for i in self._call("POST", "/v1/tasks/bulk", body)["ids"]]

    def get_task(self, task_id: str) -> Optional[Task]:
        """The task, or None when there is none."""
        try:
            return Task.from_json(self._call("GET", "/v1/tasks/" + urllib.parse.quote(task_id, safe="")))
        except HttpError as e:
            if e.status == 404:
                return None
            raise

    def cancel(self, task_id: str) -> bool:
        """Cancels a pending or running task; False when it had already ended."""
        path = "/v1/tasks/%s/cancel" % urllib.parse.quote(task_id, safe="")
        return bool(self._call("POST", path, {})["cancelled"])

    def retry(self, task_id: str) -> bool:
        """Queues a failed or cancelled task again; False when it was neither."""
        path = "/v1/tasks/%s/retry" % urllib.parse.quote(task_id, safe="")
        return bool(self._call("POST", path, {})["retried"])

    def send_event(self, event_key: str, payload: Any = None) -> int:
        """Sends an event (POST /v1/events); how many waiting tasks it woke."""
        body = {"key": event_key, "payload": {} if payload is None else payload}
        return int(self._call("POST", "/v1/events", body)["woken"])

    def wait(self, task_id: str, timeout: float) -> Task:
        """The task once it has ended, by long-polls of at most WAIT_MAX seconds each.

        Raises `TaskTimeout` (with `.task` as it is) after `timeout` seconds, `TaskNotFound`
        when there is no such task.
        """
        deadline = time.monotonic() + timeout
        path = "/v1/tasks/" + urllib.parse.quote(task_id, safe="")
        while True:
            left = max(0.0, deadline - time.monotonic())
            wait = min(WAIT_MAX, left)
            try:
                task = Task.from_json(self._call("GET", "%s?wait=%.3f" % (path, wait), timeout=wait + self.timeout))
            except HttpError as e:
                if e.status == 404:
                    raise TaskNotFound(task_id) from None
                raise
            if task.ended:
                return task
            if deadline - time.monotonic() <= 0:
                raise TaskTimeout(task, timeout)
