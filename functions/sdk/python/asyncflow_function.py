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
"""

import json
import sys
import traceback

__all__ = ["run", "serve"]


def _call_handle(handle, call):
    try:
        reply = handle(call)
    except Exception as e:  # noqa: BLE001 - every failure of the handler is the call's failure
        traceback.print_exc(file=sys.stderr)
        return {"error": "%s: %s" % (type(e).__name__, e), "retry": True}
    if not isinstance(reply, dict):
        return {"error": "the handler returned %s, not a reply object" % type(reply).__name__, "retry": False}
    return reply


def serve(handle, stdin, stdout):
    """Runs the loop on the given binary streams; returns the process's exit status."""
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
            reply = dict(_call_handle(handle, call))
            reply["id"] = call_id
            _write(stdout, reply)
    finally:
        sys.stdout = real_stdout


def _write(stdout, reply):
    stdout.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
    stdout.flush()


def run(handle):
    """Serves calls from stdin with `handle` until stdin closes (warm) or after the one call."""
    sys.exit(serve(handle, sys.stdin.buffer, sys.stdout.buffer))
