// The bounds: calls waiting for their answers, sends waiting for the socket to open, and
// what the socket buffers. Each has a default and an option; past it a send is refused at
// once with LimitError and nothing is sent. And the bounds on the work the other side
// starts here: handlers of its calls running (past it -32001), its notifications waiting
// for their ordered handler (past it the connection closes).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Peer, LIMITS, LimitError, ClosedError, ErrorCode, RpcError } from 'jsonrpc-peer';
import { FakeSocket, socketPair, within, signal, nextTurn, byId } from './helpers.mjs';

const limitError = (limit, value) => (e) =>
  e instanceof LimitError && e.limit === limit && e.value === value;

test('the defaults are the Rust peer\'s bounds: 1,024, 1 MiB, a batch of 1,000, 256 running and queued', () => {
  assert.deepEqual({ ...LIMITS }, {
    maxPendingCalls: 1024, maxQueued: 1024, maxQueuedBytes: 1048576, maxBufferedAmount: 1048576,
    maxBatchLen: 1000, maxRunningCalls: 256, maxQueuedNotifications: 256,
    maxHeld: 10000, maxHeldBytes: 67108864, // a followed topic's, checked in topics.test.mjs
  });
  assert.ok(Object.isFrozen(LIMITS));
});

test('a limit must be a number from 0 up; Infinity turns it off', () => {
  const socket = new FakeSocket();
  for (const bad of [-1, NaN, '10', null]) {
    for (const name of Object.keys(LIMITS).filter((n) => !n.startsWith('maxHeld'))) {
      if (bad === null) continue; // null means the default, as undefined does
      assert.throws(() => new Peer(socket, { [name]: bad }), RangeError, `${name}: ${bad}`);
    }
  }
  const peer = new Peer(socket, { maxPendingCalls: Infinity });
  const waiting = [];
  for (let i = 0; i < 2000; i++) waiting.push(peer.call('x', [], { timeoutMs: 0 }).catch(() => {}));
  assert.equal(peer.pendingCount, 2000);
  peer.close();
  return Promise.all(waiting);
});

describe('calls in flight (maxPendingCalls)', () => {
  test('past the limit a call rejects at once, sends nothing, and says which limit', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxPendingCalls: 2 });
    const a = peer.call('a');
    const b = peer.call('b', [], { timeoutMs: 0 }).catch((e) => e);
    const e = await within(peer.call('sum', [1, 2]).catch((e) => e));
    assert.ok(limitError('maxPendingCalls', 2)(e), String(e));
    assert.equal(e.message, 'call to "sum" refused: 2 calls already wait for their answers (maxPendingCalls is 2)');
    assert.equal(socket.sent.length, 2, 'the refused call was not sent');
    assert.equal(peer.pendingCount, 2);
    // An answer frees a place.
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 'A', id: JSON.parse(socket.sent[0]).id }));
    assert.equal(await within(a), 'A');
    const c = peer.call('c', [], { timeoutMs: 0 }).catch((e) => e);
    assert.equal(JSON.parse(socket.sent[2]).method, 'c');
    peer.close();
    for (const left of [b, c]) assert.ok((await within(left)) instanceof ClosedError);
  });

  test('the default lets 1,024 calls wait and refuses the next', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket);
    const waiting = [];
    for (let i = 0; i < 1024; i++) waiting.push(peer.call('x', [i], { timeoutMs: 0 }).catch((e) => e));
    await assert.rejects(within(peer.call('x', [1024])), limitError('maxPendingCalls', 1024));
    assert.equal(socket.sent.length, 1024);
    peer.close();
    assert.ok((await within(Promise.all(waiting))).every((e) => e instanceof ClosedError));
  });

  test('a batch whose calls do not fit is refused whole; one that fits goes', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxPendingCalls: 3 });
    const held = peer.call('held', [], { timeoutMs: 0 }).catch((e) => e);
    await assert.rejects(
      within(peer.batch().call('a').call('b').call('c').send()),
      limitError('maxPendingCalls', 3),
    );
    assert.equal(socket.sent.length, 1, 'nothing of the batch was sent');
    assert.equal(peer.pendingCount, 1);
    const two = peer.batch().call('a').notify('n').call('b').send();
    assert.equal(JSON.parse(socket.sent[1]).length, 3);
    assert.equal(peer.pendingCount, 3);
    peer.close();
    const outcomes = await within(two);
    assert.ok(outcomes.every((o) => !o.ok && o.error instanceof ClosedError));
    assert.ok((await within(held)) instanceof ClosedError);
  });
});

