// Browser test of the demo page, as a person would check it, in headless Chromium.
// Run (with the demo server up):
//   cd web-demo && npm ci && DEMO_URL=http://127.0.0.1:PORT \
//     timeout 300 node --test --test-timeout=60000 browser-test.mjs
// Env: DEMO_URL (required), SCREENSHOT_DIR (default ../target/screenshots),
//      CHROMIUM (default /usr/bin/chromium), DEMO_BIN (the built web_demo example, default
//      ../target/debug/examples/web_demo: the reconnect and chat resume tests run servers
//      of their own, restart them under the page, and cut a page's link with a TCP proxy
//      or through Playwright's WebSocket route;
//      the presence and cross-server resume tests run two over a Redis of their own, so it is built with
//      `--features axum,redis` and needs `redis-server` on the PATH).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium } from './chromium.mjs';
import { tcpProxy } from '../js/test/tcp-proxy.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BASE = (process.env.DEMO_URL ?? '').replace(/\/+$/, '');
const SHOTS = path.resolve(process.env.SCREENSHOT_DIR ?? path.join(HERE, '..', 'target', 'screenshots'));
const WAIT_MS = 10000; // every wait below is bounded by this (or less)

const DEMO_BIN = path.resolve(process.env.DEMO_BIN ?? path.join(HERE, '..', 'target', 'debug', 'examples', 'web_demo'));

/**
 * Starts the demo server on `listen` (with `args`); resolves with `{ url, stop }` once it
 * prints its first line (`listening on http://HOST:PORT ...`). `stop(signal)` kills it
 * (SIGKILL; SIGINT shuts it down gracefully) and resolves when it has exited.
 */
function startDemo(listen, args = []) {
  return new Promise((resolve, reject) => {
    const child = spawn(DEMO_BIN, ['--listen', listen, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((r) => child.once('exit', r));
    const stop = (signal = 'SIGKILL') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    };
    const timer = setTimeout(() => (stop(), reject(new Error(`web_demo did not listen within ${WAIT_MS} ms`))), WAIT_MS);
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const line = out.split('\n')[0];
      const m = /^listening on (http:\/\/\S+)/.exec(line);
      if (out.includes('\n') && m) {
        clearTimeout(timer);
        resolve({ url: m[1], stop });
      }
    });
    child.once('error', (e) => (clearTimeout(timer), reject(e)));
    exited.then((code) => (clearTimeout(timer), reject(new Error(`web_demo exited (${code}) before listening: ${out}`))));
  });
}

const LAPTOP = { viewport: { width: 1366, height: 900 } };
const PHONE = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };

