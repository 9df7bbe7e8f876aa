'use strict';
// What the pg client (index.js) and the HTTP client (http.js) share: the task as read, its
// errors, and the arguments of an enqueue. No dependency.

const ENDED = new Set(['succeeded', 'failed', 'cancelled']);

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

// The options of one enqueue, and the fields of one task of enqueueMany.
const OPTIONS = new Set(['priority', 'runAt', 'stage', 'idempotencyKey', 'userId', 'queueKey', 'uniqueKey', 'uniqueFor', 'traceparent',
  'debounceKey', 'debounceFor']);
const MANY_FIELDS = new Set(['context', 'priority', 'runAt', 'stage', 'idempotencyKey', 'userId', 'queueKey', 'traceparent',
  'debounceKey', 'debounceFor']);

function checkKeys(given, known, what) {
  for (const k of Object.keys(given || {})) {
    if (!known.has(k)) throw new TypeError('unknown ' + what + ' ' + k + '; known: ' + [...known].join(', '));
  }
}

const time = (v) => (v instanceof Date ? v.toISOString() : v);

// One task of enqueueMany as create_tasks (and POST /v1/tasks/bulk) take it: the fields given,
// in snake_case, times as RFC 3339 text.
function manyFields(t) {
  checkKeys(t, MANY_FIELDS, 'task field');
  const out = {};
  for (const [k, v] of Object.entries(t || {})) if (v !== undefined && v !== null) out[snake(k)] = time(v);
  return out;
}

// The longest a wait goes without reading the task again, in seconds (a backstop for a
// notification that cannot come: a pooler that does not pass LISTEN on, an end that sends none).
const RECHECK_SECONDS = 5;

module.exports = { ENDED, TaskTimeout, TaskNotFound, taskFrom, OPTIONS, checkKeys, time, snake, manyFields, RECHECK_SECONDS };