describe('sends while the socket connects (maxQueued, maxQueuedBytes)', () => {
  test('past the count, a notify throws and a call rejects; on open the queued ones go, in order', async () => {
    const socket = new FakeSocket({ open: false });
    const peer = new Peer(socket, { maxQueued: 2 });
    peer.notify('one');
    const call = peer.call('two');
    assert.throws(() => peer.notify('three'), limitError('maxQueued', 2));
    await assert.rejects(within(peer.call('four')), limitError('maxQueued', 2));
    assert.equal(peer.queuedCount, 2);
    assert.equal(peer.pendingCount, 1, 'the refused call does not wait');
    socket.open();
    assert.deepEqual(socket.sent.map((t) => JSON.parse(t).method), ['one', 'two']);
    assert.equal(peer.queuedCount, 0);
    peer.notify('five');
    assert.equal(socket.sent.length, 3);
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 2, id: JSON.parse(socket.sent[1]).id }));
    assert.equal(await within(call), 2);
  });

  test('past the bytes, sends are refused; one frame larger than the limit still goes alone', () => {
    const socket = new FakeSocket({ open: false });
    const peer = new Peer(socket, { maxQueuedBytes: 100 });
    const big = 'é'.repeat(100); // 200 bytes in UTF-8
    peer.notify('big', [big]);
    const e = (() => { try { peer.notify('small'); } catch (e) { return e; } })();
    assert.ok(limitError('maxQueuedBytes', 100)(e), String(e));
    assert.match(e.message, /^notification "small" refused: 2\d\d bytes already wait for the connection \(maxQueuedBytes is 100\)$/);
    assert.equal(peer.queuedCount, 1);
    socket.open();
    assert.equal(JSON.parse(socket.sent[0]).params[0], big);
    peer.notify('small'); // the queue emptied on open
  });

  test('a close drops what waits and frees the count: later sends say closed', () => {
    const socket = new FakeSocket({ open: false });
    const peer = new Peer(socket, { maxQueued: 1 });
    peer.notify('one');
    socket.closedByServer(1006);
    assert.equal(peer.queuedCount, 0);
    assert.throws(() => peer.notify('two'), ClosedError);
  });
});

