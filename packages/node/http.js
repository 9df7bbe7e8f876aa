'use strict';
// asyncflow over HTTP, against `asyncflow serve`: the same calls as the pg client, on Node's
// own fetch (no dependency).
//
//   const { HttpClient } = require('asyncflow/http');
//   const client = new HttpClient('http://localhost:8080', { token: process.env.ASYNCFLOW_TOKEN });
//   const id = await client.enqueue('invoice', { order: 7 });
//   const task = await client.wait(id, 30);        // the ended task, or a TaskTimeout
//
// Each call is its own request, so its own transaction on the server: enqueue with the pg client
// (require('asyncflow')) to enqueue in the application's transaction. An error answer rejects
// with an HttpError carrying the server's status, code and message.

const { ENDED, TaskTimeout, TaskNotFound, taskFrom, OPTIONS, checkKeys, time, snake, manyFields } = require('./task');

// The longest wait the server holds one request for (GET /v1/tasks/{id}?wait=SECONDS).
const WAIT_MAX = 60;

// An error answer: `status` (HTTP), `code` and `message` (the server's error body).
class HttpError extends Error {
  constructor(status, code, message) {
    super(status + ' ' + code + ': ' + message);
    this.name = 'HttpError';
    this.status = status;
    this.code = code;
  }
}

const path = (taskId) => '/v1/tasks/' + encodeURIComponent(taskId);

class HttpClient {
  // `url`: the server's base URL; `token`: a bearer token of its ASYNCFLOW_TOKENS; `timeout`:
  // seconds a request may take (beside a wait's own).
  constructor(url, { token = null, timeout = 30 } = {}) {
    this.url = url.replace(/\/+$/, '');
    this.token = token;
    this.timeout = timeout;
  }

  async call(method, route, body = undefined, seconds = this.timeout) {
    const headers = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.token) headers.authorization = 'Bearer ' + this.token;
    const answer = await fetch(this.url + route, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(seconds * 1000),
    });
    const text = await answer.text();
    if (!answer.ok) {
      // the server's error body is {"code", "message"}
      let err = {};
      try {
        err = JSON.parse(text) || {};
      } catch (_) {
        err = {};
      }
      throw new HttpError(answer.status, String(err.code ?? ''), String(err.message ?? text.slice(0, 200)));
    }
    return text ? JSON.parse(text) : null;
  }

  // Creates one task (POST /v1/tasks); resolves to its id.
  async enqueue(taskType, context = null, options = {}) {
    checkKeys(options, OPTIONS, 'option');
    const body = { type: taskType };
    if (context !== null && context !== undefined) body.context = context;
    for (const [k, v] of Object.entries(options || {})) if (v !== undefined && v !== null) body[snake(k)] = time(v);
    return String((await this.call('POST', '/v1/tasks', body)).id);
  }

  // Creates many tasks of one type (POST /v1/tasks/bulk); resolves to their ids in order.
  async enqueueMany(taskType, tasks) {
    const body = { type: taskType, tasks: tasks.map(manyFields) };
    return (await this.call('POST', '/v1/tasks/bulk', body)).ids.map(String);
  }

  // The task, or null when there is none.
  async getTask(taskId) {
    try {
      return taskFrom(await this.call('GET', path(taskId)));
    } catch (e) {
      if (e instanceof HttpError && e.status === 404) return null;
      throw e;
    }
  }

  // Cancels a pending, running or waiting task; false when it had already ended.
  async cancel(taskId) {
    return (await this.call('POST', path(taskId) + '/cancel', {})).cancelled === true;
  }

  // Queues a failed or cancelled task again; false when it was neither.
  async retry(taskId) {
    return (await this.call('POST', path(taskId) + '/retry', {})).retried === true;
  }

  // Sends an event (POST /v1/events); resolves to how many waiting tasks it woke.
  async sendEvent(eventKey, payload = {}) {
    const body = { key: eventKey, payload: payload === undefined || payload === null ? {} : payload };
    return Number((await this.call('POST', '/v1/events', body)).woken);
  }

  // The task once it has ended, by long-polls of at most WAIT_MAX seconds each (the server
  // answers as soon as the task ends); rejects with a TaskTimeout (its `task` as it is) after
  // `timeout` seconds, a TaskNotFound when there is none.
  async wait(taskId, timeout) {
    const deadline = Date.now() + timeout * 1000;
    for (;;) {
      const wait = Math.min(WAIT_MAX, Math.max(0, deadline - Date.now()) / 1000);
      let task;
      try {
        task = taskFrom(await this.call('GET', path(taskId) + '?wait=' + wait.toFixed(3), undefined, wait + this.timeout));
      } catch (e) {
        if (e instanceof HttpError && e.status === 404) throw new TaskNotFound(taskId);
        throw e;
      }
      if (task.ended) return task;
      if (deadline - Date.now() <= 0) throw new TaskTimeout(task, timeout);
    }
  }
}

module.exports = { HttpClient, HttpError, TaskTimeout, TaskNotFound, ENDED, WAIT_MAX };
