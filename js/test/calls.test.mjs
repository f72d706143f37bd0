// Outgoing traffic: call, notify, batch; ids, strictness, timeouts, close.
import { test, describe, mock } from 'node:test';
import assert from 'node:assert/strict';
import { Peer, RpcError, TimeoutError, ClosedError, InvalidResponseError } from 'jsonrpc-peer';
import { FakeSocket, socketPair, within } from './helpers.mjs';

function client(options = {}) {
  const socket = new FakeSocket();
  return { socket, peer: new Peer(socket, { onHandlerError: () => {}, ...options }) };
}

describe('call', () => {
  test('sends one request with a numeric id and resolves with the result', async () => {
    const { socket, peer } = client();
    const p = peer.call('subtract', [42, 23]);
    const req = await socket.frame(0);
    assert.deepEqual(req, { jsonrpc: '2.0', method: 'subtract', params: [42, 23], id: req.id });
    assert.equal(typeof req.id, 'number');
    assert.equal(peer.pendingCount, 1);
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 19, id: req.id }));
    assert.equal(await within(p), 19);
    assert.equal(peer.pendingCount, 0);
  });

  test('ids come from a per-peer counter: distinct and increasing', async () => {
    const { socket, peer } = client({ timeoutMs: 0 });
    const calls = [peer.call('a'), peer.call('b'), peer.call('c')];
    const ids = [0, 1, 2].map((n) => JSON.parse(socket.sent[n]).id);
    assert.ok(ids[0] < ids[1] && ids[1] < ids[2], `ids ${ids}`);
    const other = client({ timeoutMs: 0 });
    calls.push(other.peer.call('a'));
    assert.equal(JSON.parse(other.socket.sent[0]).id, ids[0], 'each peer counts on its own');
    peer.close(); other.peer.close();
    for (const c of calls) await assert.rejects(within(c), ClosedError);
  });

  test('params undefined leaves the member out; objects and arrays pass through', async () => {
    const { socket, peer } = client({ timeoutMs: 0 });
    const calls = [
      peer.call('get_data'),
      peer.call('subtract', { minuend: 42, subtrahend: 23 }),
      peer.call('sum', []),
    ];
    assert.equal('params' in JSON.parse(socket.sent[0]), false);
    assert.deepEqual(JSON.parse(socket.sent[1]).params, { minuend: 42, subtrahend: 23 });
    assert.deepEqual(JSON.parse(socket.sent[2]).params, []);
    peer.close();
    for (const c of calls) await assert.rejects(within(c), ClosedError);
  });

  test('strict in what we send: bad params or method throw TypeError, nothing sent', () => {
    const { socket, peer } = client();
    for (const bad of [null, 1, 'x', true, 0]) {
      assert.throws(() => peer.call('m', bad), TypeError);
      assert.throws(() => peer.notify('m', bad), TypeError);
      assert.throws(() => peer.batch().call('m', bad), TypeError);
      assert.throws(() => peer.batch().notify('m', bad), TypeError);
    }
    assert.throws(() => peer.call(5, []), TypeError);
    assert.throws(() => peer.notify(undefined), TypeError);
    assert.deepEqual(socket.sent, []);
    assert.equal(peer.pendingCount, 0);
  });

  test('an error response rejects with RpcError carrying code, message, data', async () => {
    const { socket, peer } = client();
    const p = peer.call('foobar');
    const { id } = await socket.frame(0);
    socket.receive(JSON.stringify({
      jsonrpc: '2.0', error: { code: -32602, message: 'Invalid params', data: { field: 'x' } }, id,
    }));
    const e = await within(p.catch((e) => e));
    assert.ok(e instanceof RpcError);
    assert.equal(e.code, -32602);
    assert.equal(e.message, 'Invalid params');
    assert.deepEqual(e.data, { field: 'x' });
  });

  test('result null and result false are results, not errors', async () => {
    const { socket, peer } = client();
    const a = peer.call('a');
    const b = peer.call('b');
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: null, id: JSON.parse(socket.sent[0]).id }));
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: false, id: JSON.parse(socket.sent[1]).id }));
    assert.equal(await within(a), null);
    assert.equal(await within(b), false);
  });

  test('answers out of order reach the right callers', async () => {
    const { socket, peer } = client();
    const calls = [1, 2, 3].map((n) => peer.call('echo', [n]));
    const ids = socket.sent.map((t) => JSON.parse(t).id);
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 3, id: ids[2] }));
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 1, id: ids[0] }));
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 2, id: ids[1] }));
    assert.deepEqual(await within(Promise.all(calls)), [1, 2, 3]);
  });

  test('an invalid response to one of our calls fails it at once with InvalidResponseError', async () => {
    const { socket, peer } = client();
    const bad = [
      (id) => ({ result: 1, id }), // no jsonrpc
      (id) => ({ jsonrpc: '1.0', result: 1, id }),
      (id) => ({ jsonrpc: '2.0', result: 1, error: { code: 1, message: 'x' }, id }),
      (id) => ({ jsonrpc: '2.0', error: 'oops', id }),
      (id) => ({ jsonrpc: '2.0', error: { code: 'x', message: 'y' }, id }),
      (id) => ({ jsonrpc: '2.0', error: { code: 1 }, id }),
    ];
    for (const [n, make] of bad.entries()) {
      const next = socket.sent.length; // the probes of expectSilence take frames too
      const failed = peer.call('x', [], { timeoutMs: 5000 }).catch((e) => e);
      const { id } = await socket.frame(next);
      await socket.expectSilence(JSON.stringify(make(id)));
      const e = await within(failed, 500);
      assert.ok(e instanceof InvalidResponseError, `case ${n}: ${e}`);
      assert.deepEqual(e.response, make(id));
    }
    assert.equal(peer.pendingCount, 0);
  });

  test('a response with the id as a string does not match a numeric id', async (t) => {
    // The call's timer runs on a clock the test moves: on a real one, a stall of a busy
    // machine could fire it (and its cancel) inside expectSilence's window.
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const { socket, peer } = client();
    const p = peer.call('x', [], { timeoutMs: 50 });
    const { id } = await socket.frame(0);
    await socket.expectSilence(JSON.stringify({ jsonrpc: '2.0', result: 1, id: String(id) }));
    assert.equal(peer.pendingCount, 1, 'the string id answered nothing');
    t.mock.timers.tick(50);
    await assert.rejects(within(p), TimeoutError);
  });
});

