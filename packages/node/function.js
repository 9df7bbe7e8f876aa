'use strict';
// The loop of an asyncflow function in Node (no dependencies).
//
//   const { run, progress } = require('asyncflow/function');
//   run(async (call, { signal }) => ({ result: call.context }));
//
// handle(call, { signal }) takes the stage call (task_id, type, stage, context, attempt,
// priority, user_id, deadline, queue_key when the task has one, event and timed_out after a
// wait, and children after a spawn's join) and returns (or resolves to) one reply object:
// {next_stage, context}, {result}, {error, retry}, {later, context},
// {wait: {event, timeout}, next_stage, context} or {spawn: [{type, context}, ...], next_stage,
// context} (the children run; next_stage gets children: [{id, type, status, result, error}]
// once all have ended). A throw or
// a rejection becomes {error: "...", retry: true} (the stack goes to stderr, the worker's log).
//
// run serves both modes of function.toml:
// - mode = "warm": calls arrive one per line on stdin, each with an "id"; each reply is written as
//   one line on stdout with the same "id", until stdin closes. Calls run at once, as many as the
//   worker sends (`concurrency` in function.toml; one at a time without it). A line
//   {"cancel": "<id>"} (the call timed out or its task was cancelled) aborts that call's `signal`
//   and answers {"id", "cancelled": true} at once; what the handler returns after is dropped.
// - the default, one process per call: the single call on stdin has no "id"; its reply is written
//   and the program ends.
// console.log goes to stderr, so that a stray log line cannot break the protocol.
//
// progress(value) reports how far the running call has got: a small JSON value (at most 4096
// bytes), e.g. progress({ percent: 40, message: 'encoding' }), shown by get_task as `progress`
// while the call runs. The worker keeps the task's lease alive while the call runs, so there is
// no heartbeat to send.
//
// checkpoint(context) saves the running call's context without ending it: the task's whole
// context becomes `context` (an object), and a retry of the stage (after a failure, a crash, a
// lost lease) starts from it. In warm mode it is one line on stdout, {"id", "checkpoint": {...}},
// which the worker writes to the database before it reads the call's reply; the promise resolves
// once the line is written. In the one-process-per-call mode it is one line on stderr,
// `asyncflow:checkpoint {...}`, which the worker writes while the process runs on, and before the
// call's reply. step(name, fn) runs fn() once per task: its result is kept in the context under
// "_steps" and checkpointed, so a retry gets the kept result instead of running fn again.

const readline = require('readline');
const { AsyncLocalStorage } = require('async_hooks');

// Largest progress value, as JSON text (the worker refuses larger ones).
const PROGRESS_BYTES_MAX = 4096;
// Where step() keeps the results of the steps done, in the task's context.
const STEPS_KEY = '_steps';

// The call whose code runs now: its id in warm mode (a progress line names it, so that a line the
// worker reads late is never taken for another call's) and its last progress, which goes again
// with its reply. One store per call, so concurrent calls keep their own.
const current = new AsyncLocalStorage();

// Reports the running call's progress: one stderr line, `asyncflow:progress <json>` (in warm
// mode `asyncflow:progress:<call id> <json>`), sent by the worker with its next heartbeat; the
// last value goes again with the call's reply. Throws a RangeError for a value larger than PROGRESS_BYTES_MAX, a TypeError for one JSON
// cannot hold.
function progress(value) {
  const text = JSON.stringify(value);
  if (text === undefined) {
    throw new TypeError('progress must be a JSON value, not ' + typeof value);
  }
  const size = Buffer.byteLength(text);
  if (size > PROGRESS_BYTES_MAX) {
    throw new RangeError('progress is ' + size + ' bytes of JSON, the limit is ' + PROGRESS_BYTES_MAX);
  }
  const store = current.getStore();
  if (store !== undefined) {
    store.progress = value;
    store.reported = true;
  }
  const callId = store === undefined ? undefined : store.id;
  // a pipe: written at once on Linux, before the reply that follows it
  process.stderr.write('asyncflow:progress' + (callId === undefined ? '' : ':' + callId) + ' ' + text + '\n');
}

// Saves the running call's context (see the top of this file); resolves once written.
function checkpoint(context) {
  if (context === null || typeof context !== 'object' || Array.isArray(context)) {
    return Promise.reject(new TypeError("a checkpoint's context is a plain object, not " + (Array.isArray(context) ? 'an array' : typeof context)));
  }
  const store = current.getStore();
  if (store === undefined || store.call === undefined) {
    return Promise.reject(new Error('checkpoint() is for the call being served (inside the handler)'));
  }
  try {
    JSON.stringify(context); // a context JSON cannot hold (a cycle, a BigInt) throws here, before any change
  } catch (e) {
    return Promise.reject(e);
  }
  store.call.context = context;
  if (store.id === undefined || store.write === undefined) {
    // one process per call: a stderr line (a pipe: written at once on Linux, before the reply),
    // which the worker writes to the database before the reply
    process.stderr.write('asyncflow:checkpoint ' + JSON.stringify(context) + '\n');
    return Promise.resolve();
  }
  return store.write({ id: store.id, checkpoint: context });
}