describe("the socket's buffer (maxBufferedAmount)", () => {
  test('past it, call, notify and batch are refused at once and nothing is sent; below, they go', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxBufferedAmount: 1000 });
    socket.bufferedAmount = 1000;
    const e = await within(peer.call('sum', [1]).catch((e) => e));
    assert.ok(limitError('maxBufferedAmount', 1000)(e), String(e));
    assert.equal(e.message, 'call to "sum" refused: the socket already buffers 1000 bytes (maxBufferedAmount is 1000)');
    assert.equal(peer.pendingCount, 0);
    assert.throws(() => peer.notify('n'), limitError('maxBufferedAmount', 1000));
    await assert.rejects(within(peer.batch().call('a').send()), limitError('maxBufferedAmount', 1000));
    assert.equal(peer.pendingCount, 0);
    assert.deepEqual(socket.sent, []);
    socket.bufferedAmount = 999;
    peer.notify('n');
    assert.equal(socket.sent.length, 1);
  });

  test('the default refuses past 1 MiB buffered', () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket);
    socket.bufferedAmount = 1048575;
    peer.notify('fits');
    socket.bufferedAmount = 1048576;
    assert.throws(() => peer.notify('does not'), limitError('maxBufferedAmount', 1048576));
  });

  test('an answer past it closes the connection with 4008: the other side does not read', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxBufferedAmount: 1000 });
    peer.method('echo', (_cx, p) => p);
    const mine = peer.call('mine').catch((e) => e);
    socket.bufferedAmount = 5000;
    socket.receive('{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}');
    assert.deepEqual(await within(peer.closed), { code: 4008, reason: 'outgoing buffer full', wasClean: true });
    assert.equal(socket.sent.length, 1, 'only our own call went out, no answer');
    const e = await within(mine);
    assert.ok(e instanceof ClosedError && /closed locally with code 4008 \(outgoing buffer full\)/.test(e.message), String(e));
  });

  test('past it, progress values and cancels are skipped; the connection stays', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxBufferedAmount: 1000 });
    const sent = [];
    const release = signal();
    peer.method('work', async (cx) => {
      sent.push(cx.progress('skipped'));
      await release.promise;
      socket.bufferedAmount = 0;
      sent.push(cx.progress('sent'));
      return 'done';
    });
    const controller = new AbortController();
    const call = peer.call('slow', [], { signal: controller.signal });
    socket.bufferedAmount = 5000;
    socket.receive('{"jsonrpc":"2.0","method":"work","id":"w","progressToken":"t"}');
    controller.abort(new Error('given up'));
    await assert.rejects(within(call), /given up/);
    assert.equal(socket.sent.length, 1, 'no cancel went out');
    release.resolve();
    assert.deepEqual(await socket.frame(2), { jsonrpc: '2.0', result: 'done', id: 'w' });
    assert.deepEqual(JSON.parse(socket.sent[1]), { jsonrpc: '2.0', method: '$/progress', params: { token: 't', value: 'sent' } });
    assert.deepEqual(sent, [false, true]);
    assert.equal(peer.isClosed, false);
  });
});

const callText = (method, id, params = []) => JSON.stringify({ jsonrpc: '2.0', method, params, id });
const noteText = (method, params) => JSON.stringify({ jsonrpc: '2.0', method, params });
const overloaded = (id, max) => ({
  jsonrpc: '2.0', id,
  error: { code: -32001, message: 'Too many calls running', data: `the limit of ${max} running calls is reached` },
});

