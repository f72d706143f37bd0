// Edges of the reconnecting link found by a review: a close() from a statechange
// listener, close reasons past a close frame's room, timeouts past setTimeout's longest
// delay, presence changes after a failed read, a topic that gains history. Over fake
// sockets.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { reconnecting } from 'jsonrpc-peer';
import { fakeServer, linkStates, nextTurn } from './helpers.mjs';

const turns = async (n) => {
  for (let i = 0; i < n; i++) await nextTurn();
};
const rx = (sock, m) => sock.receive(JSON.stringify({ jsonrpc: '2.0', ...m }));

/** Runs `body` with setTimeout watched: it gets the delays of the timers still armed. */
async function withTimers(body) {
  const live = new Map();
  const { setTimeout: set, clearTimeout: clear } = globalThis;
  globalThis.setTimeout = (fn, ms, ...args) => {
    const h = set(() => (live.delete(h), fn(...args)), ms);
    live.set(h, ms);
    return h;
  };
  globalThis.clearTimeout = (h) => (live.delete(h), clear(h));
  try {
    await body(() => [...live.values()]);
  } finally {
    for (const h of live.keys()) clear(h);
    Object.assign(globalThis, { setTimeout: set, clearTimeout: clear });
  }
}

test('close() from a "connecting" statechange listener stops that dial', async () => {
  const s = fakeServer(['fail', 'open']);
  const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, backoff: { initialMs: 1, maxMs: 1 } });
  const st = linkStates(link);
  link.addEventListener('statechange', () => {
    // "give up after the first failure"
    if (link.state.state === 'connecting' && link.state.attempt >= 1) link.close();
  });
  await st.until((x) => x.state === 'stopped');
  await turns(20);
  assert.deepEqual(st.seen.map((x) => x.state), ['connecting', 'waiting', 'connecting', 'stopped']);
  assert.equal(s.made.length, 1, 'no socket dialed after close()');
});

test('close() from a "waiting" statechange listener leaves no retry timer', async () => {
  await withTimers(async (armed) => {
    const s = fakeServer(['fail']);
    const link = reconnecting('ws://x/rpc', {
      WebSocket: s.WebSocket,
      backoff: { initialMs: 60000, maxMs: 60000 },
      random: () => 0.5,
    });
    const st = linkStates(link);
    link.addEventListener('statechange', () => link.state.state === 'waiting' && link.close());
    await st.until((x) => x.state === 'stopped');
    await nextTurn();
    assert.deepEqual(armed().filter((ms) => ms >= 1000), [], 'no timer left after close()');
  });
});

test('a subscribe timeout on a topic with a long name closes the connection, and the next is dialed', async () => {
  const s = fakeServer();
  // As browsers and Node's WebSocket do: a close reason is at most 123 bytes.
  class StrictSocket extends s.WebSocket {
    close(code, reason = '') {
      if (Buffer.byteLength(reason) > 123) throw new SyntaxError('Reason must be less than 123 bytes');
      super.close(code, reason);
    }
  }
  const failures = [];
  const link = reconnecting('ws://x/rpc', { WebSocket: StrictSocket, backoff: { initialMs: 1, maxMs: 1 } });
  link.topic('rooms/' + 'a'.repeat(100), { timeoutMs: 30, onFailed: (e) => failures.push(e) });
  const first = await s.socket(0);
  await first.frame(0); // the subscribe, never answered
  await s.socket(1); // the next connection: the first was closed
  link.close();
  assert.equal(first.readyState, 3, 'the connection whose subscribe timed out is closed');
  assert.ok(failures.length >= 1, 'onFailed(TimeoutError)');
});

test('a timeout longer than setTimeout takes (2^31 - 1 ms) is no timer, not one that fires at once', async () => {
  await withTimers(async (armed) => {
    const s = fakeServer();
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket });
    const month = 30 * 24 * 3600 * 1000;
    const call = link.call('slow.report', [], { timeoutMs: month }).then(() => 'answered', (e) => String(e));
    const sock = await s.socket(0);
    const req = await sock.frame(0);
    assert.deepEqual(armed().filter((ms) => ms > 2 ** 31 - 1), [], 'no delay past the longest');
    rx(sock, { result: 1, id: req.id });
    assert.equal(await call, 'answered');
    link.close();
  });
});

test('after a failed presence read, later joins are told but not held, and do not close the link', async () => {
  const s = fakeServer();
  const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, backoff: { initialMs: 1, maxMs: 1 } });
  const joins = [];
  link.topic('chat', { presence: true, maxHeld: 2, onFailed: () => {}, onJoin: (j) => joins.push(j.addr) });
  const sock = await s.socket(0);
  let closed = null;
  sock.addEventListener('close', (ev) => (closed = { code: ev.code, reason: ev.reason }));
  rx(sock, { result: true, id: (await sock.frame(0)).id }); // the subscribe: ok
  const read = await sock.frame(1);
  assert.equal(read.method, 'presence');
  rx(sock, { error: { code: -32601, message: 'Method not found' }, id: read.id });
  await linkStates(link).until((x) => x.state === 'connected');
  for (const addr of ['b/1', 'b/2', 'b/3']) {
    rx(sock, { method: 'presence.join', params: { topic: 'chat', addr, info: {} } });
  }
  await turns(5);
  const seen = closed;
  link.close();
  assert.equal(seen, null, 'not closed for presence changes nobody will apply');
  assert.deepEqual(joins, ['b/1', 'b/2', 'b/3']);
});

test('a topic followed without history that has history after a reconnect says missed', async () => {
  const s = fakeServer();
  const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, backoff: { initialMs: 1, maxMs: 1 } });
  const missed = [];
  const data = [];
  link.topic('t', { onMissed: (m) => missed.push(m), onData: (d) => data.push(d) });
  const first = await s.socket(0);
  rx(first, { result: true, id: (await first.frame(0)).id }); // no history
  rx(first, { method: 't', params: ['a'] });
  await linkStates(link).until((x) => x.state === 'connected');
  first.closedByServer(1001, 'restart', true);
  const second = await s.socket(1);
  const subscribe = await second.frame(0);
  assert.deepEqual(subscribe.params, ['t'], 'no position to resume from');
  rx(second, { result: { epoch: 'e2', offset: 2 }, id: subscribe.id }); // history now
  rx(second, { method: 't', params: { offset: 3, data: 'z' } });
  await turns(5);
  link.close();
  assert.deepEqual(missed, [{ topic: 't', epoch: 'e2', offset: 2 }], 'the two published meanwhile');
  assert.deepEqual(data, [['a'], 'z']);
});
