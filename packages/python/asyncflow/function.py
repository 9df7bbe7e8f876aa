"""The loop of an asyncflow function (standard library only).

    from asyncflow.function import run, progress

    def handle(call):                       # or: async def handle(call)
        return {"result": call["context"]}

    run(handle)

`handle(call)` takes the stage call (a dict: task_id, type, stage, context, attempt, priority,
user_id, deadline, queue_key when the task has one, event and timed_out after a wait, and
children after a spawn's join) and returns one reply dict: {"next_stage": ..., "context": ...},
{"result": ...}, {"error": ..., "retry": ...}, {"later": seconds, "context": ...},
{"wait": {"event": key, "timeout": seconds}, "next_stage": ..., "context": ...} or
{"spawn": [{"type": ..., "context": ...}, ...], "next_stage": ..., "context": ...} (the children
run, and next_stage gets "children": [{"id", "type", "status", "result", "error"}, ...] once all
have ended). An exception it raises becomes {"error": "...", "retry": true}
(the traceback goes to stderr, the worker's log).

`run` serves both modes of function.toml:
- mode = "warm": calls arrive one per line on stdin, each with an "id"; each reply is written as
  one line on stdout with the same "id", until stdin closes. An `async def` handler serves many
  calls at once (as many as the worker sends: `concurrency` in function.toml), each in its own
  asyncio task; a line `{"cancel": "<id>"}` (the call timed out or its task was cancelled)
  cancels that call's task, which then answers `{"id": ..., "cancelled": true}`. A plain `def`
  handler serves its calls one after the other.
- the default, one process per call: the single call on stdin has no "id"; its reply is written
  and the program ends.
While `handle` runs, print() goes to stderr, so that a stray print cannot break the protocol.

`progress(value)` reports how far the running call has got: a small JSON value (at most 4096
bytes), e.g. progress({"percent": 40, "message": "encoding"}), shown by get_task as `progress`
while the call runs. The worker keeps the task's lease alive while the call runs, so there is
no heartbeat to send.

`checkpoint(context)` saves the running call's context without ending it: the task's whole
context becomes `context` (a dict), and a retry of the stage (after a failure, a crash, a lost
lease) starts from it. In warm mode it is one line on stdout, `{"id": ..., "checkpoint": {...}}`,
which the worker writes to the database before it reads the call's reply; in the
one-process-per-call mode it is one line on stderr, `asyncflow:checkpoint {...}`, which the worker
writes while the process runs on, and before the call's reply. `step(name, fn)` runs
`fn()` once per task: its result is kept in the context under `"_steps"` and checkpointed, so a
retry gets the kept result instead of running `fn` again (in an `async def` handler, `await
step(...)`, whether `fn` is async or not).
"""

from __future__ import annotations

import contextvars
import functools
import json
import sys
import threading
import types
from collections.abc import Awaitable as _Awaitable
from typing import Any, Awaitable, BinaryIO, Callable, Dict, Optional, Union

__all__ = ["checkpoint", "progress", "run", "serve", "serve_async", "step", "PROGRESS_BYTES_MAX", "STEPS_KEY"]

# Where step() keeps the results of the steps done, in the task's context.
STEPS_KEY = "_steps"

# Largest progress value, as JSON text (the worker refuses larger ones).
PROGRESS_BYTES_MAX = 4096

Reply = Dict[str, Any]
Handler = Callable[[Dict[str, Any]], Union[Reply, Awaitable[Reply]]]

_NO_PROGRESS = object()


class _Serving:
    """The call being served, as progress(), checkpoint() and step() see it.

    - call_id: its id in warm mode (None for one call per process): a progress line names it, so
      that a line the worker reads late is never taken for another call's;
    - call: its dict (checkpoint() changes its context);
    - out: the stream its checkpoint lines go to (warm mode only);
    - in_async: served by the asyncio loop (an async def handler): step() is awaited then;
    - progress: its last progress, sent again with its reply (_NO_PROGRESS: none yet).
    """

    __slots__ = ("call_id", "call", "out", "in_async", "progress")

    def __init__(self, call_id: Optional[str], call: Dict[str, Any], out: Optional[BinaryIO], in_async: bool) -> None:
        self.call_id = call_id
        self.call = call
        self.out = out
        self.in_async = in_async
        self.progress: Any = _NO_PROGRESS