describe("the other side's calls running here (maxRunningCalls)", () => {
  test('past the limit a call is answered -32001 at once and does not run; once one ends, calls run again', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxRunningCalls: 2 });
    const gates = new Map(); // id -> what ends that call's handler
    peer.method('wait', (_cx, [id]) => {
      gates.set(id, signal());
      return gates.get(id).promise;
    });
    socket.receive(callText('wait', 1, [1]));
    socket.receive(callText('wait', 2, [2]));
    assert.equal(peer.runningCount, 2);
    assert.deepEqual(await socket.exchange(callText('wait', 3, [3])), overloaded(3, 2));
    assert.deepEqual([...gates.keys()], [1, 2], 'the refused call did not run');
    assert.equal(peer.runningCount, 2, 'the first two still run');
    assert.equal(ErrorCode.OVERLOADED, -32001);
    // One ends: a new call runs again.
    gates.get(1).resolve('one');
    assert.deepEqual(await socket.frame(1), { jsonrpc: '2.0', result: 'one', id: 1 });
    socket.receive(callText('wait', 4, [4]));
    assert.deepEqual([...gates.keys()], [1, 2, 4]);
    assert.equal(peer.runningCount, 2);
    gates.get(2).resolve('two');
    gates.get(4).resolve('four');
    assert.deepEqual(await socket.frame(2), { jsonrpc: '2.0', result: 'two', id: 2 });
    assert.deepEqual(await socket.frame(3), { jsonrpc: '2.0', result: 'four', id: 4 });
    assert.equal(peer.runningCount, 0);
    assert.equal(peer.isClosed, false);
  });

  test("a batch's calls count each; a synchronous handler is done at once; notifications do not count", async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxRunningCalls: 2 });
    const gates = new Map();
    peer.method('wait', (_cx, [id]) => {
      gates.set(id, signal());
      return gates.get(id).promise;
    });
    peer.method('now', (_cx, [id]) => `now ${id}`);
    let notes = 0;
    peer.notification('note', () => { notes += 1; });
    socket.receive(callText('wait', 1, [1]));
    // With one running: two synchronous calls run and are done, one more waits, the
    // last is refused; the notification runs regardless.
    const n = socket.sent.length;
    socket.receive(JSON.stringify([
      JSON.parse(callText('now', 'a', ['a'])), JSON.parse(callText('now', 'b', ['b'])),
      JSON.parse(noteText('note', [])),
      JSON.parse(callText('wait', 2, [2])), JSON.parse(callText('wait', 3, [3])),
    ]));
    assert.deepEqual([...gates.keys()], [1, 2]);
    assert.equal(peer.runningCount, 2);
    gates.get(2).resolve('two');
    assert.deepEqual(byId(await socket.frame(n)), byId([
      { jsonrpc: '2.0', result: 'now a', id: 'a' },
      { jsonrpc: '2.0', result: 'now b', id: 'b' },
      { jsonrpc: '2.0', result: 'two', id: 2 },
      overloaded(3, 2),
    ]));
    assert.equal(notes, 1);
    gates.get(1).resolve('one');
    assert.deepEqual(await socket.frame(n + 1), { jsonrpc: '2.0', result: 'one', id: 1 });
  });

  test('a notification that runs a method counts as a call; past the limit it is dropped and said', async () => {
    const socket = new FakeSocket();
    const failures = [];
    const peer = new Peer(socket, {
      maxRunningCalls: 2,
      onHandlerError: (e, method) => failures.push([method, e]),
    });
    const gates = [];
    peer.method('wait', () => {
      gates.push(signal());
      return gates.at(-1).promise;
    });
    for (let i = 0; i < 3; i += 1) socket.receive(noteText('wait', []));
    await nextTurn();
    assert.equal(gates.length, 2, 'two run, the third is dropped');
    assert.equal(peer.runningCount, 2);
    assert.equal(failures.length, 1);
    assert.equal(failures[0][0], 'wait');
    assert.ok(failures[0][1] instanceof RpcError && failures[0][1].code === ErrorCode.OVERLOADED, String(failures[0][1]));
    // A call past the limit is refused as before; once they end, one runs again.
    assert.deepEqual(await socket.exchange(callText('wait', 9, [])), overloaded(9, 2));
    for (const gate of gates) gate.resolve('done');
    await nextTurn();
    assert.equal(peer.runningCount, 0);
    socket.receive(noteText('wait', []));
    await nextTurn();
    assert.equal(gates.length, 3);
    gates[2].resolve('done');
  });

  test('the default lets 256 handlers run: a batch of 300 waiting calls has 44 refused; 300 synchronous ones all run', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket);
    const release = signal();
    let runs = 0;
    peer.method('wait', () => { runs += 1; return release.promise; });
    peer.method('now', () => 'now');
    const batch = (method) => JSON.stringify(Array.from({ length: 300 }, (_, i) => JSON.parse(callText(method, i))));
    socket.receive(batch('wait'));
    assert.equal(runs, 256);
    assert.equal(peer.runningCount, 256);
    release.resolve('done');
    const answers = await socket.frame(0, 5000);
    assert.equal(answers.filter((a) => a.result === 'done').length, 256);
    assert.deepEqual(answers.filter((a) => a.error).map((a) => a.error), Array(44).fill(overloaded(0, 256).error));
    const quick = await socket.exchange(batch('now'), 5000);
    assert.equal(quick.filter((a) => a.result === 'now').length, 300);
  });
});

