// Drives one operator action on the dashboard in Debian's headless Chromium for
// tests/dashboard_actions.rs, which prepares the database before and checks it after each step.
// The token is saved in the page's localStorage before it loads. Prints one JSON object of what
// the page showed; assertions are the Rust test's. Progress goes to stderr.
//
// Environment: DASHBOARD_URL, DASHBOARD_TOKEN, CHROMIUM, DASHBOARD_SCREENSHOTS (optional), and
// DASHBOARD_STEP with what it needs:
//   search       DASHBOARD_TYPE: filter by type and status, then search error text
//   bulk-retry   DASHBOARD_TYPE, DASHBOARD_Q: the count, then the confirmed retry
//   pause        DASHBOARD_TYPE: Pause on the type's page      resume: Resume there
//   limit        DASHBOARD_TYPE, DASHBOARD_KEY, DASHBOARD_LIMIT: set a key's limit
//   hold         DASHBOARD_TYPE, DASHBOARD_KEY: hold the key   release: remove its limit
//   dag          DASHBOARD_RUN_ID: the run's graph             retry-node: + DASHBOARD_NODE
//   workers: the live workers and the leader
//   overview, task (DASHBOARD_TASK_ID): screenshots only
import { STEP_MS, helpers, launch } from './launch.mjs';

const env = (name) => process.env[name] || '';
const base = env('DASHBOARD_URL');
const step = env('DASHBOARD_STEP');
const shots = env('DASHBOARD_SCREENSHOTS') || null;
const log = (text) => console.error(`actions.mjs ${step}: ${text}`);

const browser = await launch(env('CHROMIUM'));

