// link.topic() against the real server: `examples/push_ticker.rs --history N` on
// 127.0.0.1, its link cut (at the TCP level, no close handshake) by a proxy in this process,
// the client in a Node process of its own under --experimental-websocket (the WebSocket
// a page has). `cargo test` builds the example; alone: `cargo build --example push_ticker`
// (or set PUSH_TICKER_BIN).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { within } from './helpers.mjs';
import { tcpProxy } from './tcp-proxy.mjs';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BIN = process.env.PUSH_TICKER_BIN ?? `${ROOT}target/debug/examples/push_ticker`;
const CLIENT = fileURLToPath(new URL('./follow-client.mjs', import.meta.url));
const WAIT_MS = 10000; // every wait below is bounded by this

/** A push_ticker publishing `prices` every 5 ms with `args`; resolves with its port. */
async function ticker(t, args) {
  assert.ok(existsSync(BIN), `${BIN} is missing: run \`cargo build --example push_ticker\` first`);
  const child = spawn(BIN, ['--listen', '127.0.0.1:0', '--interval-ms', '5', ...args], { stdio: ['ignore', 'pipe', 'ignore'] });
  const exited = new Promise((r) => child.once('exit', r));
  const stop = () => (child.kill('SIGKILL'), exited);
  t.after(stop);
  const lines = createInterface({ input: child.stdout });
  const first = await within(new Promise((r) => lines.once('line', r)), WAIT_MS, 'push_ticker saying where it listens');
  const m = /^listening on ws:\/\/127\.0\.0\.1:(\d+)$/.exec(first);
  assert.ok(m, first);
  return { port: Number(m[1]), stop };
}

/** A TCP proxy to `upstream` (tcp-proxy.mjs), closed after the test. */
async function proxy(t, upstream) {
  const p = await tcpProxy(upstream);
  t.after(() => p.close());
  return p;
}

