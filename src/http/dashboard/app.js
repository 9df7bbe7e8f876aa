// The asyncflow dashboard, part 7 of 7: routing, polling and the header. The view and its
// state live in the URL's hash, so every view can be bookmarked and reloaded:
//   #/?type=&range=     overview                #/tasks?type=&status=&...   tasks by filter
//   #task=<id>          one task                #/types, #/types/<name>     types and queues
//   #/workflows         pipelines and runs      #run=<id>                   one run
//   #/schedules         schedules               #/workers                   workers, leader
'use strict';

(() => {
  const { $, views, storageGet, storageSet, showMessage, clearMessage, run, TOKEN_KEY } = window.AF;
  const INTERVAL_KEY = 'asyncflow.interval';
  // a task id as the server writes it: <type>-<shard>-<n>
  const TASK_ID = /^[a-z][a-z0-9_]{0,39}-\d+-\d+$/;

  const state = { timer: null, polling: false, view: 'overview', navigated: 0 };

  function decode(text) {
    try {
      return decodeURIComponent(text);
    } catch {
      return text;
    }
  }

  /** The hash as a view name and its parameters. */
  function parse(hash) {
    let m = /^#task=(.+)$/.exec(hash);
    if (m) return ['task', new URLSearchParams({ id: decode(m[1]) })];
    m = /^#run=(.+)$/.exec(hash);
    if (m) return ['run', new URLSearchParams({ id: decode(m[1]) })];
    m = /^#\/types\/([^?]+)$/.exec(hash);
    if (m) return ['type', new URLSearchParams({ name: decode(m[1]) })];
    m = /^#\/([a-z]*)(?:\?(.*))?$/.exec(hash);
    if (m && (m[1] === '' || views[m[1]])) return [m[1] || 'overview', new URLSearchParams(m[2] || '')];
    return ['overview', new URLSearchParams()];
  }

  async function route() {
    const [name, params] = parse(window.location.hash);
    state.view = name;
    state.navigated += 1;
    const mine = state.navigated;
    for (const section of document.querySelectorAll('section[data-view]')) {
      section.hidden = section.dataset.view !== name;
    }
    const tab = { task: 'tasks', type: 'types', run: 'workflows' }[name] || name;
    for (const a of document.querySelectorAll('#nav a')) {
      if (a.dataset.nav === tab) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    await run(async () => {
      await views[name].show(params);
      if (mine === state.navigated) await views[name].refresh();
    });
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
      await views[state.view].refresh();
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
      const text = $('#search-id').value.trim();
      if (!text) return;
      const hash = TASK_ID.test(text) ? `#task=${encodeURIComponent(text)}` : `#/tasks?${new URLSearchParams({ q: text })}`;
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
      route().then(tick);
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
    for (const view of Object.values(views)) view.start();
    window.addEventListener('hashchange', route);
    document.addEventListener('visibilitychange', () => (document.hidden ? schedule() : tick()));
    tokenSaved();
    route().then(schedule);
  }

  start();
})();