# One context variable, set once per call, so that each of the concurrent calls of an async
# handler has its own (a set costs about as much as a small object: one, not one per field).
_serving: contextvars.ContextVar[Optional[_Serving]] = contextvars.ContextVar("asyncflow_serving", default=None)

# The JSON of the lines: made once (json.loads and json.dumps with options build them per call).
_decoder = json.JSONDecoder()
_decode = _decoder.decode
_scan = _decoder.scan_once
_encode_checked = json.JSONEncoder(separators=(",", ":")).encode
_encode_default = json.JSONEncoder().default
try:
    from json.encoder import c_make_encoder as _c_make_encoder, encode_basestring_ascii as _ascii
except ImportError:  # pragma: no cover - an interpreter without the C accelerator
    _c_make_encoder = None


def _encode(value: Any) -> str:
    """json.dumps(value, separators=(",", ":")): what JSONEncoder.encode runs (the C encoder,
    made with a new memo of the containers seen, as encode makes it), without its Python steps
    around it (about half its cost on a reply)."""
    if _c_make_encoder is None:
        return _encode_checked(value)
    return "".join(_c_make_encoder({}, _encode_default, _ascii, None, ":", ",", False, False, True)(value, 0))


try:
    _PROBE = {"a": [1, 2.5, None, True, "\u00e9\n"], "b": {}}
    if _encode(_PROBE) != _encode_checked(_PROBE):
        raise TypeError("another output")
except (TypeError, ValueError):  # pragma: no cover - an interpreter whose C encoder differs
    _c_make_encoder = None

# One line at a time on stdout, whichever thread writes it.
_write_lock = threading.Lock()


def _isawaitable(value: Any) -> bool:
    """inspect.isawaitable, without importing inspect (asyncio and inspect are imported only by
    a handler that needs them: a warm instance or a forked call starts sooner)."""
    return isinstance(value, _Awaitable) or (
        isinstance(value, types.GeneratorType) and bool(value.gi_code.co_flags & 0x100)  # CO_ITERABLE_COROUTINE
    )


def _is_async_def(handle: Any) -> bool:
    """inspect.iscoroutinefunction, without importing inspect: an `async def` function, also
    behind functools.partial or as a bound method."""
    while isinstance(handle, functools.partial):
        handle = handle.func
    handle = getattr(handle, "__func__", handle)
    code = getattr(handle, "__code__", None)
    return isinstance(code, types.CodeType) and bool(code.co_flags & 0x80)  # CO_COROUTINE


def _with_progress(reply: Reply, serving: _Serving) -> Reply:
    """The call's last progress goes with its reply, unless the handler gave one itself."""
    if serving.progress is not _NO_PROGRESS and "progress" not in reply:
        return dict(reply, progress=serving.progress)
    return reply


def _checked(reply: Any) -> Reply:
    if not isinstance(reply, dict):
        return {"error": "the handler returned %s, not a reply object" % type(reply).__name__, "retry": False}
    return reply


def _failure(e: BaseException) -> Reply:
    import traceback

    traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    return {"error": "%s: %s" % (type(e).__name__, e), "retry": True}


def _call_handle(handle: Handler, call: Dict[str, Any], call_id: Optional[str], out: Optional[BinaryIO]) -> Reply:
    serving = _Serving(call_id, call, out, False)
    _serving.set(serving)
    try:
        reply = handle(call)
        if type(reply) is not dict and _isawaitable(reply):
            import asyncio

            reply = asyncio.run(_awaited(reply))
    except Exception as e:  # noqa: BLE001 - every failure of the handler is the call's failure
        return _failure(e)
    return _with_progress(reply, serving) if isinstance(reply, dict) else _checked(reply)


async def _awaited(value: Awaitable[Reply]) -> Reply:
    return await value


def _line_value(line: bytes) -> Any:
    """The JSON value of one line: json.loads, a third quicker for a line that is one value and
    its newline (decode's two whitespace regexes are skipped; anything else takes decode)."""
    text = line.decode("utf-8", "surrogatepass")
    try:
        value, end = _scan(text, 0)
    except (StopIteration, ValueError):
        return _decode(text)
    if end == len(text) or text[end:] in ("\n", "\r\n"):
        return value
    return _decode(text)


def _parse(line: bytes, stdin: BinaryIO) -> Any:
    try:
        return _line_value(line)
    except ValueError:
        # one call per process, written over several lines: the rest of stdin is the call
        return json.loads(line + stdin.read())