/** follow-client.mjs following `prices` at `url`: its events as they come, and a wait for them. */
function client(t, url) {
  const child = spawn(process.execPath, ['--experimental-websocket', CLIENT, url, 'prices'], { stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = new Promise((r) => child.once('exit', r));
  t.after(() => (child.stdin.end(), child.kill(), exited));
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const events = [];
  const waiters = new Set();
  createInterface({ input: child.stdout }).on('line', (line) => {
    events.push(JSON.parse(line));
    for (const w of [...waiters]) w();
  });
  const c = {
    events,
    of: (kind) => events.filter((e) => e.ev === kind),
    /** Resolves once `pred()` holds, checked at each event. */
    until: (pred, what) => within(new Promise((resolve) => {
      const w = () => pred() && (waiters.delete(w), resolve());
      waiters.add(w);
      w();
    }), WAIT_MS, `${what}; events: ${JSON.stringify(events.slice(-5))}; stderr: ${stderr.slice(-500)}`),
    /** The newest data offset seen, 0 before any. */
    last: () => c.of('data').at(-1)?.offset ?? 0,
  };
  return c;
}

/** Asserts that the data events are one publication each, contiguous, the payload alone. */
function contiguous(data) {
  for (const [i, d] of data.entries()) {
    assert.equal(typeof d.data.BTC, 'number', `data is the payload: ${JSON.stringify(d)}`);
    assert.equal(d.data.seq, d.offset - 1, 'prices is published every tick from seq 0: offset = seq + 1');
    if (i > 0) assert.equal(d.offset, data[i - 1].offset + 1, `after ${data[i - 1].offset} came ${d.offset}`);
  }
}

test('links cut at random points of a steady stream: every publication once, in order, all recovered', { timeout: 60000 }, async (t) => {
  const server = await ticker(t, ['--history', '1000']);
  const link = await proxy(t, server.port);
  const c = client(t, `ws://127.0.0.1:${link.port}`);
  await c.until(() => c.last() >= 5, 'the first data');
  const cuts = 6;
  for (let cut = 0; cut < cuts; cut++) {
    const at = c.last() + 1 + Math.floor(Math.random() * 40);
    await c.until(() => c.last() >= at, `data up to ${at}`);
    const waited = c.of('state').filter((s) => s.state === 'waiting').length;
    // Every other cut keeps the server away until a redial has been refused.
    link.down = cut % 2 === 1;
    link.cut();
    if (link.down) {
      await c.until(() => c.of('state').filter((s) => s.state === 'waiting').length >= waited + 2, 'a refused redial');
      link.down = false;
    }
    await c.until(() => c.of('subscribed').length === cut + 2, `subscribed again after cut ${cut + 1}`);
  }
  const end = c.last() + 20;
  await c.until(() => c.last() >= end, 'data after the last cut');

  assert.deepEqual(c.events.filter((e) => ['missed', 'failed', 'error'].includes(e.ev)), []);
  const data = c.of('data');
  contiguous(data);
  // Each resume named the last offset handed over and got everything after it.
  const subscribed = c.of('subscribed');
  assert.equal(subscribed.length, cuts + 1);
  assert.equal(subscribed[0].recovered, undefined);
  assert.equal(subscribed[0].from, null);
  for (const s of subscribed.slice(1)) {
    assert.equal(s.recovered, true, JSON.stringify(s));
    const before = c.events.slice(0, c.events.indexOf(s)).filter((e) => e.ev === 'data').at(-1);
    assert.deepEqual(s.from, { epoch: subscribed[0].epoch, offset: before.offset });
    assert.ok(s.offset >= s.from.offset, JSON.stringify(s));
  }
  assert.ok(link.accepted >= cuts + 1, `${link.accepted} connections through the proxy`);
});

test('a position that left the history: missed, and the data continues after the offset it names', { timeout: 60000 }, async (t) => {
  const server = await ticker(t, ['--history', '5']);
  const link = await proxy(t, server.port);
  const c = client(t, `ws://127.0.0.1:${link.port}`);
  // Straight to the server: says how far the history has moved while the proxy is down.
  const observer = client(t, `ws://127.0.0.1:${server.port}`);
  await c.until(() => c.last() >= 3, 'the first data');
  link.down = true;
  link.cut();
  // Once the client says it lost the link, what the old connection delivered is in.
  await c.until(() => c.of('state').some((s) => s.state === 'waiting'), 'the client seeing the link drop');
  const lost = c.last();
  await observer.until(() => observer.last() >= lost + 20, 'twenty more publications, four times the history');
  link.down = false;
  await c.until(() => c.of('missed').length === 1 && c.last() > lost + 20, 'data after the miss');

  const [epoch] = c.of('subscribed').map((s) => s.epoch);
  const again = c.of('subscribed')[1];
  assert.equal(again.recovered, false);
  assert.deepEqual(again.from, { epoch, offset: lost });
  const missed = c.of('missed')[0];
  assert.deepEqual({ ...missed, offset: 0 }, { ev: 'missed', topic: 'prices', epoch, offset: 0 });
  assert.ok(missed.offset >= lost + 20, `missed up to ${missed.offset}, lost at ${lost}`);
  const after = c.events.slice(c.events.indexOf(missed) + 1).filter((e) => e.ev === 'data');
  assert.equal(after[0].offset, missed.offset + 1, 'data continues right after the offset the miss names');
  contiguous(after);
  contiguous(c.events.slice(0, c.events.indexOf(missed)).filter((e) => e.ev === 'data'));
});

test('a server restart: the new epoch is missed, and its data follows', { timeout: 60000 }, async (t) => {
  const first = await ticker(t, ['--history', '1000']);
  const link = await proxy(t, first.port);
  const c = client(t, `ws://127.0.0.1:${link.port}`);
  await c.until(() => c.last() >= 3, 'the first data');
  const second = await ticker(t, ['--history', '1000']);
  link.upstream = second.port;
  await first.stop();
  link.cut();
  const dataAfterMiss = () => c.events.slice(c.events.findIndex((e) => e.ev === 'missed')).filter((e) => e.ev === 'data');
  await c.until(() => c.of('missed').length === 1 && dataAfterMiss().length >= 3, 'data from the new server');

  const [before, after] = c.of('subscribed');
  assert.notEqual(after.epoch, before.epoch, 'a new process, a new epoch');
  assert.equal(after.recovered, false);
  const missed = c.of('missed')[0];
  assert.deepEqual(missed, { ev: 'missed', topic: 'prices', epoch: after.epoch, offset: after.offset });
  const since = c.events.slice(c.events.indexOf(missed) + 1).filter((e) => e.ev === 'data');
  assert.equal(since[0].offset, after.offset + 1);
  contiguous(since);
});