test('the demo page, as a person would check it', { timeout: 120000 }, async (t) => {
  assert.ok(BASE, 'set DEMO_URL to the demo base URL, e.g. http://127.0.0.1:3000');
  fs.mkdirSync(SHOTS, { recursive: true });

  // Cleanup is registered before anything is launched, so a failure cannot leave a browser behind.
  let browser;
  t.after(async () => {
    await browser?.close().catch(() => {});
  });
  browser = await launchChromium();

  const consoleErrors = [];
  /** Opens the demo in a new context; `setUp(page)` runs before the page loads. */
  async function openPage(options, label, setUp = async () => {}) {
    const context = await browser.newContext(options);
    const page = await context.newPage();
    page.setDefaultTimeout(WAIT_MS);
    await setUp(page);
    page.on('console', (m) => {
      if (m.type() === 'error') consoleErrors.push(`[${label}] console: ${m.text()}`);
    });
    page.on('pageerror', (e) => consoleErrors.push(`[${label}] page error: ${e.message}`));
    await page.goto(`${BASE}/`, { timeout: WAIT_MS });
    await page.locator('[data-testid="status"][data-state="open"]').waitFor({ timeout: WAIT_MS });
    return page;
  }
  const text = (page, id) => page.getByTestId(id).textContent();
  const waitText = (page, id, pattern) =>
    page.waitForFunction(
      ([id, src]) => new RegExp(src).test(document.querySelector(`[data-testid="${id}"]`)?.textContent ?? ''),
      [id, pattern.source],
      { timeout: WAIT_MS },
    );

  const page = await openPage(LAPTOP, 'laptop');

  await t.test('status shows connected', async () => {
    assert.match(await text(page, 'status'), /connected/);
  });

  await t.test('calculator: 42 − 23 = 19 and 23 − 42 = −19, positional and named; sum', async () => {
    await page.getByTestId('calc-a').fill('42');
    await page.getByTestId('calc-b').fill('23');
    await page.getByTestId('btn-positional').click();
    await waitText(page, 'calc-result-positional', /^19$/);
    await page.getByTestId('btn-named').click();
    await waitText(page, 'calc-result-named', /^19$/);
    await page.getByTestId('calc-a').fill('23');
    await page.getByTestId('calc-b').fill('42');
    await page.getByTestId('btn-positional').click();
    await waitText(page, 'calc-result-positional', /^-19$/);
    await page.getByTestId('btn-named').click();
    await waitText(page, 'calc-result-named', /^-19$/);
    await page.getByTestId('sum-input').fill('1, 2, 4');
    await page.getByTestId('btn-sum').click();
    await waitText(page, 'sum-result', /^7$/);
  });

  await t.test('live chart: at least 5 pushes, clock and connection count shown, line drawn', async () => {
    await page.waitForFunction(
      () => Number(document.querySelector('[data-testid="push-count"]').textContent) >= 5,
      null,
      { timeout: WAIT_MS },
    );
    assert.match(await text(page, 'server-clock'), /\d\d:\d\d:\d\d/);
    assert.ok(Number(await text(page, 'connections')) >= 1);
    // The accent-coloured line must be on the canvas, not just an empty grid. The chart is
    // drawn in an animation frame after a push, not with it: waited for, not read once.
    const opaquePixels = () => {
      const c = document.querySelector('[data-testid="chart"]');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i] > 200) n++;
      return n;
    };
    await page.waitForFunction(`(${opaquePixels})() > 500`, null, { timeout: WAIT_MS }).catch(async (e) => {
      throw new Error(`chart looks empty (${await page.evaluate(opaquePixels)} opaque pixels): ${e.message}`);
    });
  });

  await t.test('the server calls the browser and answers with what the browser said', async () => {
    await page.getByTestId('btn-ask').click();
    await waitText(page, 'ask-result', /"asked"/);
    const result = JSON.parse(await text(page, 'ask-result'));
    assert.equal(result.asked, 'ui.describe');
    assert.equal(typeof result.elapsed_ms, 'number');
    assert.deepEqual(result.answer.viewport, LAPTOP.viewport);
    assert.equal(typeof result.answer.language, 'string');
    assert.match(result.answer.userAgent, /Chrom/);
    assert.ok(!Number.isNaN(Date.parse(result.answer.time)));
    const states = await page.locator('[data-testid="ask-steps"] li').evaluateAll((lis) => lis.map((li) => li.dataset.state));
    assert.deepEqual(states, ['done', 'done', 'done', 'done']);
  });

  await t.test('chat: a message typed in one page appears in a second page', async () => {
    const other = await openPage(LAPTOP, 'second page');
    const message = `hello from page one ${Date.now()}`;
    await page.getByTestId('chat-name').fill('alice');
    await page.getByTestId('chat-text').fill(message);
    await page.getByTestId('chat-text').press('Enter');
    for (const p of [other, page]) {
      await p.locator('[data-testid="chat-message"]', { hasText: message }).waitFor({ timeout: WAIT_MS });
    }
    assert.match(await other.locator('[data-testid="chat-message"]', { hasText: message }).textContent(), /alice/);
    await waitText(page, 'chat-status', /delivered to \d+ pages?/);
    const delivered = Number((await text(page, 'chat-status')).match(/\d+/)[0]);
    assert.ok(delivered >= 2, `delivered to ${delivered}`);
    // the second page answers one more chat line, so both directions show in the screenshot
    await other.getByTestId('chat-name').fill('bob');
    await other.getByTestId('chat-text').fill('got it, thanks');
    await other.getByTestId('chat-text').press('Enter');
    await page.locator('[data-testid="chat-message"]', { hasText: 'got it' }).waitFor({ timeout: WAIT_MS });
    await other.context().close();
  });

  await t.test('chat: what is typed while the last line waits for its answer stays in the box', async () => {
    // The answer to the page's first chat.send is held (the page's socket goes through
    // Playwright's route) until the next line is typed: the line itself arrives first,
    // and the answer, when it comes, must not empty the box of the next one.
    let release;
    const held = new Promise((r) => (release = r));
    let sendId;
    const parse = (m) => {
      try {
        return JSON.parse(String(m));
      } catch {
        return null;
      }
    };
    const slow = await openPage(LAPTOP, 'held answer', (p) =>
      p.routeWebSocket(/\/rpc$/, (ws) => {
        const server = ws.connectToServer();
        ws.onMessage((m) => {
          const msg = parse(m);
          if (sendId === undefined && msg?.method === 'chat.send') sendId = msg.id;
          server.send(m);
        });
        server.onMessage(async (m) => {
          const msg = parse(m);
          if (sendId !== undefined && msg?.id === sendId && !msg.method) await held;
          ws.send(m);
        });
      }));
    await slow.locator('[data-testid="chat-sync"][data-state="live"]').waitFor();
    await slow.getByTestId('chat-name').fill('carol');
    await slow.getByTestId('chat-text').fill('first of two');
    await slow.getByTestId('chat-text').press('Enter');
    await slow.locator('[data-testid="chat-message"]', { hasText: 'first of two' }).waitFor();
    assert.ok(sendId !== undefined, 'the page sent chat.send through the route');
    await slow.getByTestId('chat-text').fill('second of two');
    release();
    await waitText(slow, 'chat-status', /delivered to \d+ pages?/);
    assert.equal(await slow.getByTestId('chat-text').inputValue(), 'second of two');
    await slow.getByTestId('chat-text').press('Enter');
    await slow.locator('[data-testid="chat-message"]', { hasText: 'second of two' }).waitFor();
    assert.equal(await slow.getByTestId('chat-text').inputValue(), '');
    await slow.context().close();
  });

  /** `demo.tasks_running`, asked over a connection of its own from the page. */
  const tasksRunning = (p) =>
    p.evaluate(async () => {
      const { connect } = await import('jsonrpc-peer');
      const own = await connect(`ws://${location.host}/rpc`);
      try {
        return await own.call('demo.tasks_running', []);
      } finally {
        own.close();
      }
    });
  /** Waits (bounded) until the server runs no long task: a cancelled one is dropped
   * just after its -32800 answer leaves. */
  async function noTasksRunning(p) {
    let n;
    for (let i = 0; i < 50; i++) {
      n = await tasksRunning(p);
      if (n === 0) return;
      await p.waitForTimeout(100);
    }
    assert.fail(`the server still runs ${n} long task(s)`);
  }

  await t.test('long task: the bar moves, Cancel stops it on the server, the wire shows the cancel and -32800', async () => {
    await page.getByTestId('task-seconds').fill('30');
    await page.getByTestId('btn-task-start').click();
    await page.waitForFunction(() => document.querySelector('[data-testid="task-progress"]').value > 0, null, { timeout: WAIT_MS });
    await waitText(page, 'tasks-running', /^[1-9]\d*$/);
    await page.getByTestId('panel-task').screenshot({ path: path.join(SHOTS, 'panel-task-running.png') });
    await page.getByTestId('btn-task-cancel').click();
    await waitText(page, 'task-status', /^cancelled$/);
    const row = (dir, hasText) => page.locator(`[data-testid="wire-row"][data-direction="${dir}"]`, { hasText }).first();
    await row('out', 'notify $/cancelRequest').waitFor({ timeout: WAIT_MS });
    await row('in', '-32800').waitFor({ timeout: WAIT_MS });
    assert.match(await row('in', '-32800').textContent(), /Request cancelled/);
    await noTasksRunning(page);
    // A short one runs to its end: the bar fills and the answer is "done".
    await page.getByTestId('task-seconds').fill('0.5');
    await page.getByTestId('btn-task-start').click();
    await waitText(page, 'task-status', /^"done"$/);
    assert.equal(await page.getByTestId('task-progress').evaluate((b) => b.value), 1);
    await waitText(page, 'tasks-running', /^0$/);
  });

  await t.test('AbortSignal: abort rejects with its reason, the server answers -32800 and stops', async () => {
    const outcome = await page.evaluate(async (waitMs) => {
      const { connect, ErrorCode } = await import('jsonrpc-peer');
      let sawCancelled;
      const cancelledAnswer = new Promise((r) => (sawCancelled = r));
      const own = await connect(`ws://${location.host}/rpc`, {
        onFrame: (dir, text) => {
          if (dir === 'in' && JSON.parse(text)?.error?.code === ErrorCode.REQUEST_CANCELLED) sawCancelled(text);
        },
      });
      const controller = new AbortController();
      const values = [];
      let message;
      try {
        await own.call('demo.long_task', [30], {
          signal: controller.signal,
          onProgress: (v) => {
            values.push(v.fraction);
            if (values.length === 3) controller.abort(new Error('enough'));
          },
        });
      } catch (e) {
        message = e.message;
      }
      const pending = own.pendingCount;
      // Bounded, not a pause: it ends as soon as the -32800 answer is in.
      const answer = await Promise.race([cancelledAnswer, new Promise((r) => setTimeout(() => r(null), waitMs))]);
      own.close();
      return { message, values, pending, answer };
    }, WAIT_MS);
    assert.equal(outcome.message, 'enough');
    assert.equal(outcome.values.length, 3);
    assert.ok(outcome.values[0] <= outcome.values[1] && outcome.values[1] <= outcome.values[2], `${outcome.values}`);
    assert.equal(outcome.pending, 0);
    assert.ok(outcome.answer, `no -32800 answer within ${WAIT_MS} ms`);
    assert.deepEqual(JSON.parse(outcome.answer).error, { code: -32800, message: 'Request cancelled' });
    await noTasksRunning(page);
  });

  await t.test('wire log lists frames in both directions', async () => {
    const rows = page.getByTestId('wire-row');
    assert.ok((await rows.count()) >= 8, `only ${await rows.count()} rows`);
    assert.ok((await page.locator('[data-testid="wire-row"][data-direction="in"]').count()) > 0);
    assert.ok((await page.locator('[data-testid="wire-row"][data-direction="out"]').count()) > 0);
    const all = (await page.getByTestId('wire-log').textContent()) ?? '';
    for (const expected of ['call subtract', 'call ui.describe', 'call demo.ask_browser', 'notify chat.message', '"jsonrpc":"2.0"']) {
      assert.ok(all.includes(expected), `wire log lacks ${expected}`);
    }
  });

  await t.test('screenshots: each panel and the whole page at laptop width', async () => {
    for (const panel of ['calc', 'live', 'ask', 'task', 'chat', 'wire']) {
      await page.getByTestId(`panel-${panel}`).screenshot({ path: path.join(SHOTS, `panel-${panel}.png`) });
    }
    await page.screenshot({ path: path.join(SHOTS, 'laptop.png'), fullPage: true });
    await page.emulateMedia({ colorScheme: 'dark' });
    // One more push redraws the chart in dark colours: waited for (the push, then the
    // animation frame it draws in), not slept on.
    const pushes = Number(await text(page, 'push-count'));
    await page.waitForFunction(
      (n) => Number(document.querySelector('[data-testid="push-count"]').textContent) > n,
      pushes,
      { timeout: WAIT_MS },
    );
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    await page.screenshot({ path: path.join(SHOTS, 'laptop-dark.png'), fullPage: true });
    await page.emulateMedia({ colorScheme: 'light' });
  });

  await t.test('phone width (390 px): usable, nothing overflows sideways', async () => {
    const phone = await openPage(PHONE, 'phone');
    await phone.getByTestId('btn-positional').click();
    await waitText(phone, 'calc-result-positional', /^19$/);
    await phone.getByTestId('btn-ask').click();
    await waitText(phone, 'ask-result', /"asked"/);
    await phone.waitForFunction(
      () => Number(document.querySelector('[data-testid="push-count"]').textContent) >= 5,
      null,
      { timeout: WAIT_MS },
    );
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `page is ${overflow}px wider than the phone screen`);
    await phone.screenshot({ path: path.join(SHOTS, 'phone.png'), fullPage: true });
    await phone.context().close();
  });

  await t.test('the JS console has no errors', () => {
    assert.deepEqual(consoleErrors, []);
  });
});

