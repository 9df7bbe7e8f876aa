'use strict';
// The HTTP client against a real `asyncflow serve`: ASYNCFLOW_TEST_SERVER (and
// ASYNCFLOW_TEST_TOKEN) name it, ASYNCFLOW_TEST_URL its database (the suite sets them).
const test = require('node:test');
const assert = require('node:assert');
const crypto = require('crypto');
const { Client } = require('pg');
const { HttpClient, HttpError, TaskTimeout, TaskNotFound } = require('../http');

const server = process.env.ASYNCFLOW_TEST_SERVER;
const url = process.env.ASYNCFLOW_TEST_URL;
const skip = !server || !url ? 'ASYNCFLOW_TEST_SERVER and ASYNCFLOW_TEST_URL are not set (the suite sets them)' : false;

test('the HTTP client makes the same calls and long-polls the end', { skip }, async () => {
  const db = new Client({ connectionString: url });
  await db.connect();
  try {
    const type = 'jh' + crypto.randomBytes(6).toString('hex');
    await db.query('select asyncflow.register_task_type($1)', [type]);
    const client = new HttpClient(server + '/', { token: process.env.ASYNCFLOW_TEST_TOKEN });
    const id = await client.enqueue(type, { h: 1 }, { priority: 2, idempotencyKey: 'hk', runAt: new Date(Date.now() - 1000) });
    assert.strictEqual(await client.enqueue(type, { h: 2 }, { idempotencyKey: 'hk' }), id);
    const ids = await client.enqueueMany(type, [{ context: { n: 1 } }, { context: { n: 2 }, priority: 3 }]);
    assert.strictEqual(ids.length, 2);
    const task = await client.getTask(id);
    assert.deepStrictEqual([task.priority, task.context, task.status, task.idempotencyKey], [2, { h: 1 }, 'pending', 'hk']);
    assert.ok(task.createdAt instanceof Date);
    assert.strictEqual((await client.getTask(ids[1])).priority, 3);
    assert.strictEqual(await client.getTask(type + '-1-999999'), null);
    await assert.rejects(client.wait(id, 0.3), (e) => e instanceof TaskTimeout && e.task.status === 'pending');
    setTimeout(() => { client.cancel(id); }, 500);
    const started = Date.now();
    assert.strictEqual((await client.wait(id, 30)).status, 'cancelled');
    assert.ok(Date.now() - started < 4000, 'answered when the task ended');
    assert.strictEqual(await client.cancel(id), false);
    assert.strictEqual(await client.retry(id), true);
    assert.strictEqual(await client.retry(id), false);
    await assert.rejects(client.wait(type + '-1-999999', 1), TaskNotFound);
    assert.strictEqual(await client.sendEvent('nobody:waits', { x: 1 }), 0);
    await assert.rejects(client.sendEvent('not a key!'), (e) => e instanceof HttpError && e.status === 400);
    await assert.rejects(client.enqueue('Not A Type!'), (e) => e instanceof HttpError && e.status === 400 && e.code !== '');
    await assert.rejects(client.enqueue(type, {}, { prio: 1 }), TypeError);
    const denied = new HttpClient(server, { token: 'wrong-token' });
    await assert.rejects(denied.getTask(id), (e) => e instanceof HttpError && e.status === 401);
  } finally {
    await db.end();
  }
});
