// The asyncflow dashboard, part 4 of 7: tasks. The search view (GET /v1/tasks with filters, its
// state in the URL: #/tasks?type=&status=&...), bulk retry and cancel of what the filter selects
// (POST /v1/tasks/bulk-retry|bulk-cancel: a dry run shows the count, the operator confirms, then
// calls go until none remain), and one task (#task=<id>): fields, progress, a timeline of its
// schedule log, context, result, its parent and children (tasks that spawn), Retry and Cancel.
'use strict';

(() => {
  const { $, el, api, run, fmtTime, fmtJson, statusBadge, showMessage, taskLink, field } = window.AF;
  const FIELDS = ['type', 'status', 'stage', 'queue_key', 'user_id', 'created_after', 'created_before', 'q'];
  // what the list's URL may hold besides the filter: its order (newest first unless 'oldest')
  const LIST_FIELDS = [...FIELDS, 'order'];
  // Most calls one confirmed bulk action makes (1,000 tasks each).
  const BULK_CALLS_MAX = 100;
  const view = {
    // the filter of the list on screen (URLSearchParams without paging)
    filter: null,
    next: null,
    // the bulk action waiting for confirmation: {kind, filter}
    pending: null,
    // the task shown in the detail view
    taskId: null,
  };

  /** datetime-local text (local time) <-> RFC 3339 (UTC) */
  function toRfc3339(local) {
    const d = new Date(local);
    return Number.isNaN(d.getTime()) ? local : d.toISOString();
  }
  function toLocal(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return '';
    const pad = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  /** The filter as the JSON object of a bulk call. */
  function filterBody(params) {
    const body = {};
    for (const k of FIELDS) if (params.get(k)) body[k] = params.get(k);
    return body;
  }

  function listRow(task) {
    return el('tr', { 'data-task': task.id },
      el('td', { 'data-col': 'id' }, taskLink(task.id)),
      el('td', { 'data-col': 'type' }, task.type),
      el('td', { 'data-col': 'status' }, statusBadge(task.status)),
      el('td', { 'data-col': 'stage' }, task.stage),
      el('td', { class: 'num', 'data-col': 'attempt' }, task.attempt),
      el('td', { 'data-col': 'updated', title: task.updated_at }, fmtTime(task.updated_at)),
      el('td', { 'data-col': 'error', class: 'error-text' }, task.error || ''),
    );
  }

  async function loadList(more) {
    const filter = view.filter;
    if (!filter) return;
    const query = new URLSearchParams(filter);
    query.set('limit', '50');
    if (more && view.next) query.set('after', view.next);
    const page = await api('GET', `/v1/tasks?${query}`);
    if (view.filter !== filter) return;
    view.next = page.next || null;
    const rows = (page.tasks || []).map(listRow);
    const body = $('#tasks tbody');
    if (more) body.append(...rows);
    else body.replaceChildren(...rows);
    const said = FIELDS.filter((k) => filter.get(k)).map((k) => (k === 'type' || k === 'status' ? filter.get(k) : `${k} ${filter.get(k)}`));
    if (filter.get('order') === 'oldest') said.push('oldest first');
    $('#list-title').textContent = said.length ? `Tasks: ${said.join(', ')}` : 'Tasks: all';
    $('#list-more').hidden = !view.next;
  }

  async function fillTypes() {
    const types = await api('GET', '/v1/task-types');
    const select = $('#f-type');
    const names = (Array.isArray(types) ? types : []).map((t) => t.type);
    select.replaceChildren(el('option', { value: '' }, 'any'), ...names.map((n) => el('option', { value: n }, n)));
    select.value = view.filter ? view.filter.get('type') || '' : '';
  }

  function submitFilters(event) {
    event.preventDefault();
    const query = new URLSearchParams();
    for (const k of LIST_FIELDS) {
      const input = $(`#f-${k}`);
      const value = input.value.trim();
      if (value) query.set(k, k.startsWith('created_') ? toRfc3339(value) : value);
    }
    window.location.hash = `#/tasks?${query}`;
  }

  async function bulkAsk(kind) {
    const filter = filterBody(view.filter || new URLSearchParams());
    const answer = await api('POST', `/v1/tasks/bulk-${kind}`, { filter, dry_run: true });
    const verb = kind === 'retry' ? 'retried' : 'cancelled';
    const count = `${answer.matched.toLocaleString('en-US')}${answer.more ? '+' : ''}`;
    $('#bulk-count').textContent = answer.matched === 0
      ? `No task matching this filter can be ${verb}.`
      : `${count} task(s) matching this filter will be ${verb}. Confirm?`;
    $('#bulk-count').dataset.matched = String(answer.matched);
    $('#bulk-go').disabled = answer.matched === 0;
    $('#bulk-go').textContent = kind === 'retry' ? `Retry ${count}` : `Cancel ${count}`;
    view.pending = { kind, filter };
    $('#bulk-confirm').hidden = false;
  }

  async function bulkGo() {
    const pending = view.pending;
    if (!pending) return;
    view.pending = null;
    $('#bulk-confirm').hidden = true;
    let changed = 0;
    let more = true;
    for (let i = 0; i < BULK_CALLS_MAX && more; i += 1) {
      const answer = await api('POST', `/v1/tasks/bulk-${pending.kind}`, { filter: pending.filter });
      changed += answer.changed;
      more = answer.more && answer.changed > 0;
    }
    const verb = pending.kind === 'retry' ? 'queued again' : 'cancelled';
    showMessage(`${changed.toLocaleString('en-US')} task(s) ${verb}${more ? '; more remain: run it again' : ''}.`, 'info', 'action');
    await loadList(false);
  }

  // ---- one task ------------------------------------------------------------------------------

  function renderProgress(progress) {
    const box = $('#progress');
    box.hidden = progress === undefined || progress === null;
    if (box.hidden) return;
    $('#detail [data-field="progress"]').textContent = fmtJson(progress);
    const percent = progress && typeof progress.percent === 'number' ? Math.max(0, Math.min(100, progress.percent)) : null;
    $('#progress-bar').hidden = percent === null;
    if (percent !== null) $('#progress-bar span').style.width = `${percent}%`;
  }

  /** The schedule log as bars on one time axis: one row per attempt or event. */
  function renderTimeline(log) {
    const times = log.map((e) => new Date(e.start || e.at).getTime()).filter((t) => Number.isFinite(t));
    const box = $('#timeline');
    if (!times.length) {
      box.replaceChildren(el('p', { class: 'muted' }, 'Nothing yet.'));
      return;
    }
    const ends = log.map((e) => new Date(e.start || e.at).getTime() + (Number(e.cost_ms) || 0)).filter((t) => Number.isFinite(t));
    const from = Math.min(...times);
    const span = Math.max(1, Math.max(...ends) - from);
    box.replaceChildren(...log.map((e, i) => {
      const at = new Date(e.start || e.at).getTime();
      const left = Number.isFinite(at) ? ((at - from) / span) * 100 : 0;
      const width = Math.max(0.8, ((Number(e.cost_ms) || 0) / span) * 100);
      const kind = e.outcome || (e.event ? 'event' : 'attempt');
      const label = e.event ? e.event : `${e.stage || ''} #${e.attempt ?? ''} ${e.outcome || ''}`;
      const bar = el('span', { class: `tl-bar tl-${kind.replace(/[^a-z_]/g, '')}`, title: e.error || `${Math.round(Number(e.cost_ms) || 0)} ms` });
      // through the CSSOM: the page's Content-Security-Policy refuses style attributes
      bar.style.left = `${Math.min(left, 99.2).toFixed(2)}%`;
      bar.style.width = `${width.toFixed(2)}%`;
      return el('div', { class: 'tl-row', 'data-entry': i, 'data-kind': kind },
        el('span', { class: 'tl-label', title: e.error || '' }, `${fmtTime(e.start || e.at)} ${label}`),
        el('span', { class: 'tl-track' }, bar));
    }));
  }

  /** explain_task's answer as one line: its reason, then its details (times as local times). */
  function fmtExplain(why) {
    if (!why || typeof why !== 'object' || typeof why.reason !== 'string') return null;
    const times = new Set(['since', 'until', 'next_start_at', 'lease_until', 'finished_at']);
    const details = Object.entries(why).filter(([k, v]) => k !== 'reason' && v !== null && v !== undefined)
      .map(([k, v]) => `${k} ${times.has(k) ? fmtTime(v) : (typeof v === 'object' ? JSON.stringify(v) : v)}`);
    return el('span', { 'data-reason': why.reason }, el('strong', {}, why.reason.replace(/_/g, ' ')),
      details.length ? ` (${details.join(', ')})` : '');
  }

  function renderTask(task, why) {
    $('#detail-title').textContent = `Task ${task.id}`;
    const dl = el('dl', { id: 'fields' });
    field(dl, 'Id', 'id', task.id);
    field(dl, 'Type', 'type', task.type);
    field(dl, 'Status', 'status', statusBadge(task.status));
    field(dl, 'Why', 'explain', fmtExplain(why));
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
    // a child names the task whose spawn created it
    field(dl, 'Parent', 'parent_id', task.parent_id ? taskLink(task.parent_id) : null);
    $('#fields').replaceWith(dl);
    $('#detail [data-field="context"]').textContent = fmtJson(task.context);
    $('#detail [data-field="result"]').textContent = fmtJson(task.result);
    renderProgress(task.progress);
    renderTimeline(Array.isArray(task.schedule_log) ? task.schedule_log : []);

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
    $('#cancel').disabled = !['pending', 'running', 'waiting'].includes(task.status);
    $('#detail').hidden = false;
  }

  async function showTask(id) {
    view.taskId = id;
    let task;
    // why it is where it is (GET /v1/tasks/{id}/explain); a server without the route shows none
    const why = api('GET', `/v1/tasks/${encodeURIComponent(id)}/explain`).catch(() => null);
    try {
      task = await api('GET', `/v1/tasks/${encodeURIComponent(id)}`);
    } catch (e) {
      if (e.status === 404 || e.status === 400) {
        if (view.taskId === id) {
          view.taskId = null;
          $('#detail').hidden = true;
        }
        showMessage(`No task with id "${id}".`, 'error', 'action');
        return;
      }
      throw e;
    }
    if (view.taskId === id) renderTask(task, await why);
    const children = await api('GET', `/v1/tasks/${encodeURIComponent(id)}/children?limit=${CHILDREN_SHOWN}`);
    if (view.taskId === id) renderChildren(children);
  }

  // Most children a task's page lists (GET /v1/tasks/{id}/children gives the total too).
  const CHILDREN_SHOWN = 50;

  /** The tasks this one spawned: a link and a status each, and how many there are in all. */
  function renderChildren(answer) {
    const list = Array.isArray(answer && answer.children) ? answer.children : [];
    const total = (answer && answer.total) || 0;
    $('#children').hidden = total === 0;
    $('#children-count').textContent = total > list.length ? `the first ${list.length} of ${total}` : `${total}`;
    $('#children-list').replaceChildren(...list.map((c) => el('li', { 'data-child': c.id },
      taskLink(c.id), ' ', statusBadge(c.status))));
  }

  async function act(kind) {
    const id = view.taskId;
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
    });
  }

  window.AF.views.tasks = {
    async show(params) {
      const filter = new URLSearchParams();
      for (const k of LIST_FIELDS) if (params.get(k)) filter.set(k, params.get(k));
      view.filter = filter;
      view.next = null;
      view.pending = null;
      $('#bulk-confirm').hidden = true;
      for (const k of LIST_FIELDS) {
        const v = filter.get(k) || '';
        $(`#f-${k}`).value = k.startsWith('created_') && v ? toLocal(v) : v;
      }
      await fillTypes();
    },
    refresh: () => loadList(false),
    start() {
      $('#filters').addEventListener('submit', submitFilters);
      $('#filters-clear').addEventListener('click', () => { window.location.hash = '#/tasks'; });
      $('#list-more').addEventListener('click', () => run(() => loadList(true)));
      $('#bulk-retry').addEventListener('click', () => run(() => bulkAsk('retry')));
      $('#bulk-cancel').addEventListener('click', () => run(() => bulkAsk('cancel')));
      $('#bulk-go').addEventListener('click', () => run(bulkGo));
      $('#bulk-back').addEventListener('click', () => { view.pending = null; $('#bulk-confirm').hidden = true; });
      $('#retry').addEventListener('click', () => act('retry'));
      $('#cancel').addEventListener('click', () => act('cancel'));
    },
  };

  window.AF.views.task = {
    show(params) {
      view.taskId = params.get('id');
      $('#search-id').value = view.taskId;
    },
    refresh: () => (view.taskId ? showTask(view.taskId) : Promise.resolve()),
    start() {},
  };
})();