def serve(handle: Handler, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Runs the loop on the given binary streams, one call at a time; returns the exit status."""
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        while True:
            line = stdin.readline()
            if not line:
                return 0
            if line.isspace():
                continue
            try:
                call = _parse(line, stdin)
            except ValueError as e:
                _write(stdout, {"error": "stdin is not a JSON stage call: %s" % e, "retry": False})
                return 0
            if not isinstance(call, dict):
                _write(stdout, {"error": "the stage call is not a JSON object", "retry": False})
                return 0
            if "cancel" in call and "task_id" not in call:
                continue  # a call served here cannot be stopped halfway: the worker ends the process
            if "id" not in call:
                _write(stdout, _call_handle(handle, call, None, None))
                return 0
            call_id = call.pop("id")
            reply = dict(_call_handle(handle, call, str(call_id), stdout))
            reply["id"] = call_id
            _write(stdout, reply)
    finally:
        sys.stdout = real_stdout
        _serving.set(None)  # no call is being served once the loop has returned


async def serve_async(handle: Handler, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Runs the loop with every call in its own asyncio task; returns the exit status.

    stdin is read by a thread (a pipe or a file alike), replies are written by the event loop.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[Optional[bytes]] = asyncio.Queue()

    def read() -> None:
        try:
            for line in iter(stdin.readline, b""):
                loop.call_soon_threadsafe(lines.put_nowait, line)
        finally:
            loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, name="asyncflow-stdin", daemon=True).start()
    running: Dict[str, "asyncio.Task[None]"] = {}

    async def one(call_id: Any, call: Dict[str, Any]) -> None:
        serving = _Serving(str(call_id), call, stdout, True)
        _serving.set(serving)
        try:
            result = handle(call)
            reply = _checked(await result if _isawaitable(result) else result)
            reply = _with_progress(reply, serving)
        except Exception as e:  # noqa: BLE001 - every failure of the handler is the call's failure
            reply = _failure(e)
        reply = dict(reply)
        reply["id"] = call_id
        _write(stdout, reply)

    def ended(call_id: Any, task: "asyncio.Task[None]") -> None:
        running.pop(str(call_id), None)
        # cancelled, maybe before it began: the worker still waits for a line with its id
        if task.cancelled():
            _write(stdout, {"id": call_id, "cancelled": True})

    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        while True:
            line = await lines.get()
            if line is None:
                break
            if line.isspace():
                continue
            try:
                call = _line_value(line)
            except ValueError:
                rest = []
                while True:
                    more = await lines.get()
                    if more is None:
                        break
                    rest.append(more)
                try:
                    call = json.loads(line + b"".join(rest))
                except ValueError as e:
                    _write(stdout, {"error": "stdin is not a JSON stage call: %s" % e, "retry": False})
                    return 0
            if not isinstance(call, dict):
                _write(stdout, {"error": "the stage call is not a JSON object", "retry": False})
                return 0
            if "cancel" in call and "task_id" not in call:
                task = running.get(str(call["cancel"]))
                if task is not None:
                    task.cancel()
                continue
            if "id" not in call:
                reply = _checked(await _one_call(handle, call))
                _write(stdout, reply)
                return 0
            call_id = call.pop("id")
            task = asyncio.ensure_future(one(call_id, call))
            task.add_done_callback(lambda t, call_id=call_id: ended(call_id, t))
            running[str(call_id)] = task
        if running:
            await asyncio.gather(*running.values(), return_exceptions=True)
        return 0
    finally:
        sys.stdout = real_stdout


async def _one_call(handle: Handler, call: Dict[str, Any]) -> Any:
    serving = _Serving(None, call, None, True)
    _serving.set(serving)
    try:
        result = handle(call)
        reply = await result if _isawaitable(result) else result
    except Exception as e:  # noqa: BLE001
        return _failure(e)
    return _with_progress(reply, serving) if isinstance(reply, dict) else reply


def _write(stdout: BinaryIO, reply: Reply) -> None:
    line = _encode(reply).encode() + b"\n"
    with _write_lock:
        stdout.write(line)
        stdout.flush()


def checkpoint(context: Dict[str, Any]) -> None:
    """Saves the running call's context without ending the call (see the module's docs).

    The task's whole context becomes `context`; a retry of the stage starts from it. In warm mode
    the line is written (and flushed) before this returns, so the reply that follows comes after
    it; with one process per call it is a line on stderr, written by the worker before the
    reply. Raises TypeError for a context that is not a dict or that JSON cannot hold, RuntimeError
    outside a call. A checkpoint the database refuses (larger than its max_context_bytes) fails
    the call, with retry.
    """
    if not isinstance(context, dict):
        raise TypeError("a checkpoint's context is a dict (a JSON object), not %s" % type(context).__name__)
    serving = _serving.get()
    if serving is None:
        raise RuntimeError("checkpoint() is for the call being served (inside the handler)")
    call = serving.call
    try:
        text = json.dumps(context, separators=(",", ":"), allow_nan=False)
    except ValueError as e:
        raise TypeError("a checkpoint's context must be JSON: %s" % e) from None
    call["context"] = context
    call_id, out = serving.call_id, serving.out
    if call_id is None or out is None:
        # one process per call: a stderr line, which the worker writes before the reply
        sys.stderr.write("asyncflow:checkpoint %s\n" % text)
        sys.stderr.flush()
        return
    line = '{"id":%s,"checkpoint":%s}\n' % (json.dumps(call_id), text)
    with _write_lock:
        out.write(line.encode())
        out.flush()


def step(name: str, fn: Callable[[], Any]) -> Any:
    """Runs `fn()` once per task, keeping its result in the context (see the module's docs).

    When the context already has a result for `name` (a retry after the step was done), that
    result is returned and `fn` is not called. Otherwise `fn()` runs, its result goes into the
    context under `STEPS_KEY` and is checkpointed, and it is returned. In an `async def`
    handler `step` returns an awaitable (and `fn` may return one); in a plain `def` handler it
    returns the result, and `fn` must not return an awaitable. The result must be a JSON value.
    """
    serving = _serving.get()
    if serving is None:
        raise RuntimeError("step() is for the call being served (inside the handler)")
    call = serving.call
    if serving.in_async:
        return _step_async(call, name, fn)
    done = (call.get("context") or {}).get(STEPS_KEY) or {}
    if name in done:
        return done[name]
    value = fn()
    if _isawaitable(value):
        raise TypeError("step(%r): fn returned an awaitable in a plain def handler (make the handler async def)" % name)
    _keep_step(call, name, value)
    return value


async def _step_async(call: Dict[str, Any], name: str, fn: Callable[[], Any]) -> Any:
    done = (call.get("context") or {}).get(STEPS_KEY) or {}
    if name in done:
        return done[name]
    value = fn()
    if _isawaitable(value):
        value = await value
    _keep_step(call, name, value)
    return value


def _keep_step(call: Dict[str, Any], name: str, value: Any) -> None:
    context = dict(call.get("context") or {})
    steps = dict(context.get(STEPS_KEY) or {})
    steps[name] = value
    context[STEPS_KEY] = steps
    checkpoint(context)


def progress(value: Any) -> None:
    """Reports the running call's progress (any JSON value of at most 4096 bytes).

    Written to stderr as one line, `asyncflow:progress <json>` (in warm mode
    `asyncflow:progress:<call id> <json>`); the worker sends it with its next heartbeat, and the
    last value goes again with the call's reply.
    Raises ValueError for a value larger than that, TypeError for one JSON cannot hold.
    """
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    # measured as the worker measures it: UTF-8, not \u escapes
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > PROGRESS_BYTES_MAX:
        raise ValueError("progress is %d bytes of JSON, the limit is %d" % (size, PROGRESS_BYTES_MAX))
    serving = _serving.get()
    if serving is not None:
        serving.progress = value
    call_id = None if serving is None else serving.call_id
    tag = "" if call_id is None else ":%s" % call_id
    sys.stderr.write("asyncflow:progress%s %s\n" % (tag, text))
    sys.stderr.flush()


def run(handle: Handler) -> None:
    """Serves calls from stdin with `handle` until stdin closes (warm) or after the one call.

    An `async def` handler serves its calls concurrently (see the module's docs).
    """
    if _is_async_def(handle):
        import asyncio

        status = asyncio.run(serve_async(handle, sys.stdin.buffer, sys.stdout.buffer))
    else:
        status = serve(handle, sys.stdin.buffer, sys.stdout.buffer)
    sys.exit(status)
