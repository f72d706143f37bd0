// connect(), opening, and the onFrame hook.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, Peer, ClosedError } from 'jsonrpc-peer';
import { FakeSocket, within, nextTurn } from './helpers.mjs';

/** A WebSocket constructor stand-in that opens (or fails) on the next macrotask. */
function fakeWebSocketClass({ fail = false } = {}) {
  const made = [];
  class FakeWS extends FakeSocket {
    constructor(url) {
      super({ open: false });
      this.url = url;
      made.push(this);
      setImmediate(() => (fail ? (this.emit('error', { message: 'ECONNREFUSED' }), this.closedByServer(1006, '', false)) : this.open()));
    }
  }
  return { FakeWS, made };
}

test('connect resolves to a Peer once the socket is open', async () => {
  const { FakeWS, made } = fakeWebSocketClass();
  const peer = await within(connect('ws://example.invalid/rpc', { WebSocket: FakeWS }));
  assert.ok(peer instanceof Peer);
  assert.equal(made[0].url, 'ws://example.invalid/rpc');
  assert.equal(made[0].readyState, 1);
  peer.notify('hi');
  assert.equal(made[0].sent.length, 1);
});

test('connect rejects with ClosedError when the socket fails to open, saying why', async () => {
  const { FakeWS } = fakeWebSocketClass({ fail: true });
  const e = await within(connect('ws://127.0.0.1:9/rpc', { WebSocket: FakeWS }).catch((e) => e));
  assert.ok(e instanceof ClosedError, String(e));
  assert.match(e.message, /before it opened.*1006.*ECONNREFUSED/);
});

test('connect passes options through: timeoutMs and onFrame', async () => {
  const { FakeWS, made } = fakeWebSocketClass();
  const frames = [];
  const peer = await within(connect('ws://x/rpc', {
    WebSocket: FakeWS, timeoutMs: 25, onFrame: (dir, text) => frames.push([dir, text]),
  }));
  peer.method('sum', (_cx, p) => p[0] + p[1]);
  await assert.rejects(within(peer.call('slow')), /timed out after 25 ms/);
  await made[0].exchange('{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":"k"}');
  assert.deepEqual(frames, [
    ['out', '{"jsonrpc":"2.0","method":"slow","id":1}'],
    // The call that timed out tells the other side.
    ['out', '{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}'],
    ['in', '{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":"k"}'],
    ['out', '{"jsonrpc":"2.0","result":3,"id":"k"}'],
  ]);
});

test('a Peer over a connecting socket: handlers registered before open, sends queued until open', async () => {
  const socket = new FakeSocket({ open: false });
  const frames = [];
  const peer = new Peer(socket, { onFrame: (d, t) => frames.push(d) });
  peer.notify('early', [1]);
  const p = peer.call('early_call', [], { timeoutMs: 1000 });
  assert.deepEqual(socket.sent, [], 'nothing sent while connecting');
  socket.open();
  await within(peer.opened);
  assert.equal(socket.sent.length, 2);
  assert.deepEqual(frames, ['out', 'out']);
  socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 'ok', id: JSON.parse(socket.sent[1]).id }));
  assert.equal(await within(p), 'ok');
});

test('a socket that closes before opening rejects calls queued meanwhile', async () => {
  const socket = new FakeSocket({ open: false });
  const peer = new Peer(socket);
  const p = peer.call('never');
  socket.closedByServer(1006, '', false);
  await assert.rejects(within(p), ClosedError);
  await assert.rejects(within(peer.opened), ClosedError);
  assert.deepEqual(await within(peer.closed), { code: 1006, reason: '', wasClean: false });
});

test('a throwing onFrame hook does not break the peer', async () => {
  const socket = new FakeSocket();
  const peer = new Peer(socket, { onFrame: () => { throw new Error('log broke'); } });
  peer.method('get_data', () => ['hello', 5]);
  assert.deepEqual(await socket.exchange('{"jsonrpc":"2.0","method":"get_data","id":9}'), {
    jsonrpc: '2.0', result: ['hello', 5], id: 9,
  });
});

test('a failed handshake that fires error but no close (Node 20\'s WebSocket) still closes the peer', async () => {
  // Node 20's built-in WebSocket (--experimental-websocket) fires `error` and stays
  // CONNECTING when the server refuses or resets the connection; a browser closes.
  const socket = new FakeSocket({ open: false });
  const peer = new Peer(socket);
  const call = peer.call('never');
  socket.emit('error', { message: 'Received network error or non-101 status code.' });
  assert.equal(socket.readyState, 0);
  assert.deepEqual(await within(peer.closed), { code: 1006, reason: '', wasClean: false });
  const e = await within(peer.opened.catch((e) => e));
  assert.ok(e instanceof ClosedError, String(e));
  assert.match(e.message, /before it opened, code 1006: Received network error/);
  await assert.rejects(within(call), ClosedError);
});

test('an error on an open socket waits for its close event', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const socket = new FakeSocket();
  const peer = new Peer(socket);
  let closed = false;
  peer.closed.then(() => (closed = true));
  socket.emit('error', { message: 'boom' });
  t.mock.timers.tick(60000); // far past the task the fallback of a connecting socket uses
  await nextTurn();
  assert.equal(closed, false);
  socket.closedByServer(1011, 'bye', false);
  assert.deepEqual(await within(peer.closed), { code: 1011, reason: 'bye', wasClean: false });
});
