// Serving calls: handler results and failures, reserved names, and two peers calling
// each other (nested calls from inside handlers).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Peer, RpcError, ErrorCode, ClosedError } from 'jsonrpc-peer';
import { FakeSocket, socketPair, within, signal } from './helpers.mjs';

function server(options = {}) {
  const socket = new FakeSocket();
  return { socket, peer: new Peer(socket, { onHandlerError: () => {}, ...options }) };
}

const req = (method, params, id = 1) =>
  JSON.stringify(params === undefined ? { jsonrpc: '2.0', method, id } : { jsonrpc: '2.0', method, params, id });

describe('handler outcomes', () => {
  test('sync and async return values are the result; (cx, params) are passed, cx.peer the peer', async () => {
    const { socket, peer } = server();
    let seenPeer;
    peer.method('sync', (cx, p) => { seenPeer = cx.peer; return { got: p }; });
    peer.method('async', async (_cx, p) => { await new Promise((r) => setTimeout(r, 5)); return p.length; });
    peer.method('noparams', (_cx, p) => (p === undefined ? 'absent' : 'present'));
    assert.deepEqual(await socket.exchange(req('sync', { a: 1 })), { jsonrpc: '2.0', result: { got: { a: 1 } }, id: 1 });
    assert.equal(seenPeer, peer);
    assert.deepEqual(await socket.exchange(req('async', [1, 2, 3], 2)), { jsonrpc: '2.0', result: 3, id: 2 });
    assert.deepEqual(await socket.exchange(req('noparams', undefined, 3)), { jsonrpc: '2.0', result: 'absent', id: 3 });
  });

  test('returning undefined answers result null (the member is required)', async () => {
    const { socket, peer } = server();
    peer.method('nothing', () => {});
    assert.deepEqual(await socket.exchange(req('nothing')), { jsonrpc: '2.0', result: null, id: 1 });
  });

  test('throwing RpcError answers with it, data included only when given', async () => {
    const { socket, peer } = server();
    peer.method('custom', () => { throw new RpcError(-32000, 'Out of cheese', { need: 3 }); });
    peer.method('params', async () => { throw new RpcError(ErrorCode.INVALID_PARAMS); });
    assert.deepEqual(await socket.exchange(req('custom')), {
      jsonrpc: '2.0', error: { code: -32000, message: 'Out of cheese', data: { need: 3 } }, id: 1,
    });
    assert.deepEqual(await socket.exchange(req('params', [], 'p')), {
      jsonrpc: '2.0', error: { code: -32602, message: 'Invalid params' }, id: 'p',
    });
  });

  test('any other throw answers -32603 Internal error, no internals leaked, hook told', async () => {
    const failures = [];
    const { socket, peer } = server({ onHandlerError: (e, m) => failures.push([m, e.message]) });
    peer.method('sync_throw', () => { throw new Error('secret path /etc/x'); });
    peer.method('async_throw', async () => { throw new TypeError('nope'); });
    peer.method('throw_string', () => { throw 'a string'; });
    for (const m of ['sync_throw', 'async_throw', 'throw_string']) {
      assert.deepEqual(await socket.exchange(req(m, [], m)), {
        jsonrpc: '2.0', error: { code: -32603, message: 'Internal error' }, id: m,
      });
    }
    assert.deepEqual(failures.slice(0, 2), [['sync_throw', 'secret path /etc/x'], ['async_throw', 'nope']]);
    assert.equal(failures.length, 3);
  });

  test('a result JSON cannot carry becomes -32603', async () => {
    const { socket, peer } = server();
    peer.method('bigint', () => 10n);
    peer.method('cycle', () => { const o = {}; o.o = o; return o; });
    for (const m of ['bigint', 'cycle']) {
      assert.deepEqual(await socket.exchange(req(m, [], m)), {
        jsonrpc: '2.0', error: { code: -32603, message: 'Internal error' }, id: m,
      });
    }
  });

  test('requests run concurrently: a slow handler does not hold up a fast one', async () => {
    const { socket, peer } = server();
    let release;
    peer.method('slow', () => new Promise((r) => (release = r)));
    peer.method('fast', () => 'fast');
    socket.receive(req('slow', [], 'slow'));
    assert.deepEqual(await socket.exchange(req('fast', [], 'fast')), { jsonrpc: '2.0', result: 'fast', id: 'fast' });
    release('slow');
    assert.deepEqual(await socket.frame(1), { jsonrpc: '2.0', result: 'slow', id: 'slow' });
  });

  test('a notification runs a method of the same name and drops its answer; a notification handler comes first', async () => {
    const { socket, peer } = server();
    const ran = [];
    const first = signal();
    peer.method('log', (_cx, p) => { ran.push(['method', p]); first.resolve(); return 'dropped'; });
    await socket.expectSilence('{"jsonrpc": "2.0", "method": "log", "params": ["hi"]}');
    await within(first.promise, 1000, 'the method run by a notification');
    assert.deepEqual(ran, [['method', ['hi']]]);
    peer.notification('log', (_cx, p) => ran.push(['notification', p]));
    await socket.expectSilence('{"jsonrpc": "2.0", "method": "log", "params": ["again"]}');
    assert.deepEqual(await socket.exchange(req('log', ['call'])), { jsonrpc: '2.0', result: 'dropped', id: 1 });
    assert.deepEqual(ran, [['method', ['hi']], ['notification', ['again']], ['method', ['call']]]);
  });

  test('a method run by a notification that throws reaches onHandlerError, and nothing is sent', async () => {
    const failed = signal();
    const socket = new FakeSocket();
    const peer = new Peer(socket, { onHandlerError: (e, m) => failed.resolve([e.message, m]) });
    peer.method('save', () => { throw new Error('disk full'); });
    await socket.expectSilence('{"jsonrpc": "2.0", "method": "save", "params": [1]}');
    assert.deepEqual(await within(failed.promise), ['disk full', 'save']);
  });
});

