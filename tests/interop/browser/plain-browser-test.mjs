// A browser that is not ours: plain.html speaks JSON-RPC 2.0 by hand (the browser's own
// WebSocket and JSON, no module of jsonrpc-peer) to our server, in headless Chromium.
// Run (with `cargo run --example interop_server -- --listen 127.0.0.1:0` up), or let
// .ci/interop-browser do all of it:
//   INTEROP_WS=ws://127.0.0.1:PORT \
//     timeout 120 node --test --test-timeout=60000 tests/interop/browser/plain-browser-test.mjs
// Env: INTEROP_WS (required), CHROMIUM (default /usr/bin/chromium).
// playwright-core comes from web-demo/node_modules (`cd web-demo && npm ci`).
// The page is served over http://127.0.0.1 by a static server started here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// playwright-core resolves from web-demo/node_modules, where this module lives.
import { launchChromium } from '../../../web-demo/chromium.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WS_URL = process.env.INTEROP_WS ?? '';
const WAIT_MS = 15000; // the page bounds each of its own waits by 5 s

/// Serves this folder's plain.html (and nothing else) on 127.0.0.1:0.
function servePage() {
  const server = http.createServer((req, res) => {
    const { pathname } = new URL(req.url, 'http://127.0.0.1');
    if (req.method === 'GET' && pathname === '/plain.html') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
      res.end(fs.readFileSync(path.join(HERE, 'plain.html')));
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
    }
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

test('a plain browser page (WebSocket + JSON only) against our server', { timeout: 60000 }, async (t) => {
  assert.match(WS_URL, /^ws:\/\/127\.0\.0\.1:\d+$/, 'set INTEROP_WS to the interop_server URL, e.g. ws://127.0.0.1:9100');

  // Cleanup is registered before anything is started, so a failure leaves nothing behind.
  let httpServer;
  let browser;
  t.after(async () => {
    await browser?.close().catch(() => {});
    httpServer?.closeAllConnections?.();
    await new Promise((resolve) => (httpServer ? httpServer.close(() => resolve()) : resolve()));
  });
  httpServer = await servePage();
  const pageUrl = `http://127.0.0.1:${httpServer.address().port}/plain.html?ws=${encodeURIComponent(WS_URL)}`;

  browser = await launchChromium();
  const page = await browser.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => consoleErrors.push(`page error: ${e.message}`));

  await page.goto(pageUrl, { timeout: WAIT_MS });
  await page.locator('[data-testid="main"][data-state="done"]').waitFor({ timeout: WAIT_MS });

  // What the page saw, read from the DOM.
  const status = await page.getByTestId('status').textContent();
  const frames = await page.locator('[data-testid="frames"] li').evaluateAll(
    (lis) => lis.map((li) => `${li.dataset.direction === 'in' ? '<-' : '->'} ${li.textContent}`),
  );
  const results = Object.fromEntries(await page.locator('[data-testid^="result-"]').evaluateAll(
    (pres) => pres.map((p) => [p.dataset.testid.slice('result-'.length), JSON.parse(p.textContent)]),
  ));
  const wire = `\nstatus: ${status}\nframes (-> page to server, <- server to page):\n  ${frames.join('\n  ')}`;
  const check = (name, expected) => assert.deepEqual(results[name], expected, `${name}${wire}`);
  // A batch answer as a set: elements sorted by their JSON text, so order is free.
  const asSet = (v) => {
    assert.ok(Array.isArray(v), `expected an array, got ${JSON.stringify(v)}${wire}`);
    return v.map((e) => JSON.stringify(e)).sort();
  };

  await t.test('the page ran to the end', () => {
    assert.equal(status, 'done', wire);
    assert.equal(results.exception, undefined, wire);
  });

  await t.test('subtract, positional and named; the string id comes back as it went', () => {
    check('subtract-positional', { jsonrpc: '2.0', result: 19, id: 1 });
    check('subtract-named', { jsonrpc: '2.0', result: 19, id: 'two' });
  });

  await t.test('a batch: one array, no answer for its notification', () => {
    assert.deepEqual(asSet(results.batch), asSet([
      { jsonrpc: '2.0', result: 7, id: '1' },
      { jsonrpc: '2.0', result: 19, id: '2' },
      { jsonrpc: '2.0', error: { code: -32600, message: 'Invalid Request' }, id: null },
      { jsonrpc: '2.0', error: { code: -32601, message: 'Method not found' }, id: '5' },
      { jsonrpc: '2.0', result: ['hello', 5], id: '9' },
    ]), `batch${wire}`);
  });

  await t.test('a notification is not answered', () => {
    check('after-notification', { jsonrpc: '2.0', result: 2, id: 'after-notification' });
  });

  await t.test('an unknown method and text that is not JSON', () => {
    check('unknown-method', { jsonrpc: '2.0', error: { code: -32601, message: 'Method not found' }, id: 8 });
    check('parse-error', { jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null });
  });

  await t.test('the server calls the page; the page answers by hand, with a result and an error', () => {
    check('ask-page', {
      jsonrpc: '2.0',
      result: { asked: 'page.echo', answer: { echoed: { text: 'hello from a plain page' }, by: 'plain.html' } },
      id: 10,
    });
    check('ask-page-error', {
      jsonrpc: '2.0',
      result: { asked: 'page.nope', error: { code: -32601, message: 'Method not found' } },
      id: 11,
    });
    // The server's two calls were request objects with ids the page echoed back.
    const requests = results['server-requests'];
    assert.equal(requests?.length, 2, `server-requests${wire}`);
    assert.deepEqual(requests.map((r) => [r.jsonrpc, r.method, r.params]), [
      ['2.0', 'page.echo', { text: 'hello from a plain page' }],
      ['2.0', 'page.nope', { text: 'x' }],
    ], wire);
    for (const r of requests) {
      assert.ok(typeof r.id === 'number' || typeof r.id === 'string', `request id ${JSON.stringify(r.id)}${wire}`);
    }
  });

  await t.test('every frame the server sent is JSON-RPC 2.0', () => {
    const inbound = frames.filter((f) => f.startsWith('<-'));
    assert.equal(inbound.length, 10, `expected 10 frames from the server${wire}`);
    for (const f of inbound) {
      const v = JSON.parse(f.slice(3));
      for (const m of Array.isArray(v) ? v : [v]) assert.equal(m.jsonrpc, '2.0', f);
    }
  });

  await t.test('the JS console has no errors', () => {
    assert.deepEqual(consoleErrors, [], wire);
  });
});