describe('timeouts', () => {
  test('a call with no answer rejects with TimeoutError and leaves the pending map', async () => {
    const { peer } = client();
    const t0 = Date.now();
    const e = await within(peer.call('slow', [], { timeoutMs: 30 }).catch((e) => e));
    assert.ok(e instanceof TimeoutError, String(e));
    assert.match(e.message, /slow.*30 ms/);
    assert.ok(Date.now() - t0 >= 25);
    assert.equal(peer.pendingCount, 0);
  });

  test('the peer-wide default applies; a late answer is ignored', async () => {
    const { socket, peer } = client({ timeoutMs: 20 });
    const p = peer.call('slow');
    await assert.rejects(within(p), TimeoutError);
    await socket.expectSilence(JSON.stringify({ jsonrpc: '2.0', result: 1, id: JSON.parse(socket.sent[0]).id }));
    assert.equal(peer.pendingCount, 0);
  });

  test('timeoutMs 0 means no timer', async () => {
    const { socket, peer } = client({ timeoutMs: 0 });
    // Mocked timers: a day passes at once, and no timer of the call's fires.
    mock.timers.enable({ apis: ['setTimeout'] });
    let p;
    try {
      p = peer.call('x');
      mock.timers.tick(24 * 3600 * 1000);
    } finally {
      mock.timers.reset();
    }
    assert.equal(peer.pendingCount, 1);
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 'late but fine', id: JSON.parse(socket.sent[0]).id }));
    assert.equal(await within(p), 'late but fine');
  });
});

describe('notify', () => {
  test('sends a request without an id member, returns nothing, awaits nothing', async () => {
    const { socket, peer } = client();
    assert.equal(peer.notify('update', [1, 2, 3, 4, 5]), undefined);
    peer.notify('foobar');
    assert.deepEqual(JSON.parse(socket.sent[0]), { jsonrpc: '2.0', method: 'update', params: [1, 2, 3, 4, 5] });
    assert.deepEqual(JSON.parse(socket.sent[1]), { jsonrpc: '2.0', method: 'foobar' });
    assert.equal(peer.pendingCount, 0);
  });
});

