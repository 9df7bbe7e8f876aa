"""The loop of an asyncflow function in Python (standard library only).

    import asyncflow_function

    def handle(call):
        return {"result": call["context"]}

    asyncflow_function.run(handle)

`handle(call)` takes the stage call (a dict: task_id, type, stage, context, attempt, priority,
user_id, deadline, and queue_key when the task has one) and returns one reply dict:
{"next_stage": ..., "context": ...}, {"result": ...}, {"error": ..., "retry": ...} or
{"later": seconds, "context": ...}. An exception it raises becomes {"error": "...", "retry": true}
(the traceback goes to stderr, the worker's log).

`run` serves both modes of function.toml:
- mode = "warm": calls arrive one per line on stdin, each with an "id"; each reply is written as
  one line on stdout with the same "id", and the loop waits for the next call until stdin closes;
- the default, one process per call: the single call on stdin has no "id"; its reply is written
  and the program ends.
While `handle` runs, print() goes to stderr, so that a stray print cannot break the protocol.

`progress(value)` reports how far the running call has got: a small JSON value (at most 4096
bytes), e.g. progress({"percent": 40, "message": "encoding"}). It is shown by get_task as
`progress` while the call runs, and the last value is sent again with the call's reply (its
"progress"), so a value reported just before the reply is kept. The worker keeps the task's lease
alive for as long as the call runs, so there is no heartbeat to send.
"""

import json
import sys
import traceback

__all__ = ["progress", "run", "serve"]

# Largest progress value, as JSON text (the worker refuses larger ones).
PROGRESS_BYTES_MAX = 4096

# The id of the call being served in warm mode (the last one once it has replied): a progress
# line names it, so that a line the worker reads late is never taken for the next call's.
_call_id = None

# The running call's last progress (_NONE: none yet), sent again with its reply.
_NONE = object()
_last_progress = _NONE


def _call_handle(handle, call):
    global _last_progress
    _last_progress = _NONE
    try:
        reply = handle(call)
    except Exception as e:  # noqa: BLE001 - every failure of the handler is the call's failure
        traceback.print_exc(file=sys.stderr)
        return {"error": "%s: %s" % (type(e).__name__, e), "retry": True}
    if not isinstance(reply, dict):
        return {"error": "the handler returned %s, not a reply object" % type(reply).__name__, "retry": False}
    # the call's last progress goes with its reply, unless the handler gave one itself
    if _last_progress is not _NONE and "progress" not in reply:
        reply = dict(reply, progress=_last_progress)
    return reply


def serve(handle, stdin, stdout):
    """Runs the loop on the given binary streams; returns the process's exit status."""
    global _call_id
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        while True:
            line = stdin.readline()
            if not line:
                return 0
            if not line.strip():
                continue
            try:
                call = json.loads(line)
            except ValueError:
                # one call per process, written over several lines: the rest of stdin is the call
                try:
                    call = json.loads(line + stdin.read())
                except ValueError as e:
                    _write(stdout, {"error": "stdin is not a JSON stage call: %s" % e, "retry": False})
                    return 0
            if not isinstance(call, dict):
                _write(stdout, {"error": "the stage call is not a JSON object", "retry": False})
                return 0
            if "id" not in call:
                _write(stdout, _call_handle(handle, call))
                return 0
            call_id = call.pop("id")
            _call_id = call_id
            reply = dict(_call_handle(handle, call))
            reply["id"] = call_id
            _write(stdout, reply)
    finally:
        sys.stdout = real_stdout


def _write(stdout, reply):
    stdout.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
    stdout.flush()


def progress(value):
    """Reports the running call's progress (any JSON value of at most 4096 bytes).

    Written to stderr as one line, `asyncflow:progress <json>` (in warm mode
    `asyncflow:progress:<call id> <json>`); the worker sends it with its next heartbeat, and the
    last value goes again with the call's reply.
    Raises ValueError for a value larger than that, TypeError for one JSON cannot hold.
    """
    global _last_progress
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    # measured as the worker measures it: UTF-8, not \u escapes
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > PROGRESS_BYTES_MAX:
        raise ValueError("progress is %d bytes of JSON, the limit is %d" % (size, PROGRESS_BYTES_MAX))
    _last_progress = value
    tag = "" if _call_id is None else ":%s" % _call_id
    sys.stderr.write("asyncflow:progress%s %s\n" % (tag, text))
    sys.stderr.flush()


def run(handle):
    """Serves calls from stdin with `handle` until stdin closes (warm) or after the one call."""
    sys.exit(serve(handle, sys.stdin.buffer, sys.stdout.buffer))