describe('the handler context', () => {
  test('a method gets cx first: peer, a signal, progress; a notification the same shape', async () => {
    const { socket, peer } = server();
    const seen = {};
    const done = signal();
    peer.method('m', (cx, params) => {
      seen.method = { peer: cx.peer === peer, aborted: cx.signal.aborted, wants: cx.wantsProgress, params };
      return 'ok';
    });
    peer.notification('n', (cx, params) => {
      seen.notification = { peer: cx.peer === peer, aborted: cx.signal.aborted, wants: cx.wantsProgress, sent: cx.progress(1), params };
      done.resolve();
    });
    assert.deepEqual(await socket.exchange(req('m', [1])), { jsonrpc: '2.0', result: 'ok', id: 1 });
    await socket.expectSilence('{"jsonrpc":"2.0","method":"n","params":{"x":2}}');
    await within(done.promise);
    assert.deepEqual(seen, {
      method: { peer: true, aborted: false, wants: false, params: [1] },
      notification: { peer: true, aborted: false, wants: false, sent: false, params: { x: 2 } },
    });
    assert.equal(peer.runningCount, 0);
  });

  test('a method run by a notification gets a context too: it can call back, progress sends nothing', async () => {
    const [sa, sb] = socketPair();
    const a = new Peer(sa);
    const b = new Peer(sb);
    const got = signal();
    b.method('pong', (_cx, p) => got.resolve(p));
    a.method('ping', async (cx, [n]) => {
      assert.equal(cx.progress('x'), false);
      cx.peer.notify('pong', [n + 1]);
    });
    b.notify('ping', [1]);
    assert.deepEqual(await within(got.promise), [2]);
    assert.ok(sa.sent.every((t) => JSON.parse(t).method === 'pong'), sa.sent.join(' | '));
  });
});

describe('registration', () => {
  test('names beginning with rpc. are reserved', () => {
    const { peer } = server();
    assert.throws(() => peer.method('rpc.discover', () => 1), /reserved/);
    assert.throws(() => peer.notification('rpc.x', () => 1), /reserved/);
    peer.method('rpcish', () => 1); // only the "rpc." prefix is reserved
    peer.method('my.rpc.thing', () => 1);
  });

  test('registering a name twice throws; a method and a notification may share one', () => {
    const { peer } = server();
    peer.method('v', () => 1).notification('v', () => {});
    assert.throws(() => peer.method('v', () => 2), /registered twice/);
    assert.throws(() => peer.notification('v', () => {}), /registered twice/);
  });

  test('a name must be a string and a handler a function', () => {
    const { peer } = server();
    assert.throws(() => peer.method(1, () => 1), TypeError);
    assert.throws(() => peer.method('x'), TypeError);
    assert.throws(() => peer.notification('x', 'nope'), TypeError);
  });

  test('calling an rpc. method on the other side is allowed', async () => {
    const { socket, peer } = server();
    const p = peer.call('rpc.discover', undefined, { timeoutMs: 0 });
    assert.equal((await socket.frame(0)).method, 'rpc.discover');
    peer.close();
    await assert.rejects(within(p), ClosedError);
  });
});

