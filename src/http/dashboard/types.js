// The asyncflow dashboard, part 5 of 7: task types and queues (#/types, #/types/<name>),
// schedules (#/schedules) and workers (#/workers). Pause and resume
// (POST /v1/task-types/{name}/pause|resume), settings (PUT /v1/task-types/{name}: the server's
// validation error is shown as it is), the queue keys of a fair_queues type with their limits
// (GET /v1/task-types/{name}/queues, PUT .../queue-limit: 0 holds a key, empty removes its
// limit), schedules with pause / resume, and the live workers with the maintenance leader
// (GET /v1/workers, "not available" when the server has no such route).
'use strict';

(() => {
  const { $, el, api, run, fmtInt, fmtAge, fmtTime, showMessage, taskLink, runLink } = window.AF;
  // The settings the API takes, with the input each gets; '' means "no limit" where allowed.
  const SETTINGS = [
    ['schedule_limit', 'Batch per claim', 'int'],
    ['schedule_interval', 'Poll interval (s)', 'float'],
    ['max_processing_time', 'Lease (s)', 'int'],
    ['max_retry_num', 'Max retries', 'int'],
    ['max_retry_interval', 'Max retry interval (s; < 0 uniform)', 'int'],
    ['shard_max_rows', 'Shard size (rows)', 'int'],
    ['retention', 'Retention (s)', 'int'],
    ['concurrency', 'Concurrency (empty: none)', 'int?'],
    ['initial_stage', 'Initial stage', 'text'],
    ['fair_queues', 'Fair queues', 'bool'],
    ['queue_concurrency', 'Per-key limit (empty: none)', 'int?'],
  ];
  const view = { type: null, settings: null, queuesNext: null };

  const enc = encodeURIComponent;

  // ---- the list of types ---------------------------------------------------------------------

  async function refreshTypes() {
    const types = await api('GET', '/v1/task-types');
    $('#type-settings tbody').replaceChildren(...(Array.isArray(types) ? types : []).map((t) => el('tr', { 'data-type': t.type },
      el('td', { 'data-col': 'type' }, el('a', { href: `#/types/${enc(t.type)}` }, t.type)),
      el('td', { 'data-col': 'state' }, el('span', { class: `badge ${t.paused ? 'paused' : 'status-running'}` }, t.paused ? 'paused' : 'active')),
      el('td', { class: 'num', 'data-col': 'schedule_limit' }, t.schedule_limit),
      el('td', { class: 'num', 'data-col': 'schedule_interval' }, t.schedule_interval),
      el('td', { class: 'num', 'data-col': 'max_processing_time' }, t.max_processing_time),
      el('td', { class: 'num', 'data-col': 'max_retry_num' }, t.max_retry_num),
      el('td', { class: 'num', 'data-col': 'concurrency' }, t.concurrency ?? '—'),
      el('td', { 'data-col': 'fair_queues' }, t.fair_queues ? 'yes' : 'no'),
      el('td', {}, el('button', { type: 'button', onclick: () => pause(t.type, !t.paused) }, t.paused ? 'Resume' : 'Pause')),
    )));
  }

  async function pause(type, paused) {
    await run(async () => {
      await api('POST', `/v1/task-types/${enc(type)}/${paused ? 'pause' : 'resume'}`);
      showMessage(`Type ${type} is ${paused ? 'paused' : 'resumed'}.`, 'info', 'action');
      if (view.type === type) await refreshType();
      else await refreshTypes();
    });
  }

  // ---- one type: settings and queues ---------------------------------------------------------

  function settingsForm(t) {
    const form = $('#settings');
    const inputs = SETTINGS.map(([key, label, kind]) => {
      const value = t[key];
      const input = kind === 'bool'
        ? el('input', { type: 'checkbox', name: key, id: `s-${key}`, checked: value ? 'checked' : null })
        : el('input', { name: key, id: `s-${key}`, value: value ?? '', size: 10, inputmode: kind === 'text' ? null : 'decimal' });
      return el('label', { for: `s-${key}` }, `${label} `, input);
    });
    form.replaceChildren(...inputs, el('button', { type: 'submit' }, 'Save settings'), el('p', { id: 'settings-error', class: 'error-text', role: 'alert', hidden: true }));
  }

  /** The settings that differ from the type's, as the PUT body; a bad number is sent as typed. */
  function changedSettings() {
    const body = {};
    for (const [key, , kind] of SETTINGS) {
      const input = $(`#s-${key}`);
      const before = view.settings[key];
      let value;
      if (kind === 'bool') value = input.checked;
      else if (kind === 'text') value = input.value;
      else if (input.value.trim() === '' && kind === 'int?') value = null;
      else {
        const n = Number(input.value);
        // not a number: sent as text, so the server names the field in its error
        value = input.value.trim() !== '' && Number.isFinite(n) ? n : input.value;
      }
      if (value !== before && !(value === null && before === undefined)) body[key] = value;
    }
    return body;
  }

  async function saveSettings(event) {
    event.preventDefault();
    const body = changedSettings();
    const error = $('#settings-error');
    error.hidden = true;
    if (!Object.keys(body).length) {
      showMessage('Nothing changed.', 'info', 'action');
      return;
    }
    try {
      await api('PUT', `/v1/task-types/${enc(view.type)}`, body);
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      return;
    }
    showMessage(`Settings of ${view.type} saved.`, 'info', 'action');
    view.settings = null;
    await refreshType();
  }

  function queueRow(q) {
    const input = el('input', { type: 'number', min: 0, size: 5, 'aria-label': `limit of ${q.queue_key}`, value: q.concurrency ?? '' });
    const set = (concurrency) => run(() => setLimit(q.queue_key, concurrency));
    return el('tr', { 'data-key': q.queue_key },
      el('td', { 'data-col': 'queue_key' }, el('a', { href: `#/tasks?${new URLSearchParams({ type: view.type, queue_key: q.queue_key })}` }, q.queue_key || '(none)')),
      el('td', { class: 'num', 'data-col': 'ready' }, fmtInt(q.ready)),
      el('td', { class: 'num', 'data-col': 'delayed' }, fmtInt(q.delayed)),
      el('td', { class: 'num', 'data-col': 'running' }, fmtInt(q.running)),
      el('td', { class: 'num', 'data-col': 'lag' }, q.ready > 0 ? fmtAge(q.oldest_ready_age) : '—'),
      el('td', { class: 'num', 'data-col': 'limit' }, q.concurrency === 0 ? el('span', { class: 'badge held' }, 'held') : (q.concurrency ?? '—')),
      el('td', { 'data-col': 'actions' }, input, ' ',
        el('button', { type: 'button', 'data-action': 'set', onclick: () => set(input.value === '' ? null : Number(input.value)) }, 'Set'), ' ',
        el('button', { type: 'button', 'data-action': 'hold', onclick: () => set(0) }, 'Hold'), ' ',
        el('button', { type: 'button', 'data-action': 'release', onclick: () => set(null) }, 'Remove limit')),
    );
  }

  async function setLimit(key, concurrency) {
    const answer = await api('PUT', `/v1/task-types/${enc(view.type)}/queue-limit`, { queue_key: key, concurrency });
    const now = answer.concurrency === null || answer.concurrency === undefined ? 'no limit' : `limit ${answer.concurrency}`;
    showMessage(`Queue key ${key} of ${view.type}: ${now}.`, 'info', 'action');
    await loadQueues(false);
  }

  async function loadQueues(more) {
    const query = new URLSearchParams({ limit: '100' });
    if (more && view.queuesNext !== null) query.set('after', view.queuesNext);
    const keys = await api('GET', `/v1/task-types/${enc(view.type)}/queues?${query}`);
    const list = Array.isArray(keys) ? keys : [];
    view.queuesNext = list.length === 100 ? list[list.length - 1].queue_key : null;
    const body = $('#queues tbody');
    if (more) body.append(...list.map(queueRow));
    else body.replaceChildren(...list.map(queueRow));
    $('#no-queues').hidden = body.children.length > 0;
    $('#queues-more').hidden = view.queuesNext === null;
  }

  async function refreshType() {
    const t = await api('GET', `/v1/task-types/${enc(view.type)}`);
    $('#type-view-title').textContent = `Type ${t.type}${t.paused ? ' (paused)' : ''}`;
    $('#type-view').dataset.paused = String(t.paused);
    $('#type-pause').disabled = t.paused;
    $('#type-resume').disabled = !t.paused;
    // the form is rebuilt only when the type changed on the server, not under the operator's typing
    if (!view.settings || JSON.stringify(view.settings) !== JSON.stringify(t)) {
      const editing = view.settings && document.activeElement && $('#settings').contains(document.activeElement);
      if (!editing) settingsForm(t);
      view.settings = t;
    }
    $('#queues-part').hidden = !t.fair_queues;
    if (t.fair_queues) await loadQueues(false);
  }

  window.AF.views.types = { show() {}, refresh: refreshTypes, start() {} };
  window.AF.views.type = {
    show(params) {
      view.type = params.get('name');
      view.settings = null;
      view.queuesNext = null;
    },
    refresh: refreshType,
    start() {
      $('#settings').addEventListener('submit', (e) => run(() => saveSettings(e)));
      $('#type-pause').addEventListener('click', () => pause(view.type, true));
      $('#type-resume').addEventListener('click', () => pause(view.type, false));
      $('#queues-more').addEventListener('click', () => run(() => loadQueues(true)));
      $('#queue-limit').addEventListener('submit', (event) => {
        event.preventDefault();
        const value = $('#ql-limit').value.trim();
        run(() => setLimit($('#ql-key').value, value === '' ? null : Number(value)));
      });
    },
  };

  // ---- schedules -----------------------------------------------------------------------------

  async function refreshSchedules() {
    const list = await api('GET', '/v1/schedules');
    const rows = (Array.isArray(list) ? list : []).map((s) => el('tr', { 'data-schedule': s.name },
      el('td', { 'data-col': 'name' }, s.name),
      el('td', { 'data-col': 'cron' }, `${s.cron} (${s.time_zone})`),
      el('td', { 'data-col': 'state' }, el('span', { class: `badge ${s.paused ? 'paused' : 'status-running'}` }, s.paused ? 'paused' : 'active')),
      el('td', { 'data-col': 'next_tick' }, fmtTime(s.next_tick)),
      el('td', { 'data-col': 'last_tick' }, fmtTime(s.last_tick)),
      el('td', { 'data-col': 'last' }, s.last_task_id ? taskLink(s.last_task_id) : s.last_run_id ? runLink(s.last_run_id) : '—'),
      el('td', { 'data-col': 'error', class: 'error-text' }, s.error || ''),
      el('td', {}, el('button', {
        type: 'button',
        onclick: () => run(async () => {
          await api('POST', `/v1/schedules/${enc(s.name)}/${s.paused ? 'resume' : 'pause'}`);
          await refreshSchedules();
        }),
      }, s.paused ? 'Resume' : 'Pause')),
    ));
    $('#schedule-list tbody').replaceChildren(...rows);
    $('#no-schedules').hidden = rows.length > 0;
  }

  window.AF.views.schedules = { show() {}, refresh: refreshSchedules, start() {} };

  // ---- workers and the maintenance leader ----------------------------------------------------

  async function refreshWorkers() {
    let data;
    try {
      data = await api('GET', '/v1/workers');
    } catch (e) {
      if (e.status !== 404) throw e;
      $('#worker-list tbody').replaceChildren();
      $('#leader').textContent = '';
      $('#workers-unavailable').textContent = 'Workers are not available: this server has no /v1/workers.';
      $('#workers-unavailable').hidden = false;
      return;
    }
    $('#workers-unavailable').hidden = true;
    const leader = data && data.leader;
    $('#leader').textContent = leader
      ? `Maintenance leader: ${leader.id} on ${leader.host}, since ${fmtTime(leader.since)} (seen ${fmtTime(leader.last_seen)})`
      : 'No maintenance leader right now.';
    const workers = data && Array.isArray(data.workers) ? data.workers : [];
    $('#worker-list tbody').replaceChildren(...workers.map((w) => el('tr', { 'data-worker': w.id },
      el('td', { 'data-col': 'id' }, w.id),
      el('td', { 'data-col': 'host' }, w.host),
      el('td', { class: 'num', 'data-col': 'pid' }, w.pid ?? ''),
      el('td', { 'data-col': 'types' }, Array.isArray(w.types) ? w.types.join(', ') : ''),
      el('td', { class: 'num', 'data-col': 'in_flight' }, fmtInt(w.in_flight)),
      el('td', { 'data-col': 'started_at' }, fmtTime(w.started_at)),
      el('td', { 'data-col': 'last_seen' }, fmtTime(w.last_seen)),
    )));
  }

  window.AF.views.workers = { show() {}, refresh: refreshWorkers, start() {} };
})();
