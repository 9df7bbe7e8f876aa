// The asyncflow dashboard, part 3 of 7: the overview. Per type (GET /v1/dashboard): depth,
// counts, lag, throughput, shards, paused and held badges; totals; history charts
// (GET /v1/stats/history), which show "not available" when the server has no such route.
'use strict';

(() => {
  const { $, el, api, fmtInt, fmtAge } = window.AF;
  // Throughput is averaged over the polls of about the last minute.
  const WINDOW_MS = 60_000;
  const COUNTS = ['ready', 'delayed', 'running', 'waiting', 'succeeded', 'failed', 'cancelled'];
  const view = {
    // task type -> [{t: ms (performance.now), finished: succeeded + failed}]
    samples: new Map(),
    chartType: '',
    range: 'hour',
    // the last history drawn, so a poll redraws only when it changed
    drawn: null,
  };

  /** Tasks finished (succeeded or failed) per minute, from this page's successive polls. */
  function throughput(type, finished, now) {
    let samples = view.samples.get(type) || [];
    // A count that went down (a failed task retried by hand, old shards dropped) breaks the
    // series: start again.
    if (samples.length && finished < samples[samples.length - 1].finished) samples = [];
    samples.push({ t: now, finished });
    while (samples.length > 2 && now - samples[1].t >= WINDOW_MS) samples.shift();
    view.samples.set(type, samples);
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
          onclick: () => { window.location.hash = `#/tasks?${new URLSearchParams({ type: t.type, status })}`; },
        }, fmtInt(n)));
      } else {
        td.append(fmtInt(n));
      }
      return td;
    };
    const name = el('td', { 'data-col': 'type' }, el('a', { class: 'type-name', href: `#/types/${encodeURIComponent(t.type)}` }, t.type));
    if (t.paused) name.append(' ', el('span', { class: 'badge paused' }, 'paused'));
    if (t.held) name.append(' ', el('span', { class: 'badge held', title: 'Queue keys held at limit 0' }, 'held'));
    const shards = t.begin_pos === null || t.end_pos === null ? '—' : `${t.begin_pos}..${t.end_pos} (${t.shards})`;
    return el('tr', { 'data-type': t.type },
      name,
      count('ready', t.ready, 'pending'),
      count('delayed', t.delayed, 'pending'),
      count('running', t.running, 'running'),
      count('waiting', t.waiting || 0, 'waiting'),
      count('succeeded', t.succeeded, 'succeeded'),
      count('failed', t.failed, 'failed'),
      count('cancelled', t.cancelled, 'cancelled'),
      num('lag', t.ready > 0 ? fmtAge(t.oldest_ready_age) : '—', 'Age of the oldest ready task'),
      num('throughput', rate === null ? '—' : `${rate < 10 ? rate.toFixed(1) : Math.round(rate)}/min`,
        rate === null ? 'Needs two polls' : 'Succeeded + failed per minute, from this page\'s polls'),
      num('shards', shards, `begin_pos ${t.begin_pos}, end_pos ${t.end_pos}, ${t.shards} live shard(s)`),
    );
  }

  function totals(data, types) {
    const sum = data && data.totals && typeof data.totals === 'object' ? data.totals : null;
    const box = $('#totals');
    box.replaceChildren(...COUNTS.map((k) => {
      const n = sum && typeof sum[k] === 'number' ? sum[k] : types.reduce((acc, t) => acc + (Number(t[k]) || 0), 0);
      return el('div', { class: 'total', 'data-total': k }, el('span', { class: 'n' }, fmtInt(n)), el('span', { class: 'k' }, k));
    }));
  }

  async function refreshTypes() {
    const data = await api('GET', '/v1/dashboard');
    const now = performance.now();
    const types = Array.isArray(data && data.types) ? data.types : [];
    const seen = new Set();
    const rows = types.map((t) => {
      seen.add(t.type);
      // the monotonic counters when the server has them: a retry by hand does not lower them
      const finished = (t.succeeded_total ?? t.succeeded) + (t.failed_total ?? t.failed);
      return typeRow(t, throughput(t.type, finished, now));
    });
    for (const type of [...view.samples.keys()]) if (!seen.has(type)) view.samples.delete(type);
    $('#types tbody').replaceChildren(...rows);
    $('#no-types').hidden = rows.length > 0;
    totals(data, types);
    const select = $('#chart-type');
    const names = types.map((t) => t.type);
    const have = [...select.options].map((o) => o.value).slice(1);
    if (have.join() !== names.join()) {
      select.replaceChildren(el('option', { value: '' }, 'all types'), ...names.map((n) => el('option', { value: n }, n)));
    }
    select.value = view.chartType;
    $('#chart-range').value = view.range;
    $('#updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
    return types;
  }

  async function refreshCharts() {
    const query = new URLSearchParams({ range: view.range });
    if (view.chartType) query.set('type', view.chartType);
    let history;
    try {
      history = await api('GET', `/v1/stats/history?${query}`);
    } catch (e) {
      if (e.status === 404) {
        $('#charts').replaceChildren();
        $('#charts-unavailable').textContent = 'History charts are not available: this server has no /v1/stats/history.';
        $('#charts-unavailable').hidden = false;
        view.drawn = null;
        return;
      }
      throw e;
    }
    $('#charts-unavailable').hidden = true;
    const points = Array.isArray(history && history.points) ? history.points : [];
    const key = JSON.stringify([view.chartType, view.range, points]);
    if (key === view.drawn) return;
    view.drawn = key;
    $('#charts').replaceChildren(
      window.AF.lineChart('Throughput per interval', points, [
        { key: 'succeeded', label: 'succeeded', cls: 's-succeeded', sum: true },
        { key: 'failed', label: 'failed', cls: 's-failed', sum: true },
        { key: 'retried', label: 'retried', cls: 's-retried', sum: true },
      ]),
      window.AF.lineChart('Queue', points, [
        { key: 'ready', label: 'ready', cls: 's-ready' },
        { key: 'running', label: 'running', cls: 's-running' },
      ]),
      window.AF.lineChart('Lag (s)', points, [{ key: 'lag_seconds', label: 'lag (s)', cls: 's-lag' }]),
    );
  }

  window.AF.views.overview = {
    show(params) {
      view.chartType = params.get('type') || '';
      view.range = ['hour', 'day', 'month'].includes(params.get('range')) ? params.get('range') : 'hour';
      view.drawn = null;
    },
    async refresh() {
      await refreshTypes();
      await refreshCharts();
    },
    start() {
      const go = () => {
        const query = new URLSearchParams();
        if ($('#chart-type').value) query.set('type', $('#chart-type').value);
        if ($('#chart-range').value !== 'hour') query.set('range', $('#chart-range').value);
        window.location.hash = `#/${query.toString() ? `?${query}` : ''}`;
      };
      $('#chart-type').addEventListener('change', go);
      $('#chart-range').addEventListener('change', go);
    },
  };
})();
