// Drives the dashboard in Debian's headless Chromium for tests/dashboard.rs, which prepares the
// database, starts `asyncflow serve` and checks what this script saw. It waits for the states the
// scenario leads to, reads the page, and prints one JSON object on stdout; assertions are the Rust
// test's. Progress goes to stderr.
//
// Environment: DASHBOARD_URL (the server's base URL), DASHBOARD_TOKEN, DASHBOARD_TYPE (the task
// type whose row is read), DASHBOARD_TASK_ID (the failed task to search, show and retry),
// DASHBOARD_RUN_ID (the workflow run to find in the runs list, open and cancel),
// CHROMIUM (the browser binary), DASHBOARD_SCREENSHOTS (optional: a folder for screenshots).
import { STEP_MS, helpers, launch } from './launch.mjs';


function need(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`browser.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
}

const base = need('DASHBOARD_URL');
const token = need('DASHBOARD_TOKEN');
const type = need('DASHBOARD_TYPE');
const taskId = need('DASHBOARD_TASK_ID');
const runId = need('DASHBOARD_RUN_ID');
const executablePath = need('CHROMIUM');
const shots = process.env.DASHBOARD_SCREENSHOTS || null;

const log = (text) => console.error(`browser.mjs: ${text}`);

const browser = await launch(executablePath);

try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  const out = { page_errors: [], console_errors: [] };
  page.on('pageerror', (e) => out.page_errors.push(String(e && e.message ? e.message : e)));
  page.on('console', (m) => {
    if (m.type() === 'error') out.console_errors.push(m.text());
  });

  const text = async (selector) => ((await page.locator(selector).first().textContent()) ?? '').trim();
  // {data-col: text} of a table row.
  const cells = (row) =>
    row.evaluate((tr) =>
      Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.textContent.trim()])));
  const logRows = () =>
    page.$$eval('#log tbody tr', (rows) =>
      rows.map((tr) => Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.textContent.trim()]))));
  const fields = () =>
    page.$$eval('#detail [data-field]', (nodes) => Object.fromEntries(nodes.map((n) => [n.dataset.field, n.textContent.trim()])));
  const { shot, waitFor } = helpers(page, shots);

  log(`opening ${base}/`);
  const response = await page.goto(`${base}/`);
  out.page_status = response ? response.status() : null;

  // No token saved yet: the page loads, the API refuses, and the page says what to do.
  await page.locator('#message').waitFor({ state: 'visible' });
  out.message_without_token = await text('#message');

  log('saving the token');
  await page.fill('#token', token);
  await page.click('#auth button[type="submit"]');
  const row = page.locator(`#types tr[data-type="${type}"]`);
  await row.waitFor();
  out.message_hidden_with_token = await waitFor(() => document.querySelector('#message').hidden);
  out.token_in_storage = await page.evaluate(() => window.localStorage.getItem('asyncflow.token'));
  out.row = await cells(row);

  log('polling every second for a throughput figure');
  await page.selectOption('#interval', '1');
  out.throughput_shown = await waitFor(
    (t) => /\d/.test(document.querySelector(`#types tr[data-type="${t}"] td[data-col="throughput"]`)?.textContent ?? ''),
    type,
  );
  out.throughput = (await cells(row)).throughput;
  await shot('overview.png');

  log('listing the failed tasks');
  await row.locator('td[data-col="failed"] button').click();
  out.list_shown = await waitFor((id) => !!document.querySelector(`#tasks tbody tr[data-task="${id}"]`), taskId);
  out.list_title = await text('#list-title');
  out.list_hash = new URL(page.url()).hash;
  out.list = await page.$$eval('#tasks tbody tr', (rows) =>
    rows.map((tr) => Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.textContent.trim()]))));

  log(`searching ${taskId}`);
  await page.click('#nav a[data-nav="overview"]');
  await row.waitFor();
  await page.fill('#search-id', taskId);
  await page.press('#search-id', 'Enter');
  out.detail_shown = await waitFor(
    (id) => document.querySelector('#detail [data-field="id"]')?.textContent === id,
    taskId,
  );
  out.hash = new URL(page.url()).hash;
  out.detail = await fields();
  out.log = await logRows();
  out.retry_enabled = await page.isEnabled('#retry');
  out.cancel_enabled = await page.isEnabled('#cancel');
  out.images = await page.locator('img').count();
  out.scripts = await page.locator('script:not([src])').count();
  out.pwned = await page.evaluate(() => window.__pwned === true);
  await shot('detail.png');

  log('pressing Retry');
  await page.click('#retry');
  out.pending_shown = await waitFor(() => document.querySelector('#detail [data-field="status"]')?.textContent === 'pending');
  out.after_retry = await fields();
  out.after_retry_message = await text('#message');
  out.after_retry_log = await logRows();
  out.after_retry_retry_enabled = await page.isEnabled('#retry');
  out.after_retry_cancel_enabled = await page.isEnabled('#cancel');
  await shot('after-retry.png');
  await page.click('#nav a[data-nav="overview"]');
  await waitFor(
    (t) => document.querySelector(`#types tr[data-type="${t}"] td[data-col="failed"]`)?.textContent === '0',
    type,
  );
  out.row_after_retry = await cells(row);
  out.pwned = out.pwned || (await page.evaluate(() => window.__pwned === true));

  log(`opening run ${runId}`);
  await page.click('#nav a[data-nav="workflows"]');
  const runRow = page.locator(`#run-list tr[data-run="${runId}"]`);
  out.run_listed = await waitFor((id) => !!document.querySelector(`#run-list tr[data-run="${id}"]`), runId);
  if (out.run_listed) {
    out.run_row = await cells(runRow);
    await runRow.locator('a').click();
    await waitFor(() => document.querySelectorAll('#events tbody tr').length > 0);
    out.run_title = await text('#run-title');
    out.run_events = await page.$$eval('#events tbody tr', (rows) =>
      rows.map((tr) => Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.textContent.trim()]))));
    await shot('run.png');
    log('pressing Cancel run');
    page.once('dialog', (d) => d.accept());
    await page.click('#run-cancel');
    out.run_cancelled_shown = await waitFor(
      () => document.querySelector('#run-fields [data-field="status"]')?.textContent === 'cancelled');
  }

  process.stdout.write(`${JSON.stringify(out)}\n`);
} finally {
  await browser.close();
}
