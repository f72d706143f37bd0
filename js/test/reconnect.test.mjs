// reconnecting(): backoff with full jitter, the onConnect hook, link state, calls that
// wait for the link. Over fake sockets whose "server" each test scripts.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { connect, reconnecting, backoffDelay, ClosedError, TimeoutError, RpcError, LimitError } from 'jsonrpc-peer';
import { within, fakeServer as server, linkStates as states, isState, answer } from './helpers.mjs';

describe('backoffDelay', () => {
  test('caps grow by the multiplier up to the maximum; the wait is a random part of the cap', () => {
    const b = { initialMs: 100, maxMs: 1000, multiplier: 2 };
    const top = () => 1 - Number.EPSILON;
    assert.deepEqual([0, 1, 2, 3, 4, 10, 1000].map((n) => Math.round(backoffDelay(b, n, top))), [100, 200, 400, 800, 1000, 1000, 1000]);
    assert.equal(backoffDelay(b, 3, () => 0), 0);
    assert.equal(backoffDelay(b, 2, () => 0.5), 200);
    for (let n = 0; n < 200; n++) {
      const d = backoffDelay(b, n % 8);
      assert.ok(d >= 0 && d <= Math.min(1000, 100 * 2 ** (n % 8)), `attempt ${n % 8}: ${d}`);
    }
  });

  test('defaults are the Rust Backoff\'s: 250 ms, x2, 3 s', () => {
    const top = () => 1 - Number.EPSILON;
    assert.equal(Math.round(backoffDelay(undefined, 0, top)), 250);
    assert.equal(Math.round(backoffDelay({}, 3, top)), 2000);
    assert.equal(Math.round(backoffDelay({}, 30, top)), 3000);
  });
});