describe('batch', () => {
  test('one array frame; outcomes in the order added, whatever the answer order', async () => {
    const { socket, peer } = client();
    const sending = peer.batch()
      .call('sum', [1, 2, 4])
      .notify('notify_hello', [7])
      .call('subtract', [42, 23])
      .call('foo.get', { name: 'myself' })
      .call('get_data')
      .send();
    const frame = await socket.frame(0);
    assert.equal(socket.sent.length, 1);
    assert.ok(Array.isArray(frame));
    assert.equal(frame.length, 5);
    assert.equal('id' in frame[1], false, 'the notification has no id');
    const [s, , d, f, g] = frame;
    assert.equal(new Set([s.id, d.id, f.id, g.id]).size, 4);
    assert.equal('params' in g, false);
    socket.receive(JSON.stringify([
      { jsonrpc: '2.0', result: ['hello', 5], id: g.id },
      { jsonrpc: '2.0', error: { code: -32601, message: 'Method not found' }, id: f.id },
      { jsonrpc: '2.0', result: 19, id: d.id },
      { jsonrpc: '2.0', result: 7, id: s.id },
    ]));
    const out = await within(sending);
    assert.equal(out.length, 4);
    assert.deepEqual(out[0], { ok: true, result: 7 });
    assert.deepEqual(out[1], { ok: true, result: 19 });
    assert.equal(out[2].ok, false);
    assert.ok(out[2].error instanceof RpcError);
    assert.equal(out[2].error.code, -32601);
    assert.deepEqual(out[3], { ok: true, result: ['hello', 5] });
    assert.equal(peer.pendingCount, 0);
  });

  test('answers may arrive as separate objects; a lone object answers a one-call batch', async () => {
    const { socket, peer } = client();
    const one = peer.batch().call('get_data').send();
    const [req] = await socket.frame(0);
    // Some libraries (npm json-rpc-2.0) answer a one-element batch with a plain object.
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: ['hello', 5], id: req.id }));
    assert.deepEqual(await within(one), [{ ok: true, result: ['hello', 5] }]);
  });

  test('only notifications: sent, resolves to [] at once', async () => {
    const { socket, peer } = client();
    const out = await within(peer.batch().notify('a', [1]).notify('b').send());
    assert.deepEqual(out, []);
    assert.deepEqual(JSON.parse(socket.sent[0]), [
      { jsonrpc: '2.0', method: 'a', params: [1] },
      { jsonrpc: '2.0', method: 'b' },
    ]);
  });

  test('an empty batch sends nothing', async () => {
    const { socket, peer } = client();
    assert.deepEqual(await within(peer.batch().send()), []);
    assert.deepEqual(socket.sent, []);
  });

  test('a batch is sent once', async () => {
    const { peer } = client({ timeoutMs: 0 });
    const b = peer.batch().notify('x');
    await within(b.send());
    await assert.rejects(b.send(), /already sent/);
  });

  test('per-call timeout inside a batch', async () => {
    const { socket, peer } = client();
    const sending = peer.batch().call('fast').call('never').send({ timeoutMs: 40 });
    const [fast] = await socket.frame(0);
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 'ok', id: fast.id }));
    const out = await within(sending);
    assert.deepEqual(out[0], { ok: true, result: 'ok' });
    assert.ok(out[1].error instanceof TimeoutError);
    assert.equal(peer.pendingCount, 0);
  });

  test('close during a batch: each unanswered call fails with ClosedError', async () => {
    const { socket, peer } = client();
    const sending = peer.batch().call('a').call('b').send();
    await socket.frame(0);
    socket.closedByServer(1001, 'going away');
    const out = await within(sending);
    assert.ok(out.every((o) => !o.ok && o.error instanceof ClosedError));
  });

  test('a batch the other side refuses whole (past its maxBatchLen) ends each call with the -32600', async (t) => {
    // Two peers wired to each other; the other side takes batches of 2 at most.
    const [sa, sb] = socketPair();
    const peer = new Peer(sa, { onHandlerError: () => {} });
    new Peer(sb, { maxBatchLen: 2 }).method('sum', (_cx, p) => p.reduce((s, n) => s + n, 0));
    // Closed at the end either way, or a failure would leave the hour's timers running.
    t.after(() => peer.close());
    const sending = peer.batch().call('sum', [1, 2]).call('sum', [3]).call('sum', [4]).send({ timeoutMs: 3_600_000 });
    // One -32600 with id null answers the whole batch: without it taken as the refusal,
    // the calls would wait their hour.
    const out = await within(sending, 1000, 'the refused batch');
    assert.equal(out.length, 3);
    for (const o of out) {
      assert.equal(o.ok, false);
      assert.ok(o.error instanceof RpcError, String(o.error));
      assert.equal(o.error.code, -32600);
      assert.equal(o.error.data, 'batch of 3 exceeds the limit of 2');
    }
    assert.equal(peer.pendingCount, 0);
    // A batch the other side takes is answered as ever.
    const taken = await within(peer.batch().call('sum', [1, 2]).call('sum', [3]).send());
    assert.deepEqual(taken, [{ ok: true, result: 3 }, { ok: true, result: 3 }]);
  });

  test('an error with id null ends no single call, nor a batch when two wait', async (t) => {
    const { socket, peer } = client();
    t.after(() => peer.close());
    const refusal = (code) => JSON.stringify({ jsonrpc: '2.0', error: { code, message: 'refused' }, id: null });
    const single = peer.call('mine', [], { timeoutMs: 5000 });
    const { id } = await socket.frame(0);
    await socket.expectSilence(refusal(-32600));
    await socket.expectSilence(refusal(-32700));
    // Two batches waiting: which was refused cannot be told, so neither ends.
    const first = peer.batch().call('a').send({ timeoutMs: 5000 });
    const second = peer.batch().call('b').send({ timeoutMs: 5000 });
    const [[a], [b]] = [JSON.parse(socket.sent.at(-2)), JSON.parse(socket.sent.at(-1))];
    await socket.expectSilence(refusal(-32600));
    assert.equal(peer.pendingCount, 3);
    // The single call's own answer still arrives.
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 'its own', id }));
    assert.equal(await within(single), 'its own');
    // Once one batch has its answer, the other is the one waiting; a null-id error of
    // another code is still no refusal.
    socket.receive(JSON.stringify({ jsonrpc: '2.0', result: 1, id: a.id }));
    assert.deepEqual(await within(first), [{ ok: true, result: 1 }]);
    await socket.expectSilence(refusal(-32601));
    assert.equal(peer.pendingCount, 1);
    socket.receive(refusal(-32700));
    const [outcome] = await within(second);
    assert.equal(outcome.ok, false);
    assert.equal(outcome.error.code, -32700);
    assert.equal(b.method, 'b');
    assert.equal(peer.pendingCount, 0);
  });
});

