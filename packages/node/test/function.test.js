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

test('step runs its fn once across a retry: its result is checkpointed before the reply', async () => {
  const { step, checkpoint } = require('../function');
  let runs = 0;
  const handle = async (call) => {
    const charged = await step('charge', async () => { runs += 1; return { receipt: 'r-' + runs }; });
    if (call.attempt === 1) throw new Error('flaky after the charge');
    return { result: { charged, context: call.context } };
  };
  // first attempt: the checkpoint line, then the failure
  const first = harness(handle);
  first.send({ id: '1', attempt: 1, context: { order: 7 } });
  first.input.end();
  await first.done;
  assert.deepStrictEqual(first.replies[0], { id: '1', checkpoint: { order: 7, _steps: { charge: { receipt: 'r-1' } } } });
  assert.strictEqual(first.replies[1].id, '1');
  assert.strictEqual(first.replies[1].retry, true);
  // the retry starts from the checkpointed context: the step is not run again
  const second = harness(handle);
  second.send({ id: '2', attempt: 2, context: first.replies[0].checkpoint });
  second.input.end();
  await second.done;
  assert.strictEqual(runs, 1);
  assert.deepStrictEqual(second.replies, [{ id: '2', result: { charged: { receipt: 'r-1' }, context: { order: 7, _steps: { charge: { receipt: 'r-1' } } } } }]);
  // concurrent calls keep their own context; a bad checkpoint is refused and writes nothing
  const third = harness(async (call) => {
    await checkpoint({ n: call.context.n, seen: true });
    await assert.rejects(checkpoint([1]), TypeError);
    return { next_stage: 'next' };
  });
  for (let n = 0; n < 5; n++) third.send({ id: String(n), attempt: 1, context: { n } });
  third.input.end();
  await third.done;
  const saved = third.replies.filter((r) => r.checkpoint);
  assert.strictEqual(saved.length, 5);
  assert.ok(saved.every((r) => r.checkpoint.n === Number(r.id) && r.checkpoint.seen));
  await assert.rejects(checkpoint({}), /inside the handler/);
});

test('one call per process sends its checkpoint on stderr, before its reply', async () => {
  const { step } = require('../function');
  const h = harness(async (call) => {
    await step('a', () => 1);
    return { next_stage: 'b', context: call.context };
  });
  const written = [];
  const original = process.stderr.write;
  process.stderr.write = (chunk, ...rest) => {
    if (String(chunk).startsWith('asyncflow:checkpoint ')) {
      written.push({ line: String(chunk), replies: h.replies.length });
      return true;
    }
    return original.call(process.stderr, chunk, ...rest);
  };
  try {
    h.send({ attempt: 1, context: { k: 'v' } });
    h.input.end();
    await h.done;
  } finally {
    process.stderr.write = original;
  }
  assert.deepStrictEqual(written, [{ line: 'asyncflow:checkpoint {"k":"v","_steps":{"a":1}}\n', replies: 0 }]);
  assert.deepStrictEqual(h.replies, [{ next_stage: 'b', context: { k: 'v', _steps: { a: 1 } } }]);
});
