// Launches Debian's Chromium headless through playwright-core (which downloads no
// browser), with the flags this kind of machine needs. Shared by the demo's browser
// test and the plain-page interop test.
import fs from 'node:fs';
import { chromium } from 'playwright-core';

/** Where the browser is: $CHROMIUM, or Debian's. */
export const EXECUTABLE = process.env.CHROMIUM ?? '/usr/bin/chromium';

/** Starts a headless Chromium; close it with `browser.close()`. */
export async function launchChromium() {
  if (!fs.existsSync(EXECUTABLE)) {
    throw new Error(`no browser at ${EXECUTABLE}: apt-get update && apt-get install -y chromium`);
  }
  return chromium.launch({
    executablePath: EXECUTABLE,
    headless: true,
    timeout: 30000,
    // Without the background-networking flags Chromium tries hosts this machine cannot
    // reach; --user-data-dir must not be passed (playwright sets its own).
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}