test('the page comes back by itself when the server restarts under it', { timeout: 120000 }, async (t) => {
  assert.ok(fs.existsSync(DEMO_BIN), `build the demo first (cargo build --example web_demo): ${DEMO_BIN}`);
  fs.mkdirSync(SHOTS, { recursive: true });
  let browser;
  let server;
  t.after(async () => {
    await browser?.close().catch(() => {});
    await server?.stop();
  });
  server = await startDemo('127.0.0.1:0');
  const { port } = new URL(server.url);
  browser = await launchChromium();
  const page = await (await browser.newContext(LAPTOP)).newPage();
  page.setDefaultTimeout(WAIT_MS);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${server.url}/`, { timeout: WAIT_MS });
  await page.locator('[data-testid="status"][data-state="open"]').waitFor();

  await server.stop();
  server = null;
  // The state and its text are read in one evaluation: with full jitter the wait can be a
  // few milliseconds, and the page may be dialling again by the time a second read lands.
  const closedText = await (
    await page.waitForFunction(() => {
      const el = document.querySelector('[data-testid="status"]');
      return el?.getAttribute('data-state') === 'closed' && el.textContent;
    })
  ).jsonValue();
  assert.match(closedText, /disconnected.*retrying in \d+\.\d s/);

  // A call made while the link is down waits for it (its timeout is 10 s).
  await page.getByTestId('calc-a').fill('50');
  await page.getByTestId('calc-b').fill('8');
  await page.getByTestId('btn-positional').click();
  assert.equal(await page.getByTestId('calc-result-positional').textContent(), '…');

  // The same port again (tokio's listener sets SO_REUSEADDR): the page reconnects alone.
  server = await startDemo(`127.0.0.1:${port}`);
  await page.locator('[data-testid="status"][data-state="open"]').waitFor({ timeout: WAIT_MS + 8000 });
  await page.waitForFunction(
    () => document.querySelector('[data-testid="calc-result-positional"]').textContent === '42',
    null,
    { timeout: WAIT_MS },
  );
  // The chat's history went with the old process: a new epoch, so the page was told it
  // missed what it cannot get back, and reloaded the chat.
  await page.waitForFunction(
    () => document.querySelector('[data-testid="chat-sync"]').textContent === 'missed, reloaded',
    null,
    { timeout: WAIT_MS },
  );
  // Pushes flow again on the new connection.
  const before = Number(await page.getByTestId('push-count').textContent());
  await page.waitForFunction(
    (n) => Number(document.querySelector('[data-testid="push-count"]').textContent) >= n + 2,
    before,
    { timeout: WAIT_MS },
  );
  await page.screenshot({ path: path.join(SHOTS, 'reconnected.png') });
  assert.deepEqual(errors, []);
});

test('the status line names the close code of the drop that just happened, not of the one before', { timeout: 120000 }, async (t) => {
  assert.ok(fs.existsSync(DEMO_BIN), `build the demo first (cargo build --example web_demo): ${DEMO_BIN}`);
  let browser;
  let server;
  t.after(async () => {
    await browser?.close().catch(() => {});
    await server?.stop();
  });
  server = await startDemo('127.0.0.1:0');
  const { port } = new URL(server.url);
  browser = await launchChromium();
  const context = await browser.newContext(LAPTOP);
  // Every text the status line is given, in order, as it is set: the first one a drop
  // shows is read, not whatever is there when the test looks.
  await context.addInitScript(() => {
    window.__statusTexts = [];
    new MutationObserver((records) => {
      for (const r of records) {
        if (r.target instanceof Element && r.target.id === 'status-text') {
          for (const n of r.addedNodes) if (n.nodeType === Node.TEXT_NODE) window.__statusTexts.push(n.data);
        }
      }
    }).observe(document, { subtree: true, childList: true });
  });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${server.url}/`, { timeout: WAIT_MS });
  await page.locator('[data-testid="status"][data-state="open"]').waitFor();
  const shown = () => page.evaluate(() => window.__statusTexts.length);
  /** The first "disconnected ..." text shown after the first `from` texts. */
  const firstDisconnected = async (from) => (await page.waitForFunction(
    (n) => window.__statusTexts.slice(n).find((s) => s.startsWith('disconnected')), from)).jsonValue();

  // Drop 1: the server shuts down gracefully (SIGINT): the page's socket closes with 1001.
  let from = await shown();
  await server.stop('SIGINT');
  server = null;
  const first = await firstDisconnected(from);
  // The page comes back to a new server on the same port.
  server = await startDemo(`127.0.0.1:${port}`);
  await page.locator('[data-testid="status"][data-state="open"]').waitFor({ timeout: WAIT_MS + 8000 });
  // Drop 2: the server is killed: no close frame, 1006.
  from = await shown();
  await server.stop('SIGKILL');
  server = null;
  const second = await firstDisconnected(from);

  // The link tells 'waiting' before a `closed` reaction of the page's own has run: the
  // text showed the code of the drop before (none, the first time).
  assert.deepEqual(
    [first, second].map((s) => s.replace(/retrying in .*/, 'retrying in …')),
    ['disconnected (1001 server shutting down), retrying in …', 'disconnected (1006), retrying in …'],
  );
  assert.deepEqual(errors, []);
});

