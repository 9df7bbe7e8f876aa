// The asyncflow dashboard. It talks only to the JSON API under /v1 (GET /v1/dashboard,
// GET /v1/tasks/{id}, GET /v1/tasks?type=&status=, POST /v1/tasks/{id}/retry|cancel), with the
// bearer token kept in localStorage. Everything that comes from the server is put on the page
// with textContent (through el() below), never as HTML.
'use strict';

(() => {
  const TOKEN_KEY = 'asyncflow.token';
  const INTERVAL_KEY = 'asyncflow.interval';
  // Throughput is averaged over the polls of about the last minute.
  const WINDOW_MS = 60_000;
  // task statuses, then those of workflow runs, their nodes and callbacks
  const STATUSES = ['pending', 'running', 'succeeded', 'failed', 'cancelled',
    'scheduled', 'timed_out', 'waiting', 'external', 'skipped', 'delivered'];

  const $ = (selector) => document.querySelector(selector);

  const state = {
    timer: null,
    polling: false,
    // task type -> [{t: ms (performance.now), finished: succeeded + failed}]
    samples: new Map(),
    // the task shown in the detail view
    taskId: null,
    // the workflow run shown in the run view
    runId: null,
    // the list view: {type, status, next}
    list: null,
    // where the message on screen came from ('poll' or 'action'), so a good poll clears only its own
    messageSource: null,
  };

  // ---- small helpers -------------------------------------------------------------------------

  /** An element with attributes and children; strings become text nodes, never markup. */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'onclick') node.addEventListener('click', value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function storageGet(key) {
    try {
      return window.localStorage.getItem(key);
    } catch {
      return null;
    }
  }

  function storageSet(key, value) {
    try {
      if (value === null) window.localStorage.removeItem(key);
      else window.localStorage.setItem(key, value);
      return true;
    } catch {
      return false;
    }
  }

  function fmtInt(n) {
    return typeof n === 'number' ? n.toLocaleString('en-US') : '—';
  }

  /** Seconds as "4.2s", "37s", "5m 03s", "2h 07m", "3d 04h". */
  function fmtAge(seconds) {
    if (typeof seconds !== 'number' || !Number.isFinite(seconds)) return '—';
    const s = Math.max(0, seconds);
    const pad = (n) => String(Math.floor(n)).padStart(2, '0');
    if (s < 10) return `${s.toFixed(1)}s`;
    if (s < 60) return `${Math.round(s)}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${pad((s % 3600) / 60)}m`;
    return `${Math.floor(s / 86400)}d ${pad((s % 86400) / 3600)}h`;
  }

  function fmtTime(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
  }

  function fmtJson(value) {
    if (value === undefined || value === null) return '—';
    try {
      return JSON.stringify(value, null, 2);
    } catch {
      return String(value);
    }
  }

  function statusBadge(status) {
    const known = STATUSES.includes(status) ? status : 'unknown';
    return el('span', { class: `badge status-${known}` }, status);
  }

  function showMessage(text, kind, source) {
    const box = $('#message');
    box.textContent = text;
    box.className = kind;
    box.hidden = false;
    state.messageSource = source;
  }

  function clearMessage(source) {
    if (source && state.messageSource !== source) return;
    const box = $('#message');
    box.hidden = true;
    box.textContent = '';
    state.messageSource = null;
  }

  // ---- the API -------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path) {
    const headers = { Accept: 'application/json' };
    const token = storageGet(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetch(path, { method, headers, cache: 'no-store' });
    } catch (e) {
      throw new ApiError(0, 'network', `Cannot reach the server (${e.message}).`);
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      // not JSON: the status line says enough
    }
    if (!response.ok) {
      let message = body && typeof body.message === 'string' ? body.message : `${response.status} ${response.statusText}`;
      if (response.status === 401) {
        message = token
          ? 'The server refused the saved token: enter a valid one in the Token field.'
          : 'The server needs a bearer token: enter it in the Token field.';
      }
      throw new ApiError(response.status, body && body.code, message);
    }
    return body;
  }

  // ---- overview: one row per task type -------------------------------------------------------

  /** Tasks finished (succeeded or failed) per minute, from this page's successive polls. */
  function throughput(type, finished, now) {
    let samples = state.samples.get(type) || [];
    // A count that went down (a failed task retried by hand, old shards dropped) breaks the
    // series: start again.
    if (samples.length && finished < samples[samples.length - 1].finished) samples = [];
    samples.push({ t: now, finished });
    while (samples.length > 2 && now - samples[1].t >= WINDOW_MS) samples.shift();
    state.samples.set(type, samples);
    if (samples.length < 2) return null;
    const first = samples[0];
    const minutes = (now - first.t) / 60_000;
    return minutes > 0 ? (finished - first.finished) / minutes : null;
  }

  function typeRow(t, rate) {
    const num = (col, text, title) => el('td', { class: 'num', 'data-col': col, title }, text);
    const count = (col, n, status) => {
      const td = el('td', { class: 'num', 'data-col': col });
      if (n > 0) {
        td.append(el('button', {
          type: 'button',
          class: 'link',
          title: `List the ${status} tasks`,
          onclick: () => openList(t.type, status),
        }, fmtInt(n)));
      } else {
        td.append(fmtInt(n));
      }
      return td;
    };
    const name = el('td', { 'data-col': 'type' }, el('span', { class: 'type-name' }, t.type));
    if (t.paused) name.append(' ', el('span', { class: 'badge paused' }, 'paused'));
    const shards = t.begin_pos === null || t.end_pos === null ? '—' : `${t.begin_pos}..${t.end_pos} (${t.shards})`;
    return el('tr', { 'data-type': t.type },
      name,
      count('ready', t.ready, 'pending'),
      count('delayed', t.delayed, 'pending'),
      count('running', t.running, 'running'),
      count('succeeded', t.succeeded, 'succeeded'),
      count('failed', t.failed, 'failed'),
      count('cancelled', t.cancelled, 'cancelled'),
      num('lag', t.ready > 0 ? fmtAge(t.oldest_ready_age) : '—', 'Age of the oldest ready task'),
      num('throughput', rate === null ? '—' : `${rate < 10 ? rate.toFixed(1) : Math.round(rate)}/min`,
        rate === null ? 'Needs two polls' : 'Succeeded + failed per minute, from this page\'s polls'),
      num('shards', shards, `begin_pos ${t.begin_pos}, end_pos ${t.end_pos}, ${t.shards} live shard(s)`),
    );
  }

  async function refreshOverview() {
    const data = await api('GET', '/v1/dashboard');
    const now = performance.now();
    const types = Array.isArray(data && data.types) ? data.types : [];
    const seen = new Set();
    const rows = types.map((t) => {
      seen.add(t.type);
      return typeRow(t, throughput(t.type, t.succeeded + t.failed, now));
    });
    for (const type of [...state.samples.keys()]) if (!seen.has(type)) state.samples.delete(type);
    $('#types tbody').replaceChildren(...rows);
    $('#no-types').hidden = rows.length > 0;
    $('#updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
  }

  // ---- list: tasks of one type and status ----------------------------------------------------

  function taskLink(id) {
    return el('a', { href: `#task=${encodeURIComponent(id)}` }, id);
  }

  function listRow(task) {
    return el('tr', { 'data-task': task.id },
      el('td', { 'data-col': 'id' }, taskLink(task.id)),
      el('td', { 'data-col': 'status' }, statusBadge(task.status)),
      el('td', { 'data-col': 'stage' }, task.stage),
      el('td', { class: 'num', 'data-col': 'attempt' }, task.attempt),
      el('td', { 'data-col': 'updated', title: task.updated_at }, fmtTime(task.updated_at)),
      el('td', { 'data-col': 'error', class: 'error-text' }, task.error || ''),
    );
  }

  async function loadList(more) {
    const list = state.list;
    if (!list) return;
    const query = new URLSearchParams({ type: list.type, status: list.status, limit: '50' });
    if (more && list.next) query.set('after', list.next);
    const page = await api('GET', `/v1/tasks?${query}`);
    if (state.list !== list) return;
    list.next = page.next || null;
    const rows = (page.tasks || []).map(listRow);
    const body = $('#tasks tbody');
    if (more) body.append(...rows);
    else body.replaceChildren(...rows);
    $('#list-title').textContent = `Tasks: ${list.type}, ${list.status}`;
    $('#list-more').hidden = !list.next;
    $('#list').hidden = false;
  }

  async function openList(type, status) {
    state.list = { type, status, next: null };
    await run(() => loadList(false));
  }

  // ---- detail: one task ----------------------------------------------------------------------

  function field(dl, label, key, value) {
    dl.append(el('dt', {}, label), el('dd', { 'data-field': key }, value === undefined || value === null ? '—' : value));
  }

  function renderTask(task) {
    $('#detail-title').textContent = `Task ${task.id}`;
    const dl = el('dl', { id: 'fields' });
    field(dl, 'Id', 'id', task.id);
    field(dl, 'Type', 'type', task.type);
    field(dl, 'Status', 'status', statusBadge(task.status));
    field(dl, 'Stage', 'stage', task.stage);
    field(dl, 'Attempt (this stage)', 'attempt', task.attempt);
    field(dl, 'Failed tries (in all)', 'retry_count', task.retry_count);
    field(dl, 'Max retries per stage', 'max_retry_num', task.max_retry_num);
    field(dl, 'Priority', 'priority', task.priority);
    field(dl, 'Owner', 'owner', task.owner);
    field(dl, 'Lease until', 'lease_until', task.lease_until ? fmtTime(task.lease_until) : null);
    field(dl, 'Order time', 'order_time', fmtTime(task.order_time));
    field(dl, 'User id', 'user_id', task.user_id);
    field(dl, 'Idempotency key', 'idempotency_key', task.idempotency_key);
    field(dl, 'Created', 'created_at', fmtTime(task.created_at));
    field(dl, 'Updated', 'updated_at', fmtTime(task.updated_at));
    field(dl, 'Finished', 'finished_at', task.finished_at ? fmtTime(task.finished_at) : null);
    field(dl, 'Error', 'error', task.error ? el('span', { class: 'error-text' }, task.error) : null);
    $('#fields').replaceWith(dl);
    $('#detail [data-field="context"]').textContent = fmtJson(task.context);
    $('#detail [data-field="result"]').textContent = fmtJson(task.result);

    const log = Array.isArray(task.schedule_log) ? task.schedule_log : [];
    const rows = log.map((entry, i) => el('tr', {},
      el('td', { class: 'num', 'data-col': 'n' }, i + 1),
      el('td', { 'data-col': 'start', title: entry.start }, fmtTime(entry.start)),
      el('td', { 'data-col': 'worker' }, entry.worker || ''),
      el('td', { 'data-col': 'stage' }, entry.stage || ''),
      el('td', { class: 'num', 'data-col': 'attempt' }, entry.attempt ?? ''),
      el('td', { class: 'num', 'data-col': 'cost_ms' }, typeof entry.cost_ms === 'number' ? Math.round(entry.cost_ms) : ''),
      el('td', { 'data-col': 'outcome' }, entry.outcome || (entry.event ? el('em', {}, entry.event) : '')),
      el('td', { 'data-col': 'error', class: 'error-text' }, entry.error || ''),
    ));
    $('#log tbody').replaceChildren(...rows);
    $('#no-log').hidden = rows.length > 0;

    $('#retry').disabled = !(task.status === 'failed' || task.status === 'cancelled');
    $('#cancel').disabled = !(task.status === 'pending' || task.status === 'running');
    $('#detail').hidden = false;
  }

  async function showTask(id) {
    state.taskId = id;
    let task;
    try {
      task = await api('GET', `/v1/tasks/${encodeURIComponent(id)}`);
    } catch (e) {
      if (e.status === 404 || e.status === 400) {
        if (state.taskId === id) {
          state.taskId = null;
          $('#detail').hidden = true;
        }
        showMessage(`No task with id "${id}".`, 'error', 'action');
        return;
      }
      throw e;
    }
    if (state.taskId === id) renderTask(task);
  }

  async function act(kind) {
    const id = state.taskId;
    if (!id) return;
    if (kind === 'cancel' && !window.confirm(`Cancel task ${id}?`)) return;
    $('#retry').disabled = true;
    $('#cancel').disabled = true;
    await run(async () => {
      const answer = await api('POST', `/v1/tasks/${encodeURIComponent(id)}/${kind}`);
      const done = kind === 'retry' ? answer.retried : answer.cancelled;
      if (done) showMessage(kind === 'retry' ? `Task ${id} is queued again.` : `Task ${id} is cancelled.`, 'info', 'action');
      else showMessage(`Task ${id} was not ${kind === 'retry' ? 'retried: it is not failed or cancelled' : 'cancelled: it had ended'}.`, 'error', 'action');
      await showTask(id);
      await refreshOverview();
      if (state.list) await loadList(false);
    });
  }

  // ---- workflow runs: the newest, and one with its nodes --------------------------------------

  function runLink(id) {
    return el('a', { href: `#run=${encodeURIComponent(id)}` }, id);
  }

  async function refreshRuns() {
    const page = await api('GET', '/v1/runs?limit=20');
    const rows = (page && Array.isArray(page.runs) ? page.runs : []).map((r) => el('tr', { 'data-run': r.run_id },
      el('td', { 'data-col': 'run' }, runLink(r.run_id)),
      el('td', { 'data-col': 'pipeline' }, `${r.pipeline} v${r.version}`),
      el('td', { 'data-col': 'status' }, statusBadge(r.status)),
      el('td', { 'data-col': 'started', title: r.started_at || '' }, r.started_at ? fmtTime(r.started_at) : '—'),
      el('td', { class: 'num', 'data-col': 'cost' }, r.total_cost_ms ?? ''),
      el('td', { 'data-col': 'error', class: 'error-text' }, r.error || ''),
    ));
    $('#run-list tbody').replaceChildren(...rows);
    $('#no-runs').hidden = rows.length > 0;
  }

  function renderRun(run) {
    $('#run-title').textContent = `Run ${run.run_id}`;
    const dl = el('dl', { id: 'run-fields' });
    const put = (label, key, value) =>
      dl.append(el('dt', {}, label), el('dd', { 'data-field': key }, value === undefined || value === null ? '—' : value));
    put('Pipeline', 'pipeline', `${run.pipeline} v${run.version}`);
    put('Status', 'status', statusBadge(run.status));
    put('Attempt', 'attempt', run.attempt);
    put('Notify key', 'notify_key', run.notify_key);
    put('Started', 'started_at', run.started_at ? fmtTime(run.started_at) : null);
    put('Finished', 'finished_at', run.finished_at ? fmtTime(run.finished_at) : null);
    put('Deadline', 'deadline', run.deadline ? fmtTime(run.deadline) : null);
    put('Error', 'error', run.error ? el('span', { class: 'error-text' }, run.error) : null);
    $('#run-fields').replaceWith(dl);
    const events = Array.isArray(run.events) ? run.events : [];
    $('#events tbody').replaceChildren(...events.map((e) => el('tr', { 'data-node': e.node },
      el('td', { 'data-col': 'node' }, e.node),
      el('td', { 'data-col': 'type' }, e.type),
      el('td', { 'data-col': 'status' }, statusBadge(e.status)),
      el('td', { class: 'num', 'data-col': 'exec_cnt' }, e.exec_cnt),
      el('td', { class: 'num', 'data-col': 'segments' }, Array.isArray(e.segments) ? e.segments.length : ''),
      el('td', { 'data-col': 'task' }, e.task_id ? taskLink(e.task_id) : ''),
      el('td', { class: 'num', 'data-col': 'cost' }, e.total_cost_ms ?? ''),
      el('td', { 'data-col': 'error', class: 'error-text' }, e.error || ''),
    )));
    const callbacks = Array.isArray(run.callbacks) ? run.callbacks : [];
    $('#callbacks tbody').replaceChildren(...callbacks.map((c) => el('tr', {},
      el('td', { 'data-col': 'kind' }, c.kind),
      el('td', { 'data-col': 'status' }, statusBadge(c.status)),
      el('td', { class: 'num', 'data-col': 'attempts' }, c.attempts),
      el('td', { 'data-col': 'url' }, c.url),
      el('td', { 'data-col': 'error', class: 'error-text' }, c.last_error || ''),
    )));
    $('#run-cancel').disabled = !(run.status === 'scheduled' || run.status === 'running');
    $('#run').hidden = false;
  }

  async function showRun(id) {
    state.runId = id;
    let found;
    try {
      found = await api('GET', `/v1/runs/${encodeURIComponent(id)}`);
    } catch (e) {
      if (e.status === 404) {
        if (state.runId === id) {
          state.runId = null;
          $('#run').hidden = true;
        }
        showMessage(`No run with id "${id}".`, 'error', 'action');
        return;
      }
      throw e;
    }
    if (state.runId === id) renderRun(found);
  }

  async function cancelRun() {
    const id = state.runId;
    if (!id || !window.confirm(`Cancel run ${id}?`)) return;
    $('#run-cancel').disabled = true;
    await run(async () => {
      const answer = await api('POST', `/v1/runs/${encodeURIComponent(id)}/cancel`);
      showMessage(answer.cancelled ? `Run ${id} is cancelled.` : `Run ${id} was not cancelled: it had ended.`,
        answer.cancelled ? 'info' : 'error', 'action');
      await showRun(id);
      await refreshRuns();
    });
  }

  // ---- routing, polling, wiring --------------------------------------------------------------

  /** Runs a user action, showing its error instead of throwing. */
  async function run(action) {
    try {
      await action();
    } catch (e) {
      showMessage(e.message || String(e), 'error', 'action');
    }
  }

  function route() {
    const runMatch = /^#run=(.+)$/.exec(window.location.hash);
    if (runMatch) {
      state.taskId = null;
      $('#detail').hidden = true;
      let id;
      try {
        id = decodeURIComponent(runMatch[1]);
      } catch {
        id = runMatch[1];
      }
      run(() => showRun(id));
      return;
    }
    state.runId = null;
    $('#run').hidden = true;
    const match = /^#task=(.+)$/.exec(window.location.hash);
    if (!match) {
      state.taskId = null;
      $('#detail').hidden = true;
      return;
    }
    let id;
    try {
      id = decodeURIComponent(match[1]);
    } catch {
      id = match[1];
    }
    $('#search-id').value = id;
    run(() => showTask(id));
  }

  function schedule() {
    clearTimeout(state.timer);
    state.timer = null;
    const seconds = Number($('#interval').value);
    if (seconds > 0 && !document.hidden) state.timer = setTimeout(tick, seconds * 1000);
  }

  async function tick() {
    if (state.polling) return;
    state.polling = true;
    try {
      await refreshOverview();
      await refreshRuns();
      if (state.taskId) await showTask(state.taskId);
      if (state.runId) await showRun(state.runId);
      clearMessage('poll');
    } catch (e) {
      showMessage(e.message || String(e), 'error', 'poll');
    } finally {
      state.polling = false;
      schedule();
    }
  }

  function tokenSaved() {
    const saved = storageGet(TOKEN_KEY);
    $('#token').placeholder = saved ? 'token saved in this browser' : 'bearer token (if the server needs one)';
    $('#forget').disabled = !saved;
  }

  function start() {
    $('#search').addEventListener('submit', (event) => {
      event.preventDefault();
      const id = $('#search-id').value.trim();
      if (!id) return;
      const hash = `#task=${encodeURIComponent(id)}`;
      clearMessage('action');
      if (window.location.hash === hash) route();
      else window.location.hash = hash;
    });
    $('#auth').addEventListener('submit', (event) => {
      event.preventDefault();
      const token = $('#token').value.trim();
      if (!storageSet(TOKEN_KEY, token || null)) showMessage('This browser does not allow localStorage.', 'error', 'action');
      $('#token').value = '';
      tokenSaved();
      clearMessage();
      tick();
      if (state.taskId) run(() => showTask(state.taskId));
    });
    $('#forget').addEventListener('click', () => {
      storageSet(TOKEN_KEY, null);
      tokenSaved();
      tick();
    });
    const interval = storageGet(INTERVAL_KEY);
    if (interval && [...$('#interval').options].some((o) => o.value === interval)) $('#interval').value = interval;
    $('#interval').addEventListener('change', () => {
      storageSet(INTERVAL_KEY, $('#interval').value);
      tick();
    });
    $('#retry').addEventListener('click', () => act('retry'));
    $('#cancel').addEventListener('click', () => act('cancel'));
    $('#detail-close').addEventListener('click', () => {
      window.location.hash = '';
    });
    $('#list-close').addEventListener('click', () => {
      state.list = null;
      $('#list').hidden = true;
    });
    $('#list-more').addEventListener('click', () => run(() => loadList(true)));
    $('#run-cancel').addEventListener('click', cancelRun);
    $('#run-close').addEventListener('click', () => {
      window.location.hash = '';
    });
    window.addEventListener('hashchange', route);
    document.addEventListener('visibilitychange', () => (document.hidden ? schedule() : tick()));
    tokenSaved();
    route();
    tick();
  }

  start();
})();
