// The asyncflow dashboard, part 6 of 7: workflows. Pipelines with their versions and status
// (GET /v1/pipelines), the newest runs (GET /v1/runs), and one run (#run=<id>, GET /v1/runs/{id}):
// its graph drawn from the pipeline's edges with nodes coloured by status and segment counts,
// its nodes with Retry node, its traces and callbacks, Retry run and Cancel run.
'use strict';

(() => {
  const { $, el, api, run, fmtTime, statusBadge, showMessage, taskLink, runLink } = window.AF;
  const view = {
    runId: null,
    // "<pipeline>\0<version>" -> edges: a version's definition never changes
    edges: new Map(),
  };

  async function refreshPipelines() {
    const list = await api('GET', '/v1/pipelines');
    const rows = (Array.isArray(list) ? list : []).map((p) => el('tr', { 'data-pipeline': p.name, 'data-version': p.version },
      el('td', { 'data-col': 'name' }, el('a', { href: `#/workflows?${new URLSearchParams({ pipeline: p.name })}` }, p.name)),
      el('td', { class: 'num', 'data-col': 'version' }, p.version),
      el('td', { 'data-col': 'status' }, el('span', { class: `badge pipeline-${p.status === 'active' ? 'active' : 'other'}` }, p.status)),
      el('td', { 'data-col': 'created' }, fmtTime(p.created_at)),
    ));
    $('#pipeline-list tbody').replaceChildren(...rows);
    $('#no-pipelines').hidden = rows.length > 0;
  }

  async function refreshRuns() {
    const query = new URLSearchParams({ limit: '20' });
    if (view.pipeline) query.set('pipeline', view.pipeline);
    const page = await api('GET', `/v1/runs?${query}`);
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

  function renderRun(run, edges) {
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
      el('td', {}, ['failed', 'timed_out'].includes(e.status)
        ? el('button', { type: 'button', 'data-action': 'retry-node', onclick: () => retryNode(run.run_id, e.node) }, 'Retry node')
        : ''),
    )));
    $('#dag').replaceChildren(window.AF.dag(events, edges));
    const nodeOf = new Map(events.map((e) => [e.event_id, e.node]));
    const traces = Array.isArray(run.traces) ? run.traces : [];
    $('#traces tbody').replaceChildren(...traces.map((t) => el('tr', { 'data-node': nodeOf.get(t.event_id) || '' },
      el('td', { 'data-col': 'node' }, nodeOf.get(t.event_id) || ''),
      el('td', { 'data-col': 'task' }, t.task_id ? taskLink(t.task_id) : ''),
      el('td', { 'data-col': 'stage' }, t.stage || ''),
      el('td', { class: 'num', 'data-col': 'attempt' }, t.attempt ?? ''),
      el('td', { 'data-col': 'worker' }, t.worker || ''),
      el('td', { 'data-col': 'outcome' }, t.outcome || ''),
      el('td', { 'data-col': 'started' }, fmtTime(t.started_at)),
      el('td', { class: 'num', 'data-col': 'cost' }, t.cost_ms ?? ''),
      el('td', { 'data-col': 'error', class: 'error-text' }, t.error || ''),
    )));
    $('#traces-title').textContent = `Traces (${traces.length})`;
    const callbacks = Array.isArray(run.callbacks) ? run.callbacks : [];
    $('#callbacks tbody').replaceChildren(...callbacks.map((c) => el('tr', {},
      el('td', { 'data-col': 'kind' }, c.kind),
      el('td', { 'data-col': 'status' }, statusBadge(c.status)),
      el('td', { class: 'num', 'data-col': 'attempts' }, c.attempts),
      el('td', { 'data-col': 'url' }, c.url),
      el('td', { 'data-col': 'error', class: 'error-text' }, c.last_error || ''),
    )));
    $('#run-cancel').disabled = !(run.status === 'scheduled' || run.status === 'running');
    $('#run-retry').disabled = !['failed', 'timed_out', 'cancelled'].includes(run.status);
  }

  /** The edges of a pipeline version, read once per version. */
  async function edgesOf(name, version) {
    const key = `${name}\u0000${version}`;
    if (!view.edges.has(key)) {
      const query = new URLSearchParams({ version: String(version) });
      const pipe = await api('GET', `/v1/pipelines/${encodeURIComponent(name)}?${query}`);
      const definition = pipe && pipe.definition;
      view.edges.set(key, definition && Array.isArray(definition.edges) ? definition.edges : []);
    }
    return view.edges.get(key);
  }

  async function showRun(id) {
    view.runId = id;
    let found;
    try {
      found = await api('GET', `/v1/runs/${encodeURIComponent(id)}`);
    } catch (e) {
      if (e.status === 404) {
        if (view.runId === id) $('#run').hidden = true;
        showMessage(`No run with id "${id}".`, 'error', 'action');
        return;
      }
      throw e;
    }
    const edges = await edgesOf(found.pipeline, found.version);
    if (view.runId === id) renderRun(found, edges);
  }

  async function retryNode(id, node) {
    await run(async () => {
      await api('POST', `/v1/runs/${encodeURIComponent(id)}/nodes/${encodeURIComponent(node)}/retry`);
      showMessage(`Node ${node} of run ${id} is retried; the run goes on.`, 'info', 'action');
      await showRun(id);
    });
  }

  async function retryRun() {
    const id = view.runId;
    if (!id) return;
    $('#run-retry').disabled = true;
    await run(async () => {
      const answer = await api('POST', `/v1/runs/${encodeURIComponent(id)}/retry`);
      showMessage(`Run ${id} is retried as run ${answer.run_id}.`, 'info', 'action');
      window.location.hash = `#run=${encodeURIComponent(answer.run_id)}`;
    });
  }

  async function cancelRun() {
    const id = view.runId;
    if (!id || !window.confirm(`Cancel run ${id}?`)) return;
    $('#run-cancel').disabled = true;
    await run(async () => {
      const answer = await api('POST', `/v1/runs/${encodeURIComponent(id)}/cancel`);
      showMessage(answer.cancelled ? `Run ${id} is cancelled.` : `Run ${id} was not cancelled: it had ended.`,
        answer.cancelled ? 'info' : 'error', 'action');
      await showRun(id);
          });
  }

  window.AF.views.workflows = {
    show(params) {
      view.pipeline = params.get('pipeline') || '';
    },
    async refresh() {
      await refreshPipelines();
      await refreshRuns();
    },
    start() {},
  };

  window.AF.views.run = {
    show(params) {
      view.runId = params.get('id');
    },
    refresh: () => (view.runId ? showRun(view.runId) : Promise.resolve()),
    start() {
      $('#run-cancel').addEventListener('click', cancelRun);
      $('#run-retry').addEventListener('click', retryRun);
    },
  };
})();