/**
 * Two pages on a demo server of their own: `away`'s socket goes through a TCP proxy the
 * test can cut (its `?ws=` names the proxy; the page and its origin stay the server's),
 * `here` connects straight.
 */
async function twoChatPages(t, args) {
  assert.ok(fs.existsSync(DEMO_BIN), `build the demo first (cargo build --example web_demo): ${DEMO_BIN}`);
  fs.mkdirSync(SHOTS, { recursive: true });
  let browser;
  let server;
  let proxy;
  t.after(async () => {
    await browser?.close().catch(() => {});
    await proxy?.close();
    await server?.stop();
  });
  server = await startDemo('127.0.0.1:0', args);
  proxy = await tcpProxy(Number(new URL(server.url).port));
  browser = await launchChromium();
  const errors = [];
  const away = await openChat(browser, `${server.url}/?ws=ws://127.0.0.1:${proxy.port}/rpc`, 'away', errors);
  const here = await openChat(browser, `${server.url}/`, 'here', errors);
  return { away, here, proxy, errors };
}

/** A page at `url` in a context of its own, once its chat is live; its errors go to `errors`. */
async function openChat(browser, url, label, errors) {
  const page = await (await browser.newContext(LAPTOP)).newPage();
  page.setDefaultTimeout(WAIT_MS);
  page.on('pageerror', (e) => errors.push(`[${label}] ${e.message}`));
  await page.goto(url, { timeout: WAIT_MS });
  await page.locator('[data-testid="status"][data-state="open"]').waitFor();
  await page.locator('[data-testid="chat-sync"][data-state="live"]').waitFor();
  return page;
}

