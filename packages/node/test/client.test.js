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