try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  await context.addInitScript((token) => window.localStorage.setItem('asyncflow.token', token), env('DASHBOARD_TOKEN'));
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  const out = { page_errors: [] };
  page.on('pageerror', (e) => out.page_errors.push(String(e && e.message ? e.message : e)));
  const { shot, waitFor } = helpers(page, shots);
  const text = async (selector) => ((await page.locator(selector).first().textContent()) ?? '').trim();
  const listIds = () => page.$$eval('#tasks tbody tr', (rows) => rows.map((tr) => tr.dataset.task));
  const open = async (hash) => {
    log(`opening ${hash}`);
    await page.goto(`${base}/${hash}`);
  };
  const type = env('DASHBOARD_TYPE');
  const key = env('DASHBOARD_KEY');
  const keyRow = `#queues tr[data-key="${key}"]`;
  const cell = (selector) => page.evaluate((s) => document.querySelector(s)?.textContent.trim() ?? null, selector);

  if (step === 'search') {
    await open('#/tasks');
    await waitFor((t) => [...document.querySelectorAll('#f-type option')].some((o) => o.value === t), type);
    await page.selectOption('#f-type', type);
    await page.selectOption('#f-status', 'failed');
    await page.click('#filters button[type="submit"]');
    out.filtered = await waitFor(() => document.querySelector('#list-title').textContent.includes('failed'));
    await waitFor(() => document.querySelectorAll('#tasks tbody tr').length > 0);
    out.filter_hash = decodeURIComponent(new URL(page.url()).hash);
    out.filter_ids = await listIds();
    await page.fill('#f-q', 'smtp');
    await page.click('#filters button[type="submit"]');
    await waitFor(() => decodeURIComponent(window.location.hash).includes('q=smtp'));
    await waitFor(() => document.querySelector('#list-title').textContent.includes('smtp'));
    out.search_hash = decodeURIComponent(new URL(page.url()).hash);
    out.search_ids = await listIds();
    // the bookmark alone gives the same list
    await page.reload();
    await waitFor(() => document.querySelectorAll('#tasks tbody tr').length > 0);
    out.reloaded_ids = await listIds();
    out.reloaded_q = await page.inputValue('#f-q');
    // oldest first, asked for: in the URL too
    await page.selectOption('#f-order', 'oldest');
    await page.click('#filters button[type="submit"]');
    await waitFor(() => document.querySelector('#list-title').textContent.includes('oldest first'));
    out.oldest_hash = decodeURIComponent(new URL(page.url()).hash);
    out.oldest_ids = await listIds();
  } else if (step === 'bulk-retry') {
    await open(`#/tasks?${new URLSearchParams({ type, q: env('DASHBOARD_Q') })}`);
    await waitFor(() => document.querySelectorAll('#tasks tbody tr').length > 0);
    await page.click('#bulk-retry');
    await page.locator('#bulk-confirm').waitFor({ state: 'visible' });
    out.count_text = await text('#bulk-count');
    out.count = await page.getAttribute('#bulk-count', 'data-matched');
    await shot('bulk-confirm.png');
    await page.click('#bulk-go');
    out.done = await waitFor(() => /queued again/.test(document.querySelector('#message').textContent));
    out.message = await text('#message');
    await waitFor(() => [...document.querySelectorAll('#tasks tbody td[data-col="status"]')].every((td) => td.textContent === 'pending'));
    out.statuses = await page.$$eval('#tasks tbody td[data-col="status"]', (tds) => tds.map((td) => td.textContent.trim()));
  } else if (step === 'pause' || step === 'resume') {
    await open(`#/types/${type}`);
    await page.locator(step === 'pause' ? '#type-pause:enabled' : '#type-resume:enabled').waitFor();
    await page.click(step === 'pause' ? '#type-pause' : '#type-resume');
    const want = String(step === 'pause');
    out.shown = await waitFor((w) => document.querySelector('#type-view').dataset.paused === w, want);
    out.title = await text('#type-view-title');
  } else if (step === 'limit' || step === 'hold' || step === 'release') {
    await open(`#/types/${type}`);
    await page.locator(keyRow).waitFor();
    out.before = await cell(`${keyRow} td[data-col="limit"]`);
    if (step === 'limit') {
      await page.fill(`${keyRow} input`, env('DASHBOARD_LIMIT'));
      await page.click(`${keyRow} button[data-action="set"]`);
    } else {
      await page.click(`${keyRow} button[data-action="${step}"]`);
    }
    const want = { limit: env('DASHBOARD_LIMIT'), hold: 'held', release: '—' }[step];
    out.shown = await waitFor(([s, w]) => document.querySelector(s)?.textContent.trim() === w, [`${keyRow} td[data-col="limit"]`, want]);
    out.after = await cell(`${keyRow} td[data-col="limit"]`);
    out.message = await text('#message');
    out.keys = await page.$$eval('#queues tbody tr', (rows) => rows.map((tr) => Object.fromEntries(
      [...tr.querySelectorAll('td[data-col]')].filter((td) => td.dataset.col !== 'actions').map((td) => [td.dataset.col, td.textContent.trim()]))));
    if (step === 'hold') await shot('queues.png');
  } else if (step === 'dag' || step === 'retry-node') {
    const runId = env('DASHBOARD_RUN_ID');
    await open(`#run=${encodeURIComponent(runId)}`);
    await page.locator('#dag g[data-node]').first().waitFor();
    const graph = () => page.$$eval('#dag g[data-node]', (nodes) => nodes.map((g) => ({
      node: g.dataset.node,
      status: g.dataset.status,
      class: g.getAttribute('class'),
      label: g.querySelector('text.sub').textContent,
      stroke: getComputedStyle(g.querySelector('rect')).stroke,
    })));
    out.nodes = await graph();
    out.edges = await page.$$eval('#dag path.edge', (paths) => paths.map((p) => p.dataset.edge));
    out.failed_colour = await page.evaluate(() => {
      const probe = document.createElement('span');
      probe.className = 'status-failed';
      document.body.append(probe);
      const colour = getComputedStyle(probe).color;
      probe.remove();
      return colour;
    });
    out.run_retry_enabled = await page.isEnabled('#run-retry');
    out.traces = await page.$$eval('#traces tbody tr', (rows) => rows.length);
    if (step === 'dag') await shot('run-graph.png');
    if (step === 'retry-node') {
      const node = env('DASHBOARD_NODE');
      await page.click(`#events tr[data-node="${node}"] button[data-action="retry-node"]`);
      out.retried_shown = await waitFor(
        (n) => document.querySelector(`#dag g[data-node="${n}"]`)?.dataset.status !== 'failed'
          && /retried/.test(document.querySelector('#message').textContent), node);
      out.nodes_after = await graph();
      out.message = await text('#message');
    }
  } else if (step === 'overview') {
    await open('#/');
    await page.locator('#types tbody tr').first().waitFor();
    await waitFor(() => document.querySelector('#charts').children.length > 0 || !document.querySelector('#charts-unavailable').hidden);
    out.totals = await page.$$eval('#totals [data-total]', (ts) => Object.fromEntries(ts.map((t) => [t.dataset.total, t.querySelector('.n').textContent])));
    out.charts = await page.$$eval('#charts figure', (fs) => fs.map((f) => f.dataset.chart));
    out.charts_unavailable = await page.isVisible('#charts-unavailable');
    out.legend = await page.$$eval('#charts .legend .key', (ks) => ks.map((k) => k.textContent.trim()).join(' | '));
    await shot('overview.png');
  } else if (step === 'workers') {
    await open('#/workers');
    await page.locator('#worker-list tbody tr').first().waitFor();
    out.workers = await page.$$eval('#worker-list tbody tr', (rows) => rows.map((tr) => Object.fromEntries(
      [...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.textContent.trim()]))));
    out.leader = await text('#leader');
    await shot('workers.png');
  } else if (step === 'task') {
    await open(`#task=${encodeURIComponent(env('DASHBOARD_TASK_ID'))}`);
    await waitFor(() => document.querySelectorAll('#timeline .tl-row').length > 0);
    out.timeline = await page.$$eval('#timeline .tl-row', (rows) => rows.map((r) => r.dataset.kind));
    out.progress_shown = await page.isVisible('#progress');
    out.progress = await text('#detail [data-field="progress"]');
    await shot('task.png');
  } else {
    throw new Error(`unknown DASHBOARD_STEP ${step}`);
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
} finally {
  await browser.close();
}