/**
 * `here` types a line that `away` shows; `away`'s link is cut; `here` types `missed`
 * (`whileDown` runs first: where the proxy sends `away` next); the link comes back and
 * `away` must show "recovered" with `missed` once, in order, then a live line after them.
 */
async function dropTypeRecover(away, here, proxy, missed, { whileDown = () => {}, shot }) {
  await say(here, 'bob', 'before the drop');
  await away.locator('[data-testid="chat-message"]', { hasText: 'before the drop' }).waitFor();

  await cut(away, proxy);
  whileDown();
  for (const line of missed) await say(here, 'bob', line);
  assert.deepEqual(await chatLines(away), ['before the drop'], 'nothing arrives while the link is down');
  proxy.down = false;

  // The page dials again by itself (its backoff, app.js's, is at most 8 s) and resumes.
  await away.locator('[data-testid="status"][data-state="open"]').waitFor({ timeout: WAIT_MS + 8000 });
  await away.locator('[data-testid="chat-sync"][data-state="recovered"]').waitFor();
  assert.equal(
    await away.getByTestId('chat-sync').textContent(),
    `recovered after a reconnect: ${missed.length} missed lines replayed`,
  );
  assert.deepEqual(await chatLines(away), ['before the drop', ...missed]);
  // Live again: a line typed now arrives once, after the replayed ones.
  await say(here, 'bob', 'after the return');
  await away.locator('[data-testid="chat-message"]', { hasText: 'after the return' }).waitFor();
  assert.deepEqual(await chatLines(away), ['before the drop', ...missed, 'after the return']);
  assert.deepEqual(await chatLines(here), ['before the drop', ...missed, 'after the return']);
  await away.getByTestId('panel-chat').screenshot({ path: path.join(SHOTS, shot) });
}

/** The chat lines a page shows, in order. */
const chatLines = (page) => page.locator('[data-testid="chat-message"] .chat-text').allTextContents();

/** Types `text` as `name` in `page`'s chat and waits for the line in its own log. */
async function say(page, name, text) {
  await page.getByTestId('chat-name').fill(name);
  await page.getByTestId('chat-text').fill(text);
  await page.getByTestId('chat-text').press('Enter');
  await page.locator('[data-testid="chat-message"]', { hasText: text }).waitFor();
}

/** Cuts `away`'s link (no close handshake) and keeps the server away until the page has seen it. */
async function cut(away, proxy) {
  proxy.down = true;
  proxy.cut();
  await away.locator('[data-testid="status"][data-state="closed"]').waitFor();
}

test('chat: a page whose link drops shows the lines typed meanwhile once, in order, and "recovered"', { timeout: 120000 }, async (t) => {
  const { away, here, proxy, errors } = await twoChatPages(t, []);
  const missed = ['one', 'two', 'three', 'four', 'five'].map((w) => `typed while away: ${w}`);
  await dropTypeRecover(away, here, proxy, missed, { shot: 'chat-recovered.png' });
  assert.equal(proxy.accepted, 2, 'the away page connected twice, through the proxy');
  assert.deepEqual(errors, []);
});

