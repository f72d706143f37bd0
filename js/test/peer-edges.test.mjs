// Edges of one connection found by a review: a result JSON leaves out, progress after
// the answer, a Peer made over a socket already closed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Peer, ClosedError, TimeoutError } from 'jsonrpc-peer';
import { FakeSocket, socketPair, within } from './helpers.mjs';

test('a result JSON leaves out (a function, a symbol, a toJSON giving undefined) answers -32603, not an answer with neither member', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket, { onHandlerError: () => {} });
  peer.method('fn', () => () => 1);
  peer.method('sym', () => Symbol('s'));
  peer.method('tojson', () => ({ toJSON: () => undefined }));
  for (const [id, method] of [[1, 'fn'], [2, 'sym'], [3, 'tojson']]) {
    const answer = await socket.exchange(JSON.stringify({ jsonrpc: '2.0', method, id }));
    assert.deepEqual(answer, { jsonrpc: '2.0', error: { code: -32603, message: 'Internal error' }, id }, method);
  }
});

test("such a result does not fail the answering side's own call of the same id", async () => {
  const [sa, sb] = socketPair();
  const a = new Peer(sa, { onHandlerError: () => {} });
  const b = new Peer(sb);
  a.method('fn', () => () => 1);
  let finish;
  b.method('slow', () => new Promise((resolve) => (finish = resolve)));
  const mine = a.call('slow'); // a's call, id 1
  const theirs = b.call('fn', []).catch((e) => e); // b's call, id 1 too
  assert.equal((await within(theirs, 1000, "b's call")).code, -32603);
  finish('slow done');
  assert.equal(await within(mine, 1000, "a's call"), 'slow done');
});

test('no progress value leaves after the answer', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket);
  let late;
  peer.method('work', (cx) => {
    late = () => cx.progress('late');
    return 'done';
  });
  const answer = await socket.exchange('{"jsonrpc":"2.0","method":"work","id":1,"progressToken":"t"}');
  assert.deepEqual(answer, { jsonrpc: '2.0', result: 'done', id: 1 });
  assert.equal(late(), false, 'progress after the answer is not sent');
  assert.equal(socket.sent.length, 1, `sent: ${socket.sent.join(' | ')}`);
});

test('a Peer over a socket already closed is closed, not waiting for ever', async () => {
  const socket = new FakeSocket();
  socket.readyState = 3;
  const peer = new Peer(socket);
  await assert.rejects(within(peer.opened, 300, 'opened'), ClosedError);
  await within(peer.closed, 300, 'closed');
  assert.equal(peer.isClosed, true);
});

test('a call given up while the socket connects is not sent, nor its cancel, and frees its place in the queue', async () => {
  const socket = new FakeSocket({ open: false });
  const peer = new Peer(socket, { maxQueued: 2 });
  const timedOut = peer.call('slow_to_connect', [], { timeoutMs: 1 }).catch((e) => e);
  const aborter = new AbortController();
  const aborted = peer.call('aborted', [], { signal: aborter.signal }).catch((e) => e);
  assert.equal(peer.queuedCount, 2);
  aborter.abort(new Error('not wanted'));
  assert.equal((await within(aborted)).message, 'not wanted');
  assert.ok((await within(timedOut)) instanceof TimeoutError);
  assert.equal(peer.queuedCount, 0, 'both taken back from the queue');
  const kept = peer.call('kept', [], { timeoutMs: 1000 });
  peer.notify('after', [1]);
  socket.open();
  await within(peer.opened);
  const methods = socket.sent.map((text) => JSON.parse(text).method);
  assert.deepEqual(methods, ['kept', 'after'], 'neither given-up call nor a cancel of it went out');
  socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 'ok', id: JSON.parse(socket.sent[0]).id }));
  assert.equal(await within(kept), 'ok');
});
