// Test helpers: a fake WebSocket (the shape Peer expects) and bounded waits.
import assert from 'node:assert/strict';

/** Reject after `ms` unless `promise` settles first, so no test can hang. */
export function within(promise, ms = 2000, what = 'operation') {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A socket with the browser WebSocket's surface. Frames the peer sends are recorded in
 * `sent` (and delivered to `remote` when two are paired); `receive(text)` plays an
 * incoming frame. Delivery is a macrotask, as in a browser.
 */
export class FakeSocket {
  constructor({ open = true } = {}) {
    this.readyState = open ? 1 : 0;
    this.sent = [];
    this.remote = null;
    this._waiters = [];
    this.onopen = this.onmessage = this.onerror = this.onclose = null;
  }

  send(text) {
    if (this.readyState !== 1) throw new Error('fake socket: send while not open');
    this.sent.push(text);
    for (const w of this._waiters.splice(0)) w();
    if (this.remote) {
      const remote = this.remote;
      setImmediate(() => remote.readyState === 1 && remote.onmessage?.({ data: text }));
    }
  }

  close(code = 1000, reason = '') {
    if (this.readyState >= 2) return;
    this.readyState = 2;
    setImmediate(() => this.closedByServer(code, reason, true));
    if (this.remote) {
      const remote = this.remote;
      setImmediate(() => remote.closedByServer(code, reason, true));
    }
  }

  /** Play the socket opening. */
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }

  /** Play the close event (the remote end went away, or the close handshake finished). */
  closedByServer(code = 1006, reason = '', wasClean = false) {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.onclose?.({ code, reason, wasClean });
  }

  /** Play an incoming frame (text, or anything else for a binary frame). */
  receive(data) {
    this.onmessage({ data });
  }

  /** Resolve with the parsed `n`-th frame sent (0-based), waiting up to `ms`. */
  async frame(n = 0, ms = 1000) {
    const deadline = Date.now() + ms;
    while (this.sent.length <= n) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no frame #${n} within ${ms} ms; sent: ${this.sent.join(' | ')}`);
      await within(new Promise((r) => this._waiters.push(r)), left, `frame #${n}`).catch(() => {});
    }
    return JSON.parse(this.sent[n]);
  }

  /** Play `text` in and resolve with the parsed answer frame. */
  async exchange(text, ms = 1000) {
    const n = this.sent.length;
    this.receive(text);
    return this.frame(n, ms);
  }

  /** Play `text` in and assert that nothing at all is sent back within `ms`. */
  async expectSilence(text, ms = 50) {
    const n = this.sent.length;
    if (text !== undefined) this.receive(text);
    await sleep(ms);
    assert.deepEqual(this.sent.slice(n), [], 'expected no answer');
  }
}

/** Two fake sockets wired to each other. */
export function socketPair() {
  const a = new FakeSocket();
  const b = new FakeSocket();
  a.remote = b;
  b.remote = a;
  return [a, b];
}

/** Order a batch answer canonically so two answers compare as multisets keyed by id. */
export function byId(answers) {
  assert.ok(Array.isArray(answers), `expected an array answer, got ${JSON.stringify(answers)}`);
  const key = (r) => JSON.stringify(r.id) + '\u0000' + JSON.stringify(r);
  return [...answers].sort((x, y) => (key(x) < key(y) ? -1 : key(x) > key(y) ? 1 : 0));
}
