'use strict';
// The function loop (no database).
const test = require('node:test');
const assert = require('node:assert');
const { PassThrough } = require('stream');
const { serve, progress } = require('../function');

function harness(handle) {
  const input = new PassThrough();
  const replies = [];
  const done = serve(handle, input, async (r) => { replies.push(r); });
  return { input, replies, done, send: (o) => input.write(JSON.stringify(o) + '\n') };
}

test('async calls run at once, each answered with its id', async () => {
  let now = 0;
  let most = 0;
  const h = harness(async (call) => {
    now += 1;
    most = Math.max(most, now);
    await new Promise((r) => setTimeout(r, 100));
    now -= 1;
    return { result: call.context.n };
  });
  for (let n = 0; n < 20; n++) h.send({ id: String(n), context: { n } });
  h.input.end();
  await h.done;
  assert.strictEqual(most, 20);
  assert.deepStrictEqual(h.replies.map((r) => Number(r.id)).sort((a, b) => a - b), [...Array(20).keys()]);
  assert.ok(h.replies.every((r) => r.result === Number(r.id)));
});

test('a cancel line aborts its call alone and answers it once', async () => {
  let aborted = false;
  const h = harness(async (call, { signal }) => {
    if (call.context.long) {
      await new Promise((r) => signal.addEventListener('abort', () => { aborted = true; r(); }));
      return { result: 'too late' };
    }
    return { result: 'ok' };
  });
  h.send({ id: 'long', context: { long: true } });
  h.send({ id: 'short', context: {} });
  await new Promise((r) => setTimeout(r, 50));
  h.send({ cancel: 'long' });
  h.input.end();
  await h.done;
  assert.ok(aborted);
  assert.deepStrictEqual(h.replies.filter((r) => r.id === 'long'), [{ id: 'long', cancelled: true }]);
  assert.deepStrictEqual(h.replies.filter((r) => r.id === 'short'), [{ result: 'ok', id: 'short' }]);
});

test('a call without id is answered once; a throw is a failure with retry; progress is bounded', async () => {
  const h = harness(async () => { throw new Error('boom'); });
  h.send({ context: {} });
  h.input.end();
  await h.done;
  assert.strictEqual(h.replies.length, 1);
  assert.strictEqual(h.replies[0].retry, true);
  assert.match(h.replies[0].error, /boom/);
  assert.throws(() => progress('x'.repeat(5000)), RangeError);
});
