// What the browser scripts share: Debian's Chromium launched headless, and a page with the
// screenshot and wait helpers.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const STEP_MS = 10_000;

/** Chromium at `executablePath`, headless. */
export function launch(executablePath) {
  return chromium.launch({
    executablePath,
    headless: true,
    // Chromium's sandbox cannot start as root (CI runs as root); the page is our own.
    chromiumSandbox: false,
    args: ['--disable-dev-shm-usage', '--disable-gpu', '--no-first-run'],
    timeout: 30_000,
  });
}

/**
 * `shot(name)`: a full-page screenshot into the folder `shots` (none when null);
 * `waitFor(check, arg)`: whether `check` (run in the page) held within STEP_MS.
 */
export function helpers(page, shots) {
  if (shots) mkdirSync(shots, { recursive: true });
  return {
    shot: async (name) => {
      if (shots) await page.screenshot({ path: join(shots, name), fullPage: true });
    },
    waitFor: async (check, arg) => {
      try {
        await page.waitForFunction(check, arg, { timeout: STEP_MS, polling: 50 });
        return true;
      } catch {
        return false;
      }
    },
  };
}
