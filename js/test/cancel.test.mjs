// Cancellation (AbortSignal both ways) and progress in the browser peer, over fake sockets.
import test from 'node:test';
import assert from 'node:assert/strict';

import { Peer, ErrorCode, TimeoutError } from 'jsonrpc-peer';
import { FakeSocket, socketPair, within, signal } from './helpers.mjs';

const cancelOf = (id) => ({ jsonrpc: '2.0', method: '$/cancelRequest', params: { id } });

test('aborting a call sends the cancel and rejects with the signal reason', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket);
  const controller = new AbortController();
  const call = peer.call('slow', [1], { signal: controller.signal });
  const request = await socket.frame(0);
  assert.deepEqual(request, { jsonrpc: '2.0', method: 'slow', params: [1], id: request.id });
  const reason = new Error('user pressed Cancel');
  controller.abort(reason);
  await assert.rejects(within(call), (e) => e === reason);
  assert.deepEqual(await socket.frame(1), cancelOf(request.id));
  assert.equal(peer.pendingCount, 0);
  // A late answer changes nothing.
  await socket.expectSilence(JSON.stringify({ jsonrpc: '2.0', result: 1, id: request.id }));
});

test('a signal aborted before the call sends nothing', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket);
  const call = peer.call('slow', [], { signal: AbortSignal.abort('too late') });
  await assert.rejects(within(call), (e) => e === 'too late');
  assert.deepEqual(socket.sent, []);
  assert.equal(peer.pendingCount, 0);
});

test('an abort after the answer changes nothing', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket);
  const controller = new AbortController();
  const call = peer.call('quick', [], { signal: controller.signal });
  const { id } = await socket.frame(0);
  socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 'ok', id }));
  assert.equal(await within(call), 'ok');
  controller.abort();
  assert.equal(socket.sent.length, 1, 'no cancel for a finished call');
});

test('a timeout sends the cancel too', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket);
  const call = peer.call('slow', [], { timeoutMs: 10 });
  const { id } = await socket.frame(0);
  await assert.rejects(within(call), TimeoutError);
  assert.deepEqual(await socket.frame(1), cancelOf(id));
});

test("cancelStyle 'mcp' sends notifications/cancelled; null sends none", async () => {
  const mcp = new FakeSocket();
  const a = new Peer(mcp, { cancelStyle: 'mcp' });
  const c1 = new AbortController();
  const p1 = a.call('slow', [], { signal: c1.signal });
  const { id } = await mcp.frame(0);
  const why1 = new Error('given up (mcp)');
  c1.abort(why1);
  // The abort's own reason, not `within`'s "did not finish": the abort is what ended it.
  await assert.rejects(within(p1), (e) => e === why1);
  assert.deepEqual(await mcp.frame(1), {
    jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id },
  });

  const off = new FakeSocket();
  const b = new Peer(off, { cancelStyle: null });
  const c2 = new AbortController();
  const p2 = b.call('slow', [], { signal: c2.signal });
  await off.frame(0);
  const why2 = new Error('given up (none)');
  c2.abort(why2);
  await assert.rejects(within(p2), (e) => e === why2);
  assert.equal(b.pendingCount, 0);
  assert.equal(off.sent.length, 1, 'no cancel');
  await off.expectSilence(); // nor a late one
});

/** A peer whose `slow` handler waits for its signal, then throws or returns. */
function serving(outcome) {
  const socket = new FakeSocket();
  const peer = new Peer(socket, { onHandlerError: () => {} });
  const started = signal();
  peer.method('slow', async (cx) => {
    started.resolve(cx);
    await new Promise((resolve) => cx.signal.addEventListener('abort', resolve, { once: true }));
    if (outcome === 'throw') throw cx.signal.reason;
    return { partial: true };
  });
  return { socket, peer, started };
}