describe('two peers wired to each other', () => {
  function wired() {
    const [sa, sb] = socketPair();
    const a = new Peer(sa, { timeoutMs: 2000 });
    const b = new Peer(sb, { timeoutMs: 2000 });
    return { a, b, sa, sb };
  }

  test('calls, errors and notifications both ways', async () => {
    const { a, b } = wired();
    a.method('subtract', (_cx, [x, y]) => x - y);
    b.method('sum', (_cx, p) => p.reduce((s, n) => s + n, 0));
    const got = [];
    const hello = signal();
    a.notification('hello', (_cx, p) => { got.push(p); hello.resolve(); });
    assert.equal(await within(b.call('subtract', [42, 23])), 19);
    assert.equal(await within(a.call('sum', [1, 2, 4])), 7);
    await assert.rejects(within(a.call('nope')), (e) => e instanceof RpcError && e.code === -32601);
    b.notify('hello', { n: 1 });
    await within(hello.promise);
    assert.deepEqual(got, [{ n: 1 }]);
    assert.equal(a.pendingCount + b.pendingCount, 0);
  });

  test('a handler that calls back through the peer (nested, three levels)', async () => {
    const { a, b, sa } = wired();
    // server-style: "ask" calls back into the caller before answering
    a.method('ask', async ({ peer }, params) => {
      const t0 = Date.now();
      const answer = await peer.call('describe', { depth: params.depth });
      return { asked: 'describe', answer, elapsed_ms: Date.now() - t0 };
    });
    b.method('describe', async ({ peer }, { depth }) => {
      // and the callee calls back again while the outer call is still pending
      const inner = depth > 0 ? await peer.call('ping', [depth]) : null;
      return { depth, inner };
    });
    a.method('ping', (_cx, [n]) => `pong ${n}`);
    const out = await within(b.call('ask', { depth: 1 }));
    assert.equal(out.asked, 'describe');
    assert.deepEqual(out.answer, { depth: 1, inner: 'pong 1' });
    assert.equal(typeof out.elapsed_ms, 'number');
    assert.equal(a.pendingCount + b.pendingCount, 0);
    // the ids crossing the wire in each direction are each side's own counter
    assert.ok(sa.sent.some((t) => JSON.parse(t).method === 'describe'));
  });

  test('batches both ways, with a failing member', async () => {
    const { a, b } = wired();
    b.method('sum', (_cx, p) => p.reduce((s, n) => s + n, 0)).method('get_data', () => ['hello', 5]);
    b.method('fail', () => { throw new RpcError(42, 'failed on purpose'); });
    const out = await within(
      a.batch().call('sum', [1, 2, 4]).notify('whatever').call('fail').call('get_data').call('missing').send(),
    );
    assert.deepEqual(out[0], { ok: true, result: 7 });
    assert.equal(out[1].error.code, 42);
    assert.equal(out[1].error.message, 'failed on purpose');
    assert.deepEqual(out[2], { ok: true, result: ['hello', 5] });
    assert.equal(out[3].error.code, -32601);
  });

  test('closing one side rejects the other side\'s pending calls, nested or not', async () => {
    const { a, b } = wired();
    const entered = signal();
    a.method('hang', () => { entered.resolve(); return new Promise(() => {}); });
    const pending = b.call('hang');
    await within(entered.promise);
    assert.equal(b.pendingCount, 1);
    a.close(1001, 'page hidden');
    await assert.rejects(within(pending), /closed.*1001.*page hidden/);
    assert.deepEqual(await within(b.closed), { code: 1001, reason: 'page hidden', wasClean: true });
    assert.equal(b.pendingCount, 0);
  });
});