describe("the other side's notifications waiting here (maxQueuedNotifications)", () => {
  test('one past the limit closes the connection with 4008 and says why; our calls end with ClosedError', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxQueuedNotifications: 3 });
    const hold = signal();
    const fourth = signal();
    const seen = [];
    peer.notification('tick', async (_cx, [n]) => {
      seen.push(n);
      if (n === 4) fourth.resolve();
      await hold.promise;
    });
    const ours = peer.call('mine', [], { timeoutMs: 0 }).catch((e) => e);
    socket.receive(noteText('tick', [1]));
    await nextTurn();
    assert.deepEqual(seen, [1], 'the first runs, and blocks');
    for (const n of [2, 3, 4]) socket.receive(noteText('tick', [n]));
    assert.equal(peer.isClosed, false, 'three may wait');
    socket.receive(noteText('tick', [5]));
    assert.equal(peer.isClosed, true, 'the fourth to wait closes the connection');
    const reason = 'too many notifications queued (limit 3)';
    assert.deepEqual(await within(peer.closed), { code: 4008, reason, wasClean: true });
    const e = await within(ours);
    assert.ok(e instanceof ClosedError && e.message.includes(`closed locally with code 4008 (${reason})`), String(e));
    // The ones that waited still run, in order; the one past the limit never does.
    hold.resolve();
    await within(fourth.promise, 1000, 'notification 4');
    await nextTurn();
    assert.deepEqual(seen, [1, 2, 3, 4]);
  });

  test('a batch with one past the limit closes too, and nothing more of it runs', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxQueuedNotifications: 1 });
    const hold = signal();
    let calls = 0;
    peer.notification('tick', () => hold.promise);
    peer.method('work', () => { calls += 1; return 1; });
    socket.receive(noteText('tick', [1]));
    await nextTurn();
    socket.receive(noteText('tick', [2])); // the one that may wait
    socket.receive(JSON.stringify([JSON.parse(noteText('tick', [3])), JSON.parse(callText('work', 1))]));
    assert.deepEqual(await within(peer.closed), { code: 4008, reason: 'too many notifications queued (limit 1)', wasClean: true });
    assert.equal(calls, 0);
    hold.resolve();
  });

  test('a flood under the limit is handled in order, as before; a batch that arrives with room is queued whole', async () => {
    // Frames one after another, as a socket delivers them: each is handled before the next.
    const [a, b] = socketPair();
    const sender = new Peer(a);
    const receiver = new Peer(b);
    const seen = [];
    const all = signal();
    receiver.notification('tick', async (_cx, [n]) => {
      await null;
      seen.push(n);
      if (seen.length === 1000) all.resolve();
    });
    for (let n = 0; n < 1000; n++) sender.notify('tick', [n]);
    await within(all.promise, 10000, '1,000 notifications');
    assert.deepEqual(seen, Array.from({ length: 1000 }, (_, n) => n));
    // A batch of 600 (more than the default 256, within maxBatchLen) with nothing waiting.
    seen.length = 0;
    const batch = signal();
    receiver.notification('late', (_cx, [n]) => {
      seen.push(n);
      if (n === 599) batch.resolve();
    });
    b.receive(JSON.stringify(Array.from({ length: 600 }, (_, n) => JSON.parse(noteText('late', [n])))));
    await within(batch.promise, 10000, 'a batch of 600');
    assert.deepEqual(seen, Array.from({ length: 600 }, (_, n) => n));
    // With a handler that blocks: one runs and three wait, within a limit of 3.
    const socket = new FakeSocket();
    const peer = new Peer(socket, { maxQueuedNotifications: 3 });
    const hold = signal();
    const order = [];
    const last = signal();
    peer.notification('tick', async (_cx, [n]) => {
      order.push(n);
      await hold.promise;
      if (n === 4) last.resolve();
    });
    socket.receive(noteText('tick', [1]));
    await nextTurn(); // it runs
    for (const n of [2, 3, 4]) socket.receive(noteText('tick', [n]));
    hold.resolve();
    await within(last.promise, 1000, 'notification 4');
    assert.deepEqual(order, [1, 2, 3, 4]);
    assert.equal(peer.isClosed || receiver.isClosed, false);
  });
});