test('an incoming cancel aborts the handler signal; throwing after it answers -32800', async () => {
  const { socket, peer, started } = serving('throw');
  socket.receive(JSON.stringify({ jsonrpc: '2.0', method: 'slow', id: 'a' }));
  await within(started.promise);
  assert.equal(peer.runningCount, 1);
  const answer = await socket.exchange(JSON.stringify(cancelOf('a')));
  assert.deepEqual(answer, {
    jsonrpc: '2.0', error: { code: ErrorCode.REQUEST_CANCELLED, message: 'Request cancelled' }, id: 'a',
  });
  assert.equal(peer.runningCount, 0);
  // Finished, unknown, or without an id: nothing changes, nothing is answered.
  await socket.expectSilence(JSON.stringify(cancelOf('a')));
  await socket.expectSilence(JSON.stringify(cancelOf(99)));
  await socket.expectSilence('{"jsonrpc":"2.0","method":"$/cancelRequest"}');
});

test('a handler that returns after its signal aborted answers with what it returned', async () => {
  const { socket, started } = serving('return');
  socket.receive(JSON.stringify({ jsonrpc: '2.0', method: 'slow', id: 1 }));
  await within(started.promise);
  const answer = await socket.exchange(JSON.stringify(cancelOf(1)));
  assert.deepEqual(answer, { jsonrpc: '2.0', result: { partial: true }, id: 1 });
});

test('an MCP cancel aborts the handler and nothing is answered', async () => {
  const { socket, peer, started } = serving('throw');
  socket.receive(JSON.stringify({ jsonrpc: '2.0', method: 'slow', id: 7 }));
  await within(started.promise);
  await socket.expectSilence(JSON.stringify({
    jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 7, reason: 'user' },
  }));
  assert.equal(peer.runningCount, 0);
});

test('a cancel is handled while an ordered notification still runs', async () => {
  const { socket, peer, started } = serving('throw');
  const hold = signal();
  peer.notification('hold', () => hold.promise);
  socket.receive('{"jsonrpc":"2.0","method":"hold"}');
  socket.receive(JSON.stringify({ jsonrpc: '2.0', method: 'slow', id: 2 }));
  await within(started.promise);
  const answer = await socket.exchange(JSON.stringify(cancelOf(2)));
  assert.equal(answer.error.code, -32800);
  hold.resolve();
});

test('progress reaches a caller that asked, in order, before the answer', async () => {
  const [a, b] = socketPair();
  const caller = new Peer(a);
  const callee = new Peer(b);
  callee.method('work', async (cx, [n]) => {
    for (let i = 1; i <= n; i++) cx.progress({ done: i });
    return cx.wantsProgress;
  });
  const seen = [];
  const asked = await within(caller.call('work', [5], { onProgress: (v) => seen.push(v.done) }));
  assert.equal(asked, true);
  assert.deepEqual(seen, [1, 2, 3, 4, 5]);
  assert.equal(JSON.parse(a.sent[0]).progressToken, JSON.parse(a.sent[0]).id);
  // Without onProgress: no token is sent, and the handler sends nothing.
  const before = b.sent.length;
  assert.equal(await within(caller.call('work', [3])), false);
  assert.equal(b.sent.length, before + 1, 'only the answer');
  assert.equal(JSON.parse(a.sent[1]).progressToken, undefined);
});

test('progress whose token is not ours is an ordinary notification', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket);
  const got = signal();
  peer.notification('$/progress', (_cx, params) => got.resolve(params));
  socket.receive('{"jsonrpc":"2.0","method":"$/progress","params":{"token":"x","value":1}}');
  assert.deepEqual(await within(got.promise), { token: 'x', value: 1 });
});

test('the wire form of progress carries the caller token', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket);
  peer.method('work', (cx) => {
    cx.progress(50);
    return 'done';
  });
  socket.receive('{"jsonrpc":"2.0","method":"work","id":4,"progressToken":"t"}');
  assert.deepEqual(await socket.frame(0), {
    jsonrpc: '2.0', method: '$/progress', params: { token: 't', value: 50 },
  });
  assert.deepEqual(await socket.frame(1), { jsonrpc: '2.0', result: 'done', id: 4 });
});
