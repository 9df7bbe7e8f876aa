'use strict';
// The client against a real database: ASYNCFLOW_TEST_URL names a migrated one (required).
const test = require('node:test');
const assert = require('node:assert');
const crypto = require('crypto');
const { Client } = require('pg');
const asyncflow = require('..');

const url = process.env.ASYNCFLOW_TEST_URL;
if (!url) throw new Error('ASYNCFLOW_TEST_URL must name a migrated asyncflow database');

async function connect() {
  const c = new Client({ connectionString: url });
  await c.connect();
  return c;
}

async function newType(c) {
  const name = 'js' + crypto.randomBytes(6).toString('hex');
  await c.query('select asyncflow.register_task_type($1)', [name]);
  return name;
}

test('a task enqueued in a rolled-back transaction never existed; a committed one is there', async () => {
  const c = await connect();
  try {
    const type = await newType(c);
    await c.query('begin');
    const gone = await asyncflow.enqueue(c, type, { order: 1 });
    assert.notStrictEqual(await asyncflow.getTask(c, gone), null, 'seen inside its own transaction');
    await c.query('rollback');
    assert.strictEqual(await asyncflow.getTask(c, gone), null);
    await c.query('begin');
    const kept = await asyncflow.enqueue(c, type, { order: 2 }, { priority: 5, idempotencyKey: 'k', userId: 'u', queueKey: 'q' });
    await c.query('commit');
    const task = await asyncflow.getTask(c, kept);
    assert.deepStrictEqual([task.type, task.status, task.context, task.priority, task.userId, task.queueKey, task.idempotencyKey],
      [type, 'pending', { order: 2 }, 5, 'u', 'q', 'k']);
    assert.ok(task.createdAt instanceof Date);
    assert.strictEqual(task.ended, false);
    assert.strictEqual(await asyncflow.enqueue(c, type, {}, { idempotencyKey: 'k' }), kept);
  } finally {
    await c.end();
  }
});

test('enqueueMany answers the ids in order and refuses an unknown field', async () => {
  const c = await connect();
  try {
    const type = await newType(c);
    const ids = await asyncflow.enqueueMany(c, type, [0, 1, 2].map((n) => ({ context: { n }, priority: n })));
    const tasks = await Promise.all(ids.map((id) => asyncflow.getTask(c, id)));
    assert.deepStrictEqual(tasks.map((t) => t.context.n), [0, 1, 2]);
    await assert.rejects(asyncflow.enqueueMany(c, type, [{ contxt: {} }]), TypeError);
    await assert.rejects(asyncflow.enqueue(c, 'Not A Type!'), (e) => /^AF/.test(e.code));
  } finally {
    await c.end();
  }
});

// Claims one task of the type as a worker would: [task id, claim_seq].
async function claimOne(c, type) {
  const r = await c.query("select task_id, claim_seq from asyncflow.claim_tasks($1, 'jsworker', 1)", [type]);
  return [r.rows[0].task_id, Number(r.rows[0].claim_seq)];
}

async function report(c, body) {
  await c.query("select * from asyncflow.report_tasks('jsworker', $1::jsonb)", [JSON.stringify([body])]);
}

test('wait is woken by the notification of the end, not by its re-read', async () => {
  const c = await connect();
  const pg = require('pg');
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  try {
    const type = await newType(c);
    const id = await asyncflow.enqueue(c, type, { n: 1 });
    const [claimed, seq] = await claimOne(c, type);
    assert.strictEqual(claimed, id);
    setTimeout(() => { report(c, { task_id: id, claim_seq: seq, outcome: 'succeed', result: { ok: true } }); }, 500);
    const started = Date.now();
    // a re-read every 600 s: only the notification can wake it in time
    const task = await asyncflow.wait(pool, id, 60, { recheck: 600 });
    assert.deepStrictEqual([task.status, task.result], ['succeeded', { ok: true }]);
    assert.ok(Date.now() - started < 10000, 'woken by the notification');
    // waits sharing one client: each woken by its own task's end
    const [a, b] = [await asyncflow.enqueue(c, type), await asyncflow.enqueue(c, type)];
    const shared = await connect();
    const both = Promise.all([asyncflow.wait(shared, a, 60, { recheck: 600 }), asyncflow.wait(shared, b, 60, { recheck: 600 })]);
    setTimeout(() => { asyncflow.cancel(c, a).then(() => new Promise((r) => setTimeout(r, 300))).then(() => asyncflow.cancel(c, b)); }, 300);
    assert.deepStrictEqual((await both).map((t) => t.status), ['cancelled', 'cancelled']);
    await shared.end();
    // a task that ended before the wait: at once
    assert.strictEqual((await asyncflow.wait(url, id, 60, { recheck: 600 })).status, 'succeeded');
    await assert.rejects(asyncflow.wait(c, id, 1, { recheks: 1 }), TypeError);
    const left = await c.query('select count(*)::int as n from asyncflow.task_waiters where task_type = $1', [type]);
    assert.strictEqual(left.rows[0].n, 0, "the waiter's row went with the notification");
  } finally {
    await pool.end();
    await c.end();
  }
});

