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
// The same calls over HTTP, against `asyncflow serve`: require('asyncflow/http').
// Every call is one statement on the pg client (or pool) it is given, in whatever transaction
// that client is in: nothing here begins, commits or rolls back. Errors of the SQL API come as
// pg's errors, their `code` an SQLSTATE of class AF (docs/sql-api.md).

const { ENDED, TaskTimeout, TaskNotFound, taskFrom, OPTIONS, checkKeys, time, manyFields, RECHECK_SECONDS } = require('./task');

// Creates one task of `taskType` in the client's transaction; resolves to its id. With an
// `idempotencyKey` a task of the type already has, that task's id, and nothing is created. With a
// `debounceKey` and `debounceFor` (seconds), the task starts no earlier than debounceFor from now;
// while the key's task is pending and has not started, another enqueue with the key replaces its
// context, moves its start and resolves to its id.
async function enqueue(client, taskType, context = null, options = {}) {
  checkKeys(options, OPTIONS, 'option');
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
  const body = tasks.map(manyFields);
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

// Sends an event in the client's transaction: every task waiting for `eventKey` goes on to the
// stage it named, its call carrying `payload` (a JSON value, {} by default); a wait that begins
// later, within the event retention, finds it too. Resolves to how many waiting tasks it woke.
async function sendEvent(client, eventKey, payload = {}) {
  const r = await client.query('select asyncflow.send_event($1, $2::jsonb) as n',
    [eventKey, JSON.stringify(payload === undefined || payload === null ? {} : payload)]);
  return Number(r.rows[0].n);
}

const CHANNEL = 'asyncflow_ended';
const WATCH_MAX = 31536000;
// The waits in progress per client: the last one to end stops listening.
const listening = new WeakMap();

// Resolves to the task once it has ended; rejects with a TaskTimeout (its `task` as it is) after
// `timeout` seconds, a TaskNotFound when there is none. Woken by the notification the task's end
// sends (LISTEN asyncflow_ended, then asyncflow.watch_task), with a read every
// `options.recheck` seconds (5) as a backstop. `clientOrUrl`: a URL (a connection of its own), a
// pg.Pool (one of its clients for the wait), or a pg client outside a transaction
// (notifications arrive only between transactions; several waits may share it).
async function wait(clientOrUrl, taskId, timeout, options = {}) {
  checkKeys(options, new Set(['recheck']), 'option');
  if (typeof clientOrUrl === 'string') {
    const { Client } = require('pg');
    const client = new Client({ connectionString: clientOrUrl });
    await client.connect();
    try {
      return await waitOn(client, taskId, timeout, options);
    } finally {
      await client.end();
    }
  }
  if (typeof clientOrUrl.idleCount === 'number' && typeof clientOrUrl.connect === 'function') {
    const client = await clientOrUrl.connect(); // a pool: LISTEN needs one connection throughout
    try {
      return await waitOn(client, taskId, timeout, options);
    } finally {
      client.release();
    }
  }
  return waitOn(clientOrUrl, taskId, timeout, options);
}

async function waitOn(client, taskId, timeout, options) {
  const deadline = Date.now() + timeout * 1000;
  const recheck = (options.recheck ?? RECHECK_SECONDS) * 1000;
  let noted = false;
  let wake = null;
  const onNote = (n) => {
    if (n.channel === CHANNEL && n.payload === taskId) {
      noted = true;
      if (wake) wake();
    }
  };
  client.on('notification', onNote);
  listening.set(client, (listening.get(client) || 0) + 1);
  try {
    await client.query('listen ' + CHANNEL);
    const r = await client.query('select asyncflow.watch_task($1, $2)::text as t',
      [taskId, Math.min(Math.max(timeout, 0), WATCH_MAX)]);
    let task = r.rows[0].t === null ? null : taskFrom(JSON.parse(r.rows[0].t));
    for (;;) {
      if (task === null) throw new TaskNotFound(taskId);
      if (task.ended) return task;
      const left = deadline - Date.now();
      if (left <= 0) throw new TaskTimeout(task, timeout);
      if (!noted) {
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, Math.min(left, recheck));
          wake = () => { clearTimeout(timer); resolve(); };
        });
        wake = null;
      }
      noted = false;
      task = await getTask(client, taskId);
    }
  } finally {
    client.removeListener('notification', onNote);
    const left = listening.get(client) - 1;
    listening.set(client, left);
    if (left === 0) await client.query('unlisten ' + CHANNEL).catch(() => {});
  }
}

module.exports = { enqueue, enqueueMany, getTask, cancel, retry, sendEvent, wait, TaskTimeout, TaskNotFound, ENDED };