describe('close', () => {
  test('the socket closing rejects every pending call with why, and resolves closed', async () => {
    const { socket, peer } = client();
    const calls = [peer.call('a'), peer.call('b', [1])];
    assert.equal(peer.pendingCount, 2);
    socket.closedByServer(1011, 'server exploded', false);
    for (const c of calls) {
      const e = await within(c.catch((e) => e));
      assert.ok(e instanceof ClosedError, String(e));
      assert.match(e.message, /1011.*server exploded/);
      assert.deepEqual(e.close, { code: 1011, reason: 'server exploded', wasClean: false });
    }
    assert.equal(peer.pendingCount, 0);
    assert.deepEqual(await within(peer.closed), { code: 1011, reason: 'server exploded', wasClean: false });
  });

  test('peer.close() rejects pending calls at once and clears their timers', async () => {
    const { socket, peer } = client({ timeoutMs: 20 });
    const p = peer.call('a');
    peer.close(1000, 'bye');
    const e = await within(p.catch((e) => e));
    assert.ok(e instanceof ClosedError, String(e));
    assert.match(e.message, /locally.*1000.*bye/);
    assert.equal(peer.pendingCount, 0);
    assert.deepEqual(await within(peer.closed), { code: 1000, reason: 'bye', wasClean: true });
    assert.equal(socket.readyState, 3);
  });

  test('after close: call rejects with ClosedError, notify and batch throw it, incoming is ignored', async () => {
    const { socket, peer } = client();
    peer.method('sum', (_cx, p) => p[0] + p[1]);
    peer.close();
    await within(peer.closed);
    await assert.rejects(within(peer.call('a')), ClosedError);
    assert.throws(() => peer.notify('a'), ClosedError);
    await assert.rejects(within(peer.batch().call('a').send()), ClosedError);
    assert.equal(peer.pendingCount, 0);
    await socket.expectSilence('{"jsonrpc": "2.0", "method": "sum", "params": [1, 2], "id": 1}');
    assert.deepEqual(socket.sent, []);
  });

  test('a socket in CLOSING state refuses sends instead of dropping them', async () => {
    const socket = new FakeSocket();
    const peer = new Peer(socket);
    socket.readyState = 2;
    await assert.rejects(within(peer.call('a')), ClosedError);
    assert.equal(peer.pendingCount, 0);
  });
});