test('sendEvent wakes the tasks waiting for its key, in the sender\'s transaction', async () => {
  const c = await connect();
  try {
    const type = await newType(c);
    const id = await asyncflow.enqueue(c, type);
    const [claimed, seq] = await claimOne(c, type);
    const key = 'order:' + id + '/paid';
    await report(c, { task_id: claimed, claim_seq: seq, outcome: 'wait', event: key, timeout: 600, stage: 'paid' });
    assert.strictEqual((await asyncflow.getTask(c, id)).status, 'waiting');
    await c.query('begin');
    assert.strictEqual(await asyncflow.sendEvent(c, key, { amount: 5 }), 1);
    await c.query('rollback');
    assert.strictEqual((await asyncflow.getTask(c, id)).status, 'waiting');
    assert.strictEqual(await asyncflow.sendEvent(c, key, { amount: 5 }), 1);
    const task = await asyncflow.getTask(c, id);
    assert.deepStrictEqual([task.status, task.stage], ['pending', 'paid']);
    assert.strictEqual(await asyncflow.sendEvent(c, 'nobody:waits'), 0);
    await assert.rejects(asyncflow.sendEvent(c, 'not a key!'), (e) => /^AF/.test(e.code));
  } finally {
    await c.end();
  }
});

test('cancel, retry, and wait: the ended task, or a TaskTimeout carrying it as it is', async () => {
  const c = await connect();
  try {
    const type = await newType(c);
    assert.strictEqual(await asyncflow.getTask(c, type + '-1-999999'), null);
    const id = await asyncflow.enqueue(c, type, { x: 1 });
    await assert.rejects(asyncflow.wait(url, id, 0.2), (e) => e instanceof asyncflow.TaskTimeout && e.task.status === 'pending');
    setTimeout(() => { connect().then(async (o) => { await asyncflow.cancel(o, id); await o.end(); }); }, 300);
    const task = await asyncflow.wait(c, id, 30);
    assert.strictEqual(task.status, 'cancelled');
    assert.strictEqual(await asyncflow.cancel(c, id), false);
    assert.strictEqual(await asyncflow.retry(c, id), true);
    assert.strictEqual(await asyncflow.retry(c, id), false);
    await assert.rejects(asyncflow.wait(c, type + '-1-999999', 1), asyncflow.TaskNotFound);
  } finally {
    await c.end();
  }
});

test('debounceKey and debounceFor: a second enqueue replaces the pending task and moves its start', async () => {
  const c = await connect();
  try {
    const type = await newType(c);
    const first = await asyncflow.enqueue(c, type, { v: 1 }, { debounceKey: 'doc:1', debounceFor: 30 });
    const second = await asyncflow.enqueue(c, type, { v: 2 }, { debounceKey: 'doc:1', debounceFor: 60 });
    assert.strictEqual(second, first);
    const task = await asyncflow.getTask(c, first);
    assert.deepStrictEqual(task.context, { v: 2 });
    const [many] = await asyncflow.enqueueMany(c, type, [{ context: { v: 3 }, debounceKey: 'doc:1', debounceFor: 0.5 }]);
    assert.strictEqual(many, first);
    await assert.rejects(asyncflow.enqueue(c, type, {}, { debounceKey: 'doc:1', debounceFor: 0 }), /debounce_for/);
    await assert.rejects(asyncflow.enqueue(c, type, {}, { debounceFor: 5 }), /needs a debounce_key/);
  } finally {
    await c.end();
  }
});
