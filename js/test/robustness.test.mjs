// What a peer and a link do when the unexpected happens: a reporter that throws, a
// connection the peer closed itself, a cap past the timer's range, an aborted wait,
// a batch past its bound. Each failed before its fix.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Peer, reconnecting } from 'jsonrpc-peer';
import { FakeSocket, within, nextTurn, fakeServer as server, linkStates as states, isState, answer } from './helpers.mjs';

test('a connection the Peer closed itself (4008) is not handed to calls while its close handshake lingers', async () => {
  const s = server();
  const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, backoff: { initialMs: 1, maxMs: 1 } });
  link.method('ping', () => 'pong');
  const st = states(link);
  const sock0 = await s.socket(0);
  // The other side does not read (why the buffer is full): the close handshake lingers,
  // as a real socket's does until its close timeout.
  sock0.close = function (code = 1000, reason = '') {
    if (this.readyState >= 2) return;
    this.readyState = 2;
    setTimeout(() => this.closedByServer(code, reason, true), 300);
  };
  await st.until(isState('connected'));
  sock0.bufferedAmount = 2 * 1024 * 1024;
  sock0.receive(JSON.stringify({ jsonrpc: '2.0', method: 'ping', id: 1 }));
  for (let i = 0; i < 3; i++) await nextTurn();
  assert.equal(sock0.readyState, 2, 'the Peer closed its connection with 4008');
  // The link is down: a call made now must wait for the next connection.
  const call = link.call('subtract', [42, 23], { timeoutMs: 3000 });
  call.catch(() => {});
  s.socket(1).then((sock1) => answer(sock1, (m, [a, b]) => a - b), () => {});
  try {
    assert.equal(await within(call, 3000), 19);
  } finally {
    link.close();
  }
});

test('a backoff cap past setTimeout\'s range (maxMs: Infinity) does not make the link redial in a tight loop', async () => {
  const s = server(Array(100000).fill('fail'));
  let draws = 0;
  // Eight quick failures (jitter 0), then the waits are long: the ninth cap is 1e11 ms.
  const random = () => (draws++ < 8 ? 0 : 0.5);
  const link = reconnecting('ws://x/rpc', {
    WebSocket: s.WebSocket, random, backoff: { initialMs: 1000, maxMs: Infinity, multiplier: 10 },
  });
  const st = states(link);
  try {
    await st.until((x) => x.state === 'waiting' && x.retryInMs > 1e9, 'a long wait');
    const before = s.made.length;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(s.made.length, before, `the link is told to wait ${link.state.retryInMs} ms but dialed ${s.made.length - before} times in 300 ms`);
  } finally {
    link.close();
  }
});

test('an onHandlerError that throws once loses no later notification and no answer', async () => {
  const socket = new FakeSocket();
  const rejections = [];
  const onRejection = (e) => rejections.push(e);
  process.on('unhandledRejection', onRejection);
  let reports = 0;
  const peer = new Peer(socket, {
    onHandlerError: () => {
      reports += 1;
      if (reports === 1) throw new Error('the reporter failed');
    },
  });
  const got = [];
  peer.notification('n', (cx, [k]) => {
    if (k === 1) throw new Error('handler failed on 1');
    got.push(k);
  });
  try {
    for (const k of [1, 2, 3]) socket.receive(JSON.stringify({ jsonrpc: '2.0', method: 'n', params: [k] }));
    for (let i = 0; i < 5; i++) await nextTurn();
    assert.deepEqual(got, [2, 3], 'notification 2 was dropped');
    assert.deepEqual(rejections, []);
  } finally {
    process.off('unhandledRejection', onRejection);
  }
});

test('an onHandlerError that throws still lets a failing call be answered (-32603)', async () => {
  const socket = new FakeSocket();
  const rejections = [];
  const onRejection = (e) => rejections.push(e);
  process.on('unhandledRejection', onRejection);
  const peer = new Peer(socket, { onHandlerError: () => { throw new Error('the reporter failed'); } });
  peer.method('boom', () => { throw new Error('boom'); });
  try {
    const answer = await socket.exchange(JSON.stringify({ jsonrpc: '2.0', method: 'boom', id: 7 }), 500);
    assert.equal(answer.error.code, -32603);
  } finally {
    await nextTurn();
    process.off('unhandledRejection', onRejection);
  }
});

test('calls aborted while the link is down leave no timer (nor waiter) behind', async () => {
  const s = server(Array(1000).fill('fail'));
  const link = reconnecting('ws://x/rpc', {
    WebSocket: s.WebSocket, backoff: { initialMs: 1e6, maxMs: 1e6 }, random: () => 0.5,
  });
  const st = states(link);
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  try {
    await st.until(isState('waiting'));
    await nextTurn();
    const before = timers();
    for (let i = 0; i < 50; i++) {
      const ac = new AbortController();
      const call = link.call('x', [], { timeoutMs: 60000, signal: ac.signal });
      ac.abort(new Error('gave up'));
      await assert.rejects(call, /gave up/);
    }
    await nextTurn();
    assert.equal(link.queuedCount, 0);
    const after = timers();
    assert.ok(after <= before, `each aborted call left its 60 s wait timer running: ${before} timers before, ${after} after`);
  } finally {
    link.close();
  }
});

test('an incoming batch longer than maxBatchLen (1,000, as the Rust peer\'s) is refused, not run', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket, { onHandlerError: () => {} });
  let runs = 0;
  peer.method('work', () => { runs += 1; return 1; });
  const batch = (n) => JSON.stringify(Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', method: 'work', id: i })));
  const refused = await socket.exchange(batch(1001), 10000);
  assert.ok(!Array.isArray(refused), `a batch of 1,001 ran ${runs} handlers`);
  assert.equal(refused.error.code, -32600);
  assert.equal(refused.error.data, 'batch of 1001 exceeds the limit of 1000');
  assert.equal(refused.id, null);
  assert.equal(runs, 0);
  const answered = await socket.exchange(batch(1000), 10000);
  assert.equal(answered.length, 1000);
  // A setting of its own.
  const small = new FakeSocket();
  new Peer(small, { maxBatchLen: 2 }).method('work', () => 1);
  const past = await small.exchange(batch(3), 1000);
  assert.equal(past.error.data, 'batch of 3 exceeds the limit of 2');
});