test('chat: a page whose missed lines left the history shows "missed, reloaded" and the chat reloaded', { timeout: 120000 }, async (t) => {
  // The chat topic keeps one line: three typed while away cannot be replayed.
  const { away, here, proxy, errors } = await twoChatPages(t, ['--chat-history', '1']);
  await say(here, 'bob', 'first');
  await away.locator('[data-testid="chat-message"]', { hasText: 'first' }).waitFor();

  await cut(away, proxy);
  for (const line of ['lost a', 'lost b', 'lost c']) await say(here, 'bob', line);
  proxy.down = false;

  await away.locator('[data-testid="status"][data-state="open"]').waitFor({ timeout: WAIT_MS + 8000 });
  await away.locator('[data-testid="chat-sync"][data-state="missed"]').waitFor();
  assert.equal(await away.getByTestId('chat-sync').textContent(), 'missed, reloaded');
  // chat.recent gave the server's last lines back, each once, in order.
  assert.deepEqual(await chatLines(away), ['first', 'lost a', 'lost b', 'lost c']);
  await say(here, 'bob', 'live again');
  await away.locator('[data-testid="chat-message"]', { hasText: 'live again' }).waitFor();
  assert.deepEqual(await chatLines(away), ['first', 'lost a', 'lost b', 'lost c', 'live again']);
  await away.getByTestId('panel-chat').screenshot({ path: path.join(SHOTS, 'chat-missed-reloaded.png') });
  assert.deepEqual(errors, []);
});

/** A JSON-RPC frame's object, or null. */
function parseFrame(m) {
  try {
    return JSON.parse(String(m));
  } catch {
    return null;
  }
}

/** Resolves with `promise`, or fails the test after `ms` saying it waited for `what`. */
async function within(promise, what, ms = WAIT_MS) {
  let timer;
  const late = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms)));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

test('chat: every line that fails to send is given back, none lost, the draft in the box kept', { timeout: 120000 }, async (t) => {
  assert.ok(BASE, 'set DEMO_URL to the demo base URL, e.g. http://127.0.0.1:3000');
  let browser;
  t.after(async () => {
    await browser?.close().catch(() => {});
  });
  browser = await launchChromium();
  const page = await (await browser.newContext(LAPTOP)).newPage();
  page.setDefaultTimeout(WAIT_MS);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // The page's socket goes through Playwright's route: while `hold`, chat.send calls are
  // kept from the server (they wait for an answer) until the test drops the link.
  let hold = true;
  let routes = [];
  let held = 0;
  let heldChanged = () => {};
  await page.routeWebSocket(/\/rpc$/, (ws) => {
    const server = ws.connectToServer();
    routes.push(ws);
    ws.onMessage((m) => {
      if (hold && parseFrame(m)?.method === 'chat.send') {
        held += 1;
        heldChanged();
        return;
      }
      server.send(m);
    });
  });
  const untilHeld = (n) => within(new Promise((r) => {
    heldChanged = () => held >= n && r();
    heldChanged();
  }), `${n} chat.send calls held`);
  /** Drops the link (all its calls fail at once), waits for the page to be back. */
  const drop = async () => {
    for (const ws of routes.splice(0)) await ws.close({ code: 4001, reason: 'link lost' });
    await page.locator('[data-testid="chat-status"].error').waitFor();
    await page.locator('[data-testid="status"][data-state="open"]').waitFor({ timeout: WAIT_MS + 8000 });
  };
  const box = () => page.getByTestId('chat-text').inputValue();
  const unsentLines = () => page.getByTestId('chat-unsent-line').allTextContents();
  /** Waits until the box holds `inBox` and the lines waiting for it are `waiting`. */
  const untilGivenBack = (inBox, waiting) => page.waitForFunction(([inBox, waiting]) =>
    document.querySelector('[data-testid="chat-text"]').value === inBox &&
    JSON.stringify([...document.querySelectorAll('[data-testid="chat-unsent-line"]')].map((li) => li.textContent)) ===
      JSON.stringify(waiting), [inBox, waiting]).catch(async (e) => {
    throw new Error(`${e.message}: the box holds ${JSON.stringify(await box())}, waiting: ${JSON.stringify(await unsentLines())}, not ${JSON.stringify([inBox, waiting])}`);
  });

  await page.goto(`${BASE}/`, { timeout: WAIT_MS });
  await page.locator('[data-testid="chat-sync"][data-state="live"]').waitFor();
  const tag = `#${Date.now()}`; // the shared server's chat has other tests' lines
  const [first, second, draft] = ['first line', 'second line', 'a draft'].map((w) => `${w} ${tag}`);
  await page.getByTestId('chat-name').fill('dora');

  // Two lines both wait for their answers, and both fail: the first is back in the box,
  // the second waits for it (it was lost: only an empty box took a line back).
  for (const line of [first, second]) {
    await page.getByTestId('chat-text').fill(line);
    await page.getByTestId('chat-text').press('Enter');
  }
  await untilHeld(2);
  assert.equal(await box(), '');
  await drop();
  await untilGivenBack(first, [second]);

  // Sent again, both wait again (the box takes the next as one leaves), and the person
  // types a draft meanwhile: both fail, and the draft stays (each failure was hidden by it).
  await page.getByTestId('chat-text').press('Enter');
  await untilGivenBack(second, []);
  await page.getByTestId('chat-text').press('Enter');
  await untilHeld(4);
  await page.getByTestId('chat-text').fill(draft);
  await drop();
  await untilGivenBack(draft, [first, second]);

  // The link is good again: three sends, each line once, in the order sent.
  hold = false;
  for (const line of [draft, first, second]) {
    assert.equal(await box(), line);
    await page.getByTestId('chat-text').press('Enter');
    await page.locator('[data-testid="chat-message"]', { hasText: line }).waitFor();
  }
  await untilGivenBack('', []);
  assert.ok(await page.locator('#chat-unsent-box').isHidden());
  assert.deepEqual((await chatLines(page)).filter((l) => l.endsWith(tag)), [draft, first, second]);
  assert.deepEqual(errors, []);
});

