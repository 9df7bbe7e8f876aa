'use strict';
// asyncflow for Node: enqueue in the application's transaction, wait for results.
//
//   const { Client } = require('pg');
//   const asyncflow = require('asyncflow');
//   await client.query('begin');
//   const id = await asyncflow.enqueue(client, 'invoice', { order: 7 }, { priority: 10 });
//   await client.query('commit');
//   const task = await asyncflow.wait(url, id, 30);   // the ended task, or a TaskTimeout
//
// Every call is one statement on the pg client (or pool) it is given, in whatever transaction
// that client is in: nothing here begins, commits or rolls back. Errors of the SQL API come as
// pg's errors, their `code` an SQLSTATE of class AF (docs/sql-api.md).

const ENDED = new Set(['succeeded', 'failed', 'cancelled']);
const POLL_FIRST_MS = 20;
const POLL_MAX_MS = 500;

// The wait ran out before the task ended; `task` is the task as it was then.
class TaskTimeout extends Error {
  constructor(task, timeout) {
    super('task ' + task.id + ' is still ' + task.status + ' after ' + timeout + ' s');
    this.name = 'TaskTimeout';
    this.task = task;
  }
}

// No task has this id.
class TaskNotFound extends Error {
  constructor(taskId) {
    super('no task ' + taskId);
    this.name = 'TaskNotFound';
    this.taskId = taskId;
  }
}

const TIMES = new Set(['created_at', 'updated_at', 'order_time', 'lease_until', 'finished_at', 'tick']);
const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const snake = (name) => name.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());

// A task from get_task's JSON: fields in camelCase, times as Dates (context, result, progress
// and the schedule log as they are).
function taskFrom(json) {
  const task = {};
  for (const [k, v] of Object.entries(json)) {
    task[camel(k)] = TIMES.has(k) && v !== null ? new Date(v) : v;
  }
  task.ended = ENDED.has(task.status);
  return task;
}

const OPTIONS = ['priority', 'runAt', 'stage', 'idempotencyKey', 'userId', 'queueKey', 'uniqueKey', 'uniqueFor', 'traceparent',
  'debounceKey', 'debounceFor'];
const MANY_FIELDS = new Set(['context', 'priority', 'runAt', 'stage', 'idempotencyKey', 'userId', 'queueKey', 'traceparent',
  'debounceKey', 'debounceFor']);

function checkKeys(given, known, what) {
  for (const k of Object.keys(given || {})) {
    if (!known.has(k)) throw new TypeError('unknown ' + what + ' ' + k + '; known: ' + [...known].join(', '));
  }
}

const time = (v) => (v instanceof Date ? v.toISOString() : v);

// Creates one task of `taskType` in the client's transaction; resolves to its id. With an
// `idempotencyKey` a task of the type already has, that task's id, and nothing is created. With a
// `debounceKey` and `debounceFor` (seconds), the task starts no earlier than debounceFor from now;
// while the key's task is pending and has not started, another enqueue with the key replaces its
// context, moves its start and resolves to its id.
async function enqueue(client, taskType, context = null, options = {}) {
  checkKeys(options, new Set(OPTIONS), 'option');
  const o = options || {};
  const r = await client.query(
    'select asyncflow.create_task($1, $2::jsonb, priority => $3, run_at => $4, stage => $5, idempotency_key => $6,' +
      ' user_id => $7, queue_key => $8, unique_key => $9, unique_for => $10, traceparent => $11,' +
      ' debounce_key => $12, debounce_for => make_interval(secs => $13)) as id',
    [taskType, JSON.stringify(context === null || context === undefined ? {} : context), o.priority ?? 0,
      time(o.runAt) ?? null, o.stage ?? null, o.idempotencyKey ?? null, o.userId ?? null, o.queueKey ?? null,
      o.uniqueKey ?? null, o.uniqueFor ?? null, o.traceparent ?? null, o.debounceKey ?? null, o.debounceFor ?? null],
  );
  return r.rows[0].id;
}

// Creates many tasks of one type in one statement; resolves to their ids in order. Each task is
// an object of the optional fields context, priority, runAt, stage, idempotencyKey, userId,
// queueKey, traceparent, debounceKey, debounceFor (seconds).
async function enqueueMany(client, taskType, tasks) {
  const body = tasks.map((t) => {
    checkKeys(t, MANY_FIELDS, 'task field');
    const out = {};
    for (const [k, v] of Object.entries(t || {})) if (v !== undefined && v !== null) out[snake(k)] = time(v);
    return out;
  });
  const r = await client.query('select asyncflow.create_tasks($1, $2::jsonb) as id', [taskType, JSON.stringify(body)]);
  return r.rows.map((row) => row.id);
}

// The task, or null when there is none.
async function getTask(client, taskId) {
  const r = await client.query('select asyncflow.get_task($1)::text as t', [taskId]);
  const text = r.rows[0] && r.rows[0].t;
  return text === null || text === undefined ? null : taskFrom(JSON.parse(text));
}

// Cancels a pending or running task; false when it had already ended.
async function cancel(client, taskId) {
  const r = await client.query('select asyncflow.cancel_task($1) as ok', [taskId]);
  return r.rows[0].ok === true;
}

// Queues a failed or cancelled task again; false when it was neither.
async function retry(client, taskId) {
  const r = await client.query('select asyncflow.retry_task($1) as ok', [taskId]);
  return r.rows[0].ok === true;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Resolves to the task once it has ended; rejects with a TaskTimeout (its `task` as it is) after
// `timeout` seconds, a TaskNotFound when there is none. `clientOrUrl`: a pg client or pool that
// sees other transactions' commits (not one inside the transaction that enqueued), or a URL (a
// connection of its own). Looks again after 20 ms, doubling to 0.5 s.
async function wait(clientOrUrl, taskId, timeout) {
  if (typeof clientOrUrl === 'string') {
    const { Client } = require('pg');
    const client = new Client({ connectionString: clientOrUrl });
    await client.connect();
    try {
      return await wait(client, taskId, timeout);
    } finally {
      await client.end();
    }
  }
  const deadline = Date.now() + timeout * 1000;
  let pause = POLL_FIRST_MS;
  for (;;) {
    const task = await getTask(clientOrUrl, taskId);
    if (task === null) throw new TaskNotFound(taskId);
    if (task.ended) return task;
    const left = deadline - Date.now();
    if (left <= 0) throw new TaskTimeout(task, timeout);
    await sleep(Math.min(pause, left));
    pause = Math.min(pause * 2, POLL_MAX_MS);
  }
}

module.exports = { enqueue, enqueueMany, getTask, cancel, retry, wait, TaskTimeout, TaskNotFound, ENDED };
