'use strict';
// The loop of an asyncflow function in Node (no dependencies).
//
//   const { run } = require('./asyncflow-function');
//   run(async (call) => ({ result: call.context }));
//
// handle(call) takes the stage call (task_id, type, stage, context, attempt, priority, user_id,
// deadline, and queue_key when the task has one) and returns (or resolves to) one reply object:
// {next_stage, context}, {result}, {error, retry} or {later, context}. A throw or a rejection
// becomes {error: "...", retry: true} (the stack goes to stderr, the worker's log).
//
// run serves both modes of function.toml:
// - mode = "warm": calls arrive one per line on stdin, each with an "id"; each reply is written as
//   one line on stdout with the same "id", one call at a time, until stdin closes;
// - the default, one process per call: the single call on stdin has no "id"; its reply is written
//   and the program ends.
// console.log goes to stderr, so that a stray log line cannot break the protocol.
//
// progress(value) reports how far the running call has got: a small JSON value (at most 4096
// bytes), e.g. progress({ percent: 40, message: 'encoding' }). It is shown by get_task as
// `progress` while the call runs, and the last value is sent again with the call's reply (its
// "progress"), so a value reported just before the reply is kept. The worker keeps the task's
// lease alive for as long as the call runs, so there is no heartbeat to send.

const readline = require('readline');

// Largest progress value, as JSON text (the worker refuses larger ones).
const PROGRESS_BYTES_MAX = 4096;

// The id of the call being served in warm mode (the last one once it has replied): a progress
// line names it, so that a line the worker reads late is never taken for the next call's.
let callId = null;
// The running call's last progress (undefined: none yet), sent again with its reply.
let lastProgress;

// Reports the running call's progress: one stderr line, `asyncflow:progress <json>` (in warm
// mode `asyncflow:progress:<call id> <json>`), sent by the worker with its next heartbeat.
// Throws a RangeError for a value larger than PROGRESS_BYTES_MAX, a TypeError for one JSON
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
  lastProgress = value;
  // a pipe: written at once on Linux, before the reply that follows it (but read apart from it)
  process.stderr.write('asyncflow:progress' + (callId === null ? '' : ':' + callId) + ' ' + text + '\n');
}

async function callHandle(handle, call) {
  lastProgress = undefined;
  try {
    const reply = await handle(call);
    if (reply === null || typeof reply !== 'object' || Array.isArray(reply)) {
      return { error: 'the handler returned ' + typeof reply + ', not a reply object', retry: false };
    }
    // the call's last progress goes with its reply, unless the handler gave one itself
    if (lastProgress !== undefined && !Object.prototype.hasOwnProperty.call(reply, 'progress')) {
      return Object.assign({}, reply, { progress: lastProgress });
    }
    return reply;
  } catch (e) {
    process.stderr.write((e && e.stack ? e.stack : String(e)) + '\n');
    return { error: (e && e.name ? e.name + ': ' : '') + (e && e.message !== undefined ? e.message : String(e)), retry: true };
  }
}

function write(reply) {
  return new Promise((resolve) => process.stdout.write(JSON.stringify(reply) + '\n', resolve));
}

function run(handle) {
  console.log = console.error;
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  let chain = Promise.resolve();
  let pending = null; // a call written over several lines (one process per call)
  let done = false;
  const finish = () => {
    done = true;
    lines.close();
    process.exitCode = 0;
  };
  const serveOne = async (call) => {
    if (call === null || typeof call !== 'object' || Array.isArray(call)) {
      await write({ error: 'the stage call is not a JSON object', retry: false });
      return finish();
    }
    if (!Object.prototype.hasOwnProperty.call(call, 'id')) {
      await write(await callHandle(handle, call));
      return finish();
    }
    const id = call.id;
    delete call.id;
    callId = String(id);
    const reply = Object.assign({}, await callHandle(handle, call), { id });
    await write(reply);
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
    chain = chain.then(() => (done ? undefined : serveOne(call)));
  });
  lines.on('close', () => {
    if (pending === null || done) return;
    chain = chain.then(async () => {
      let call;
      try {
        call = JSON.parse(pending);
      } catch (e) {
        await write({ error: 'stdin is not a JSON stage call: ' + e.message, retry: false });
        return finish();
      }
      return serveOne(call);
    });
  });
}

module.exports = { run, callHandle, progress };