describe('reconnecting', () => {
  test('connects, runs onConnect before calls go through, and reports each state', async () => {
    const s = server();
    const hooked = [];
    const link = reconnecting('ws://x/rpc', {
      WebSocket: s.WebSocket,
      onConnect: async (peer) => {
        hooked.push(peer.socket.url);
        peer.notify('subscribe', ['ticker']);
      },
    });
    const st = states(link);
    assert.deepEqual(link.state, { state: 'connecting', attempt: 0 });
    assert.equal(link.peer, null);
    const call = link.call('subtract', [42, 23]);
    const sock = await s.socket(0);
    answer(sock, (m, [a, b]) => a - b);
    assert.equal(await within(call), 19);
    assert.deepEqual(hooked, ['ws://x/rpc']);
    // The hook's notification went out first, then the call that waited for the link.
    assert.deepEqual(sock.sent.map((t) => JSON.parse(t).method), ['subscribe', 'subtract']);
    assert.deepEqual(st.seen, [{ state: 'connecting', attempt: 0 }, { state: 'connected' }]);
    assert.equal(link.peer.socket, sock);
    link.close();
  });

  test('comes back after the connection drops, with backoff, and onConnect runs again', async () => {
    const s = server(['open', 'fail', 'fail', 'open']);
    let hooks = 0;
    const link = reconnecting('ws://x/rpc', {
      WebSocket: s.WebSocket,
      backoff: { initialMs: 4, maxMs: 10, multiplier: 2 },
      random: () => 0.5,
      onConnect: () => void (hooks += 1),
    });
    const st = states(link);
    await st.until(isState('connected'), 'first connection');
    const inFlight = link.call('hang', [], { timeoutMs: 5000 });
    (await s.socket(0)).closedByServer(1006, '', false);
    const e = await within(inFlight.catch((e) => e));
    assert.ok(e instanceof ClosedError, `a call in flight when the link drops ends: ${e}`);
    // Made while the link is down: waits for the next connection.
    const waiting = link.call('subtract', [5, 3], { timeoutMs: 5000 });
    const fourth = await s.socket(3);
    answer(fourth, (m, [a, b]) => a - b);
    assert.equal(await within(waiting), 2);
    assert.equal(hooks, 2);
    assert.deepEqual(st.seen.map((x) => x.state), [
      'connecting', 'connected',
      'waiting', 'connecting', // the drop: attempt 0's wait
      'waiting', 'connecting', // socket 1 failed
      'waiting', 'connecting', // socket 2 failed
      'connected',
    ]);
    // Full jitter with random() = 0.5: half the cap, the cap doubling per failure (4, 8, 10).
    assert.deepEqual(st.seen.filter(isState('waiting')), [
      { state: 'waiting', attempt: 1, retryInMs: 2 },
      { state: 'waiting', attempt: 2, retryInMs: 4 },
      { state: 'waiting', attempt: 3, retryInMs: 5 },
    ]);
    link.close();
  });

  test('a server that accepts and closes every link at once is dialed with growing waits', async (t) => {
    // The clock (Date and the retry timer) moves only when the test moves it: each link
    // is lost 0 ms after it opened, far sooner than maxMs.
    t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
    const s = server();
    // Shedding load: every socket opens, and the server closes it at once (1013).
    class Shedding extends s.WebSocket {
      open() {
        super.open();
        setImmediate(() => this.closedByServer(1013, 'try again later', true));
      }
    }
    let hooks = 0;
    const link = reconnecting('ws://x/rpc', {
      WebSocket: Shedding,
      backoff: { initialMs: 100, maxMs: 1000, multiplier: 2 },
      random: () => 0.5,
      onConnect: () => void (hooks += 1),
    });
    const st = states(link);
    const waits = () => st.seen.filter(isState('waiting'));
    for (let n = 1; n <= 5; n++) {
      await st.until(() => waits().length >= n, `wait #${n}`);
      assert.equal(s.made.length, n, 'one dial per wait');
      if (n < 5) t.mock.timers.tick(waits()[n - 1].retryInMs); // the retry dials
    }
    assert.equal(hooks, 5, 'every link opened and onConnect ran on it');
    // Each lost link counts as one more failed attempt: the cap doubles (100, 200, 400,
    // 800, 1000), not the first wait for ever.
    assert.deepEqual(waits(), [
      { state: 'waiting', attempt: 1, retryInMs: 50 },
      { state: 'waiting', attempt: 2, retryInMs: 100 },
      { state: 'waiting', attempt: 3, retryInMs: 200 },
      { state: 'waiting', attempt: 4, retryInMs: 400 },
      { state: 'waiting', attempt: 5, retryInMs: 500 },
    ]);
    assert.equal(st.seen.filter(isState('connected')).length, 5);
    link.close();
  });

  test('a link that stayed up maxMs starts the count over when it is lost', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
    const s = server(['fail', 'fail', 'fail', 'open']);
    const link = reconnecting('ws://x/rpc', {
      WebSocket: s.WebSocket,
      backoff: { initialMs: 100, maxMs: 1000, multiplier: 2 },
      random: () => 0.5,
    });
    const st = states(link);
    const waits = () => st.seen.filter(isState('waiting'));
    // Three refused attempts: waits of 50, 100 and 200 ms; the fourth dial opens.
    for (let n = 1; n <= 3; n++) {
      await st.until(() => waits().length >= n, `wait #${n}`);
      t.mock.timers.tick(waits()[n - 1].retryInMs);
    }
    await st.until(isState('connected'), 'the fourth dial');
    assert.deepEqual(waits().map((w) => w.attempt), [1, 2, 3]);
    // Up exactly maxMs (the boundary counts as having stayed up), then lost.
    t.mock.timers.tick(1000);
    (await s.socket(3)).closedByServer(1006, '', false);
    await st.until(() => waits().length >= 4, 'the wait after the loss');
    assert.deepEqual(waits()[3], { state: 'waiting', attempt: 1, retryInMs: 50 }, 'the count starts over');
    link.close();
  });

  test('a call made while the link stays down rejects with TimeoutError after its timeout', async () => {
    const s = server(Array(1000).fill('fail'));
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, backoff: { initialMs: 5, maxMs: 5 } });
    const t0 = Date.now();
    const e = await within(link.call('sum', [1], { timeoutMs: 40 }).catch((e) => e));
    assert.ok(e instanceof TimeoutError, String(e));
    assert.match(e.message, /"sum".*40 ms/);
    // It says why: the link's state and its last failure, not only "timed out".
    assert.match(e.message, /waiting for the connection: (waiting|connecting), attempt \d+; last: .*ECONNREFUSED/);
    assert.ok(Date.now() - t0 >= 35);
    assert.ok(link.state.state === 'waiting' || link.state.state === 'connecting');
    link.close();
  });

  test('a call that times out while onConnect keeps failing says that onConnect failed', async () => {
    const s = server();
    const link = reconnecting('ws://x/rpc', {
      WebSocket: s.WebSocket,
      backoff: { initialMs: 5, maxMs: 5 },
      onConnect: () => {
        throw new RpcError(-32601, 'Method not found');
      },
      onHandlerError: () => {},
    });
    const e = await within(link.call('subtract', [42, 23], { timeoutMs: 60 }).catch((e) => e));
    assert.ok(e instanceof TimeoutError, String(e));
    assert.match(e.message, /"subtract".*60 ms \(waiting for the connection: \w+.*; last: onConnect failed: .*Method not found\)/);
    link.close();
  });

  test('no WebSocket class (Node 20 without --experimental-websocket) throws at once, saying what to pass', async () => {
    const global = Object.getOwnPropertyDescriptor(globalThis, 'WebSocket');
    delete globalThis.WebSocket;
    try {
      assert.throws(() => reconnecting('ws://127.0.0.1:1/rpc'), {
        name: 'TypeError',
        message: /no WebSocket class: pass one as the WebSocket option/,
      });
      await assert.rejects(connect('ws://127.0.0.1:1/rpc'), {
        name: 'TypeError',
        message: /no WebSocket class: pass one as the WebSocket option/,
      });
    } finally {
      if (global) Object.defineProperty(globalThis, 'WebSocket', global);
    }
  });

  test('close() stops: state stopped, waiting calls reject with ClosedError, no more dialing', async (t) => {
    // The retry waits on a clock the test moves: past the whole backoff window, a dial
    // that close() failed to stop would have happened by the time of the last check.
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const s = server(Array(1000).fill('fail'));
    const link = reconnecting('ws://x/rpc', {
      WebSocket: s.WebSocket, backoff: { initialMs: 1000, maxMs: 1000 }, random: () => 0.5,
    });
    const st = states(link);
    const waiting = link.call('sum', [1]);
    await st.until((x) => x.state === 'waiting' && x.attempt === 1, 'the first failure');
    // The clock drives the retries: past the window, the second attempt dials (and fails).
    t.mock.timers.tick(1000);
    assert.equal(s.made.length, 2, 'the retry dialed once the window passed');
    await st.until((x) => x.state === 'waiting' && x.attempt === 2, 'the second failure');
    link.close();
    const e = await within(waiting.catch((e) => e));
    assert.ok(e instanceof ClosedError, String(e));
    assert.deepEqual(link.state, { state: 'stopped' });
    await assert.rejects(within(link.call('sum', [1])), ClosedError);
    t.mock.timers.tick(10 * 1000); // ten times the largest wait
    assert.equal(s.made.length, 2, 'no socket after close');
    assert.deepEqual(link.state, { state: 'stopped' });
  });

  test('close() closes the live connection', async () => {
    const s = server();
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket });
    const st = states(link);
    await st.until(isState('connected'));
    const sock = await s.socket(0);
    link.close(1000, 'bye');
    assert.equal(sock.readyState >= 2, true);
    assert.deepEqual(link.state, { state: 'stopped' });
    assert.equal(s.made.length, 1);
  });

  test('handlers serve every connection, and an onConnect that throws closes and dials again', async () => {
    const s = server();
    let tries = 0;
    const errors = [];
    const link = reconnecting('ws://x/rpc', {
      WebSocket: s.WebSocket,
      backoff: { initialMs: 1, maxMs: 1 },
      onHandlerError: (e, where) => errors.push([e.message, where]),
      onConnect: () => {
        tries += 1;
        if (tries === 1) throw new Error('not yet');
      },
    });
    link.method('ping', () => 'pong').notification('n', () => {});
    const st = states(link);
    await st.until(isState('connected'));
    assert.equal(tries, 2);
    assert.deepEqual(errors, [['not yet', 'onConnect']]);
    assert.equal((await s.socket(0)).readyState, 3, 'the first connection was closed');
    const sock = await s.socket(1);
    assert.deepEqual(await sock.exchange('{"jsonrpc":"2.0","method":"ping","id":1}'), { jsonrpc: '2.0', result: 'pong', id: 1 });
    assert.throws(() => link.method('rpc.x', () => 1), /reserved/);
    await assert.rejects(link.call('m', 5), TypeError);
    link.close();
  });

  test('a handler gets the connection it serves as cx.peer; a name registers once', async () => {
    const s = server();
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket });
    let served;
    link.method('who', (cx, params) => ((served = cx.peer), params));
    assert.throws(() => link.method('who', () => 1), /registered twice/);
    assert.throws(() => link.notification('n', () => 1).notification('n', () => 2), /registered twice/);
    const st = states(link);
    await st.until(isState('connected'));
    const sock = await s.socket(0);
    assert.deepEqual(await sock.exchange('{"jsonrpc":"2.0","method":"who","params":[7],"id":1}'), { jsonrpc: '2.0', result: [7], id: 1 });
    assert.equal(served, link.peer);
    assert.equal(served.socket, sock);
    link.close();
  });

  test('an error answer is the call\'s RpcError, as with Peer', async () => {
    const s = server();
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket });
    const call = link.call('nope');
    const sock = await s.socket(0);
    const req = await sock.frame(0);
    sock.receive(JSON.stringify({ jsonrpc: '2.0', error: { code: -32601, message: 'Method not found' }, id: req.id }));
    const e = await within(call.catch((e) => e));
    assert.ok(e instanceof RpcError && e.code === -32601, String(e));
    link.close();
  });
});