test('chat: a reload cut short by a drop is made again after the next reconnect, never "recovered" without the missed lines', { timeout: 120000 }, async (t) => {
  assert.ok(fs.existsSync(DEMO_BIN), `build the demo first (cargo build --example web_demo): ${DEMO_BIN}`);
  let browser;
  let server;
  t.after(async () => {
    await browser?.close().catch(() => {});
    await server?.stop();
  });
  // The chat keeps one line: three typed while away cannot be replayed.
  server = await startDemo('127.0.0.1:0', ['--chat-history', '1']);
  browser = await launchChromium();
  const errors = [];
  // away's socket goes through Playwright's route: 'pass' forwards, 'refuse' closes each
  // new socket at once (the server is unreachable), 'hold' keeps chat.recent from the
  // server (its answer never comes).
  let mode = 'pass';
  let live = [];
  let recentHeld;
  const heldRecent = new Promise((r) => (recentHeld = r));
  const awayContext = await browser.newContext(LAPTOP);
  await awayContext.routeWebSocket(/\/rpc$/, (ws) => {
    if (mode === 'refuse') return void ws.close({ code: 4002, reason: 'unreachable' });
    const upstream = ws.connectToServer();
    live.push(ws);
    ws.onMessage((m) => {
      if (mode === 'hold' && parseFrame(m)?.method === 'chat.recent') return void recentHeld(ws);
      upstream.send(m);
    });
  });
  const away = await awayContext.newPage();
  away.setDefaultTimeout(WAIT_MS);
  away.on('pageerror', (e) => errors.push(`[away] ${e.message}`));
  await away.goto(`${server.url}/`, { timeout: WAIT_MS });
  await away.locator('[data-testid="chat-sync"][data-state="live"]').waitFor();
  const here = await openChat(browser, `${server.url}/`, 'here', errors);

  await say(here, 'bob', 'first');
  await away.locator('[data-testid="chat-message"]', { hasText: 'first' }).waitFor();

  // away's link drops and stays down while bob types three lines.
  mode = 'refuse';
  for (const ws of live.splice(0)) await ws.close({ code: 4001, reason: 'link lost' });
  await away.locator('[data-testid="status"]:not([data-state="open"])').waitFor();
  for (const line of ['lost a', 'lost b', 'lost c']) await say(here, 'bob', line);

  // It comes back, is told it missed lines, and reloads: that reload's answer never
  // comes, the link drops again (the position had moved to the subscribe answer's).
  mode = 'hold';
  const stuck = await within(heldRecent, 'chat.recent after the miss', WAIT_MS + 8000);
  mode = 'pass';
  await stuck.close({ code: 4001, reason: 'link lost again' });

  // The link comes back once more: resumed from the moved position, the server says
  // "recovered" (nothing to replay); the page still owes the reload, and makes it. (Until
  // the page has seen the drop its chat reads "reloading", then "failed": neither settles.)
  await away.waitForFunction(() => ['recovered', 'missed', 'live'].includes(
    document.querySelector('[data-testid="chat-sync"]').dataset.state), null, { timeout: WAIT_MS + 8000 });
  await away.locator('[data-testid="status"][data-state="open"]').waitFor();
  assert.deepEqual(
    { sync: await away.getByTestId('chat-sync').textContent(), lines: await chatLines(away) },
    { sync: 'missed, reloaded', lines: ['first', 'lost a', 'lost b', 'lost c'] },
  );
  // Live again: a line typed now arrives once, after them.
  await say(here, 'bob', 'live again');
  await away.locator('[data-testid="chat-message"]', { hasText: 'live again' }).waitFor();
  assert.deepEqual(await chatLines(away), ['first', 'lost a', 'lost b', 'lost c', 'live again']);
  assert.deepEqual(errors, []);
});

/**
 * A Redis of the test's own on a unix socket in a temp dir (the recipe of TESTING.md);
 * resolves with `{ url, stop }` once it listens.
 */
async function startRedis() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'demo-redis-'));
  const sock = path.join(dir, 'r.sock');
  const child = spawn('redis-server', ['--port', '0', '--unixsocket', sock, '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' });
  const exited = new Promise((r) => child.once('exit', r));
  const failed = new Promise((_, reject) => child.once('error', (e) => reject(new Error(`redis-server: ${e.message} (.ci/install installs it)`))));
  const stop = async () => {
    child.kill('SIGKILL');
    await exited;
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const up = (async () => {
    for (let i = 0; i < 100 && !fs.existsSync(sock); i++) await new Promise((r) => setTimeout(r, 50)); // bounded: 5 s
    if (!fs.existsSync(sock)) throw new Error('redis-server did not listen within 5 s');
  })();
  try {
    await Promise.race([up, failed]);
  } catch (e) {
    await stop();
    throw e;
  }
  return { url: `redis+unix://${sock}`, stop };
}

/** The names a page's chat shows as here, with how many pages each has: {name: pages}. */
async function here(page) {
  return page.getByTestId('chat-who').evaluate((ul) => Object.fromEntries(
    [...ul.querySelectorAll('[data-testid="chat-member"]')].map((li) => [li.dataset.name, Number(li.dataset.pages)]),
  ));
}

/** Waits until `page` shows exactly `expected` ({name: pages}) as here. */
async function untilHere(page, expected, timeout = WAIT_MS) {
  await page.waitForFunction((want) => {
    const got = Object.fromEntries([...document.querySelectorAll('[data-testid="chat-member"]')]
      .map((li) => [li.dataset.name, Number(li.dataset.pages)]));
    return JSON.stringify(Object.entries(got).sort()) === JSON.stringify(Object.entries(want).sort());
  }, expected, { timeout }).catch(async (e) => {
    throw new Error(`${e.message}: the page shows ${JSON.stringify(await here(page))}, not ${JSON.stringify(expected)}`);
  });
}