// Runs fn() once per task, keeping its result in the context (see the top of this file):
// resolves to the kept result on a retry, without calling fn again.
async function step(name, fn) {
  const store = current.getStore();
  if (store === undefined || store.call === undefined) {
    throw new Error('step() is for the call being served (inside the handler)');
  }
  const context = store.call.context && typeof store.call.context === 'object' ? store.call.context : {};
  const done = context[STEPS_KEY] && typeof context[STEPS_KEY] === 'object' ? context[STEPS_KEY] : {};
  if (Object.prototype.hasOwnProperty.call(done, name)) {
    return done[name];
  }
  const value = await fn();
  const now = store.call.context && typeof store.call.context === 'object' ? store.call.context : {};
  const steps = Object.assign({}, now[STEPS_KEY], { [name]: value });
  await checkpoint(Object.assign({}, now, { [STEPS_KEY]: steps }));
  return value;
}

async function callHandle(handle, call, signal) {
  const store = current.getStore();
  if (store === undefined) {
    return current.run({ id: undefined, reported: false, call }, () => callHandle(handle, call, signal));
  }
  store.call = call;
  try {
    const reply = await handle(call, { signal: signal || new AbortController().signal });
    if (reply === null || typeof reply !== 'object' || Array.isArray(reply)) {
      return { error: 'the handler returned ' + typeof reply + ', not a reply object', retry: false };
    }
    // the call's last progress goes with its reply, unless the handler gave one itself
    if (store.reported && !Object.prototype.hasOwnProperty.call(reply, 'progress')) {
      return Object.assign({}, reply, { progress: store.progress });
    }
    return reply;
  } catch (e) {
    process.stderr.write((e && e.stack ? e.stack : String(e)) + '\n');
    return { error: (e && e.name ? e.name + ': ' : '') + (e && e.message !== undefined ? e.message : String(e)), retry: true };
  }
}

// Serves `input` (a readable stream of lines) writing replies with `write(reply)`; resolves when
// the input ends and every call has answered.
function serve(handle, input, write) {
  return new Promise((resolve) => {
    const lines = readline.createInterface({ input, crlfDelay: Infinity });
    const running = new Map(); // call id -> AbortController
    const all = new Set();
    let pending = null; // a call written over several lines (one process per call)
    let done = false;
    const finish = () => {
      done = true;
      lines.close();
    };
    const one = (call) => {
      if (call === null || typeof call !== 'object' || Array.isArray(call)) {
        return write({ error: 'the stage call is not a JSON object', retry: false }).then(finish);
      }
      if (!Object.prototype.hasOwnProperty.call(call, 'id')) {
        return callHandle(handle, call).then(write).then(finish);
      }
      const id = call.id;
      delete call.id;
      const abort = new AbortController();
      running.set(String(id), abort);
      const store = { id: String(id), reported: false, write };
      return current.run(store, () => callHandle(handle, call, abort.signal)).then((reply) => {
        if (running.get(String(id)) !== abort) return undefined; // cancelled: answered already
        running.delete(String(id));
        return write(Object.assign({}, reply, { id }));
      });
    };
    const track = (p) => {
      all.add(p);
      p.finally(() => all.delete(p));
    };
    lines.on('line', (line) => {
      if (done) return;
      if (pending !== null) {
        pending += '\n' + line;
        return;
      }
      if (!line.trim()) return;
      let call;
      try {
        call = JSON.parse(line);
      } catch (e) {
        pending = line;
        return;
      }
      if (call && typeof call === 'object' && 'cancel' in call && !('task_id' in call)) {
        const abort = running.get(String(call.cancel));
        if (abort) {
          running.delete(String(call.cancel));
          abort.abort();
          track(write({ id: call.cancel, cancelled: true }));
        }
        return;
      }
      track(one(call));
    });
    lines.on('close', () => {
      const rest = () => Promise.all([...all]).then(() => resolve(0));
      if (pending === null || done) return rest();
      let call;
      try {
        call = JSON.parse(pending);
      } catch (e) {
        return write({ error: 'stdin is not a JSON stage call: ' + e.message, retry: false }).then(() => resolve(0));
      }
      return one(call).then(rest);
    });
  });
}

function writeStdout(reply) {
  return new Promise((resolve) => process.stdout.write(JSON.stringify(reply) + '\n', () => resolve()));
}

// Serves calls from stdin with `handle` until stdin closes (warm) or after the one call.
function run(handle) {
  console.log = console.error;
  serve(handle, process.stdin, writeStdout).then((status) => {
    process.exitCode = status;
  });
}

module.exports = { run, serve, callHandle, progress, checkpoint, step, PROGRESS_BYTES_MAX, STEPS_KEY };