describe('sends while the link is down (maxQueued, maxQueuedBytes)', () => {
  const limitError = (limit, value) => (e) => e instanceof LimitError && e.limit === limit && e.value === value;

  test('past the count, calls and notifications reject at once; those that waited go once the link is up', async () => {
    const s = server(['fail']);
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, maxQueued: 2, backoff: { initialMs: 1, maxMs: 1 } });
    const first = link.call('subtract', [5, 3]);
    const note = link.notify('hello');
    const e = await within(link.call('subtract', [1, 1]).catch((e) => e));
    assert.ok(limitError('maxQueued', 2)(e), String(e));
    assert.equal(e.message, 'call to "subtract" refused: 2 sends already wait for the connection (maxQueued is 2)');
    await assert.rejects(within(link.notify('bye')), limitError('maxQueued', 2));
    assert.equal(link.queuedCount, 2);
    const sock = await s.socket(1);
    answer(sock, (m, [a, b]) => a - b);
    assert.equal(await within(first), 2);
    await within(note);
    assert.deepEqual(sock.sent.map((t) => JSON.parse(t).method).sort(), ['hello', 'subtract']);
    assert.equal(link.queuedCount, 0);
    assert.equal(await within(link.call('subtract', [9, 1])), 8, 'the link is up: nothing waits');
    link.close();
  });

  test('past the bytes, sends are refused; one larger than the limit still waits alone', async () => {
    const s = server(Array(1000).fill('fail'));
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, maxQueuedBytes: 64, backoff: { initialMs: 1000, maxMs: 1000 } });
    const big = link.call('store', ['x'.repeat(100)]).catch((e) => e);
    const e = await within(link.notify('small').catch((e) => e));
    assert.ok(limitError('maxQueuedBytes', 64)(e), String(e));
    assert.match(e.message, /^notification "small" refused: 1\d\d bytes already wait for the connection \(maxQueuedBytes is 64\)$/);
    link.close();
    assert.ok((await within(big)) instanceof ClosedError);
    assert.equal(link.queuedCount, 0);
  });

  test('a wait that ends (timeout, abort) frees its place', async () => {
    const s = server(Array(1000).fill('fail'));
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, maxQueued: 1, backoff: { initialMs: 1000, maxMs: 1000 } });
    await assert.rejects(within(link.call('a', [], { timeoutMs: 20 })), TimeoutError);
    assert.equal(link.queuedCount, 0);
    const controller = new AbortController();
    const aborted = link.call('b', [], { signal: controller.signal }).catch((e) => e);
    assert.equal(link.queuedCount, 1);
    controller.abort(new Error('no'));
    assert.equal((await within(aborted)).message, 'no');
    assert.equal(link.queuedCount, 0);
    const last = link.call('c').catch((e) => e);
    assert.equal(link.queuedCount, 1, 'admitted again');
    link.close();
    assert.ok((await within(last)) instanceof ClosedError);
  });
});
