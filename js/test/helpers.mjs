// Test helpers: a fake WebSocket (the shape Peer expects) and bounded waits.
import assert from 'node:assert/strict';

// Taken at load, before any test mocks the clock (`t.mock.timers`): a test on a controlled
// clock still has its waits bounded in real time.
const { setTimeout: realSetTimeout, clearTimeout: realClearTimeout } = globalThis;

/** Reject after `ms` unless `promise` settles first, so no test can hang. */
export function within(promise, ms = 2000, what = 'operation') {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = realSetTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => realClearTimeout(timer));
}

/** Resolve on the next macrotask: every frame delivered before it has been handled. */
export const nextTurn = () => new Promise((r) => setImmediate(r));

/** A promise and the function that resolves it, to wait on an event in a handler. */
export function signal() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * A socket with the browser WebSocket's surface. Frames the peer sends are recorded in
 * `sent` (and delivered to `remote` when two are paired); `receive(text)` plays an
 * incoming frame. Delivery is a macrotask, as in a browser.
 */
export class FakeSocket {
  constructor({ open = true } = {}) {
    this.readyState = open ? 1 : 0;
    /** What the socket holds unsent, in bytes; a test sets it to play a slow network. */
    this.bufferedAmount = 0;
    this.sent = [];
    this.remote = null;
    this._waiters = [];
    this._listeners = { open: [], message: [], error: [], close: [] };
  }

  addEventListener(type, fn) {
    this._listeners[type]?.push(fn);
  }

  removeEventListener(type, fn) {
    const list = this._listeners[type];
    if (list?.includes(fn)) list.splice(list.indexOf(fn), 1);
  }

  /** Play an event of `type` to every listener. */
  emit(type, ev) {
    for (const fn of [...(this._listeners[type] ?? [])]) fn(ev);
  }

  send(text) {
    if (this.readyState !== 1) throw new Error('fake socket: send while not open');
    this.sent.push(text);
    for (const w of this._waiters.splice(0)) w();
    if (this.remote) {
      const remote = this.remote;
      setImmediate(() => remote.readyState === 1 && remote.emit('message', { data: text }));
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
    this.emit('open', {});
  }

  /** Play the close event (the remote end went away, or the close handshake finished). */
  closedByServer(code = 1006, reason = '', wasClean = false) {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.emit('close', { code, reason, wasClean });
  }

  /** Play an incoming frame (text, or anything else for a binary frame). */
  receive(data) {
    this.emit('message', { data });
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

  /**
   * Play `text` in and assert that nothing at all is sent back. Waits on an event, not a
   * clock: once the frame is handled (a macrotask later), a probe call the peer must
   * answer (-32601) goes in, and answers leave in the order they were made, so when the
   * probe's answer is out, any answer to `text` would be out before it. A closed socket
   * cannot send at all, so there the macrotask is enough.
   */
  async expectSilence(text) {
    const n = this.sent.length;
    if (text !== undefined) this.receive(text);
    await nextTurn();
    let extra = this.sent.slice(n);
    if (this.readyState === 1) {
      const probeId = 'probe:' + Math.random();
      this.receive(JSON.stringify({ jsonrpc: '2.0', method: 'rpc.no-such-probe', id: probeId }));
      let at = n;
      for (;;) {
        const frame = await this.frame(at);
        if (frame.id === probeId) break;
        at += 1;
      }
      extra = this.sent.slice(n, at);
    }
    assert.deepEqual(extra, [], 'expected no answer');
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

// ---- for reconnecting(): a scripted server ------------------------------------------

/**
 * A WebSocket class whose sockets open or fail (on the next macrotask) as `plan` says,
 * one entry per socket made ('open' or 'fail'; past its end: 'open'). `made` holds them.
 */
export function fakeServer(plan = []) {
  const made = [];
  const s = { made, sockets: [] }; // sockets[n]: resolved with the n-th socket once made
  s.WebSocket = class extends FakeSocket {
    constructor(url) {
      super({ open: false });
      this.url = url;
      const n = made.length;
      made.push(this);
      const outcome = plan[n] ?? 'open';
      setImmediate(() => {
        if (outcome === 'fail') {
          this.emit('error', { message: 'ECONNREFUSED' });
          this.closedByServer(1006, '', false);
        } else this.open();
      });
      (s.sockets[n] ??= signal()).resolve(this);
    }
  };
  /** The `n`-th socket made (0-based), once it is. */
  s.socket = (n) => within((s.sockets[n] ??= signal()).promise, 2000, `socket #${n}`);
  return s;
}

/** Every state the link passes through, and a way to wait for one. */
export function linkStates(link) {
  const seen = [];
  const waiters = [];
  link.addEventListener('statechange', (ev) => {
    seen.push(ev.detail);
    for (const w of [...waiters]) if (w.pred(ev.detail)) waiters.splice(waiters.indexOf(w), 1), w.resolve();
  });
  const until = (pred, what = 'state') => {
    if (pred(link.state)) return Promise.resolve();
    const w = signal();
    waiters.push({ pred, resolve: w.resolve });
    return within(w.promise, 2000, what);
  };
  return { seen, until };
}

export const isState = (name) => (s) => s.state === name;

/** Answers every call that arrives on `socket` with `result(method, params)`. */
export function answer(socket, result) {
  socket.addEventListener('message', () => {});
  const orig = socket.send.bind(socket);
  socket.send = (text) => {
    orig(text);
    const m = JSON.parse(text);
    if (m.id !== undefined && m.method) {
      setImmediate(() => socket.receive(JSON.stringify({ jsonrpc: '2.0', result: result(m.method, m.params), id: m.id })));
    }
  };
}