test('chat: across two servers over Redis, a page whose link drops and comes back to the other server gets the lines typed meanwhile, "recovered"', { timeout: 120000 }, async (t) => {
  assert.ok(fs.existsSync(DEMO_BIN), `build the demo first (cargo build --example web_demo --features axum,redis): ${DEMO_BIN}`);
  fs.mkdirSync(SHOTS, { recursive: true });
  let browser;
  let redis;
  let proxy;
  const servers = [];
  t.after(async () => {
    await browser?.close().catch(() => {});
    await proxy?.close();
    for (const s of servers) await s.stop();
    await redis?.stop();
  });
  redis = await startRedis();
  const a = await startDemo('127.0.0.1:0', ['--redis', redis.url]);
  servers.push(a);
  // b takes pages served by a too: the away page comes back to b through the proxy, as a
  // load balancer would send it, with a's origin.
  const b = await startDemo('127.0.0.1:0', ['--redis', redis.url, '--allow-origin', a.url]);
  servers.push(b);
  proxy = await tcpProxy(Number(new URL(a.url).port));
  browser = await launchChromium();
  const errors = [];
  const away = await openChat(browser, `${a.url}/?ws=ws://127.0.0.1:${proxy.port}/rpc`, 'away', errors);
  const here = await openChat(browser, `${b.url}/`, 'here', errors);
  // While away's link is down the proxy turns to b, and here (on b) types: the page
  // resumes on b from the history in Redis.
  const missed = ['one', 'two', 'three'].map((w) => `typed on b while away: ${w}`);
  await dropTypeRecover(away, here, proxy, missed, {
    whileDown: () => (proxy.upstream = Number(new URL(b.url).port)),
    shot: 'chat-recovered-across-servers.png',
  });
  assert.equal(proxy.accepted, 2, 'the away page connected twice: to a, then to b');
  assert.deepEqual(errors, []);
});

test('chat: who is here, live, across two servers over Redis (joins, a second tab, a closed page, a killed server)', { timeout: 120000 }, async (t) => {
  assert.ok(fs.existsSync(DEMO_BIN), `build the demo first (cargo build --example web_demo --features axum,redis): ${DEMO_BIN}`);
  fs.mkdirSync(SHOTS, { recursive: true });
  let browser;
  let redis;
  const servers = [];
  t.after(async () => {
    await browser?.close().catch(() => {});
    for (const s of servers) await s.stop();
    await redis?.stop();
  });
  redis = await startRedis();
  const a = await startDemo('127.0.0.1:0', ['--redis', redis.url]);
  servers.push(a);
  const b = await startDemo('127.0.0.1:0', ['--redis', redis.url]);
  servers.push(b);
  browser = await launchChromium();
  const errors = [];
  /** A page of `server` chatting as `name`, once its chat is live. */
  const open = async (server, name) => {
    const context = await browser.newContext(LAPTOP);
    await context.addInitScript((n) => localStorage.setItem('jsonrpc-peer-demo.name', n), name);
    const page = await context.newPage();
    page.setDefaultTimeout(WAIT_MS);
    page.on('pageerror', (e) => errors.push(`[${name}] ${e.message}`));
    await page.goto(`${server.url}/`, { timeout: WAIT_MS });
    await page.locator('[data-testid="chat-sync"][data-state="live"]').waitFor();
    return page;
  };

  const ana = await open(a, 'ana');
  await untilHere(ana, { ana: 1 });
  const ben = await open(b, 'ben');
  // Ben's page is on the other server: both see both, each from its own server.
  await untilHere(ben, { ana: 1, ben: 1 });
  await untilHere(ana, { ana: 1, ben: 1 });

  // Ben opens a second tab, on ana's server: one person, two pages.
  const benTab = await open(a, 'ben');
  await untilHere(ana, { ana: 1, ben: 2 });
  await untilHere(ben, { ana: 1, ben: 2 });
  assert.equal(await ana.getByTestId('chat-who-count').textContent(), '2 here');
  assert.equal(await ana.getByTestId('chat-who-count').getAttribute('data-members'), '3');
  // A line typed on one server reaches the page on the other.
  await say(ana, 'ana', 'hello from server A');
  await ben.locator('[data-testid="chat-message"]', { hasText: 'hello from server A' }).waitFor();
  await ana.getByTestId('panel-chat').screenshot({ path: path.join(SHOTS, 'chat-presence.png') });

  // Ben closes his first tab (on server B): his link ends, he leaves at once.
  await ben.context().close();
  await untilHere(ana, { ana: 1, ben: 1 });
  await untilHere(benTab, { ana: 1, ben: 1 });

  // Cat joins on server B, and server B is killed (no goodbye): its members leave every
  // other server's view within its heartbeat window (3 x 2 s), and the pages show it.
  const cat = await open(b, 'cat');
  await untilHere(cat, { ana: 1, ben: 1, cat: 1 });
  await untilHere(ana, { ana: 1, ben: 1, cat: 1 });
  await b.stop();
  await untilHere(ana, { ana: 1, ben: 1 }, 15000);
  await untilHere(benTab, { ana: 1, ben: 1 }, 15000);
  assert.deepEqual(errors, []);
});
