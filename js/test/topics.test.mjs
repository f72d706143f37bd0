// link.topic(): a topic followed across reconnects, resumed from its last position. Over
// fake sockets whose "server" each test scripts frame by frame, in the wire forms of the
// Rust `TopicMethods` (`subscribe [topic, {"epoch":E,"offset":K}]`).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { reconnecting, RpcError, TimeoutError, LIMITS } from 'jsonrpc-peer';
import { within, nextTurn, fakeServer, linkStates, isState } from './helpers.mjs';

/** The next call or notification of `method` sent on `sock` (earlier frames skipped). */
async function sent(sock, method) {
  sock.cursor ??= 0;
  for (let i = 0; i < 1000; i++) {
    const frame = await sock.frame(sock.cursor, 2000);
    sock.cursor += 1;
    if (frame.method === method) return frame;
  }
  throw new Error(`no ${method} among 1000 frames`);
}
const reply = (sock, id, result) => sock.receive(JSON.stringify({ jsonrpc: '2.0', result, id }));
const replyError = (sock, id, code, message) => sock.receive(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id }));
const push = (sock, method, params) => sock.receive(JSON.stringify({ jsonrpc: '2.0', method, params }));
/** A notification's params on a topic with history, its data naming its offset. */
const item = (offset) => ({ offset, data: { n: offset } });
/** Plays `prices` notifications with these offsets. */
const pushAll = (sock, offsets, topic = 'prices') => offsets.forEach((o) => push(sock, topic, item(o)));
/** Lets every frame played so far be handled (notifications run in a promise chain). */
const settle = async () => {
  await nextTurn();
  await nextTurn();
};

/**
 * A link following `topic`, and every callback it made, in order: ['data', n, offset],
 * ['missed', epoch, offset], ['subscribed', recovered, from], ['failed', message].
 */
function follow(options = {}, topicOptions = {}, topic = 'prices') {
  const s = fakeServer(options.plan);
  const errors = [];
  const link = reconnecting('ws://x/rpc', {
    WebSocket: s.WebSocket,
    backoff: { initialMs: 1, maxMs: 1 },
    onHandlerError: (e, where) => errors.push([where, e.message]),
    ...options.link,
  });
  const events = [];
  const follower = link.topic(topic, {
    onData: (data, info) => {
      assert.equal(info.topic, topic);
      events.push(['data', data?.n ?? data, info.offset]);
    },
    onMissed: (info) => events.push(['missed', info.epoch, info.offset]),
    onSubscribed: (sub) => events.push(['subscribed', sub.recovered, sub.from]),
    onFailed: (e, t) => events.push(['failed', `${t}: ${e.message}`]),
    ...topicOptions,
  });
  return { s, link, follower, events, errors, states: linkStates(link) };
}

/** The data offsets handed over, in order. */
const data = (events) => events.filter((e) => e[0] === 'data').map((e) => e[2]);

describe('link.topic(): following a topic with history', () => {
  test('the first subscribe has no position; data alone, in offset order, duplicates dropped', async () => {
    const { s, link, follower, events } = follow();
    const sock = await s.socket(0);
    const sub = await sent(sock, 'subscribe');
    assert.deepEqual(sub.params, ['prices']);
    reply(sock, sub.id, { epoch: 'e1', offset: 5 });
    await settle();
    pushAll(sock, [6, 7, 7, 6, 8]);
    await settle();
    assert.deepEqual(events, [
      ['subscribed', undefined, null],
      ['data', 6, 6], ['data', 7, 7], ['data', 8, 8],
    ]);
    assert.deepEqual(follower.position, { epoch: 'e1', offset: 8 });
    link.close();
  });

  test('after the link drops it subscribes from its last position; what came before the answer waits for it', async () => {
    const { s, link, follower, events, states } = follow();
    const first = await s.socket(0);
    reply(first, (await sent(first, 'subscribe')).id, { epoch: 'e1', offset: 0 });
    await settle();
    pushAll(first, [1, 2, 3]);
    await settle();
    first.closedByServer(1006, '', false); // no close handshake
    const second = await s.socket(1);
    const sub = await sent(second, 'subscribe');
    assert.deepEqual(sub.params, ['prices', { epoch: 'e1', offset: 3 }]);
    // The replay comes before the answer (with two it already has), then a live one.
    pushAll(second, [2, 3, 4, 5]);
    await settle();
    assert.deepEqual(data(events), [1, 2, 3], 'held until the answer says they continue offset 3');
    assert.equal(link.state.state, 'connecting', 'not connected before the topic is subscribed');
    reply(second, sub.id, { epoch: 'e1', offset: 5, recovered: true });
    await settle();
    pushAll(second, [6]);
    await settle();
    assert.deepEqual(data(events), [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(events.filter((e) => e[0] !== 'data'), [
      ['subscribed', undefined, null],
      ['subscribed', true, { epoch: 'e1', offset: 3 }],
    ]);
    assert.deepEqual(follower.position, { epoch: 'e1', offset: 6 });
    await states.until(isState('connected'));
    link.close();
  });

  test('recovered:false is missed, with the position live data continues from', async () => {
    const { s, link, follower, events } = follow();
    const first = await s.socket(0);
    reply(first, (await sent(first, 'subscribe')).id, { epoch: 'e1', offset: 10 });
    await settle();
    pushAll(first, [11]);
    await settle();
    first.closedByServer(1006, '', false);
    const second = await s.socket(1);
    const sub = await sent(second, 'subscribe');
    assert.deepEqual(sub.params, ['prices', { epoch: 'e1', offset: 11 }]);
    // A new process: its epoch is another, and its offsets start again. One live
    // publication (3) overtakes the answer; 2 is older than the answer's position.
    push(second, 'prices', item(2));
    push(second, 'prices', item(3));
    reply(second, sub.id, { epoch: 'e2', offset: 2, recovered: false });
    await settle();
    pushAll(second, [4]);
    await settle();
    assert.deepEqual(events.slice(2), [
      ['subscribed', false, { epoch: 'e1', offset: 11 }],
      ['missed', 'e2', 2],
      ['data', 3, 3], ['data', 4, 4],
    ]);
    assert.deepEqual(follower.position, { epoch: 'e2', offset: 4 });
    link.close();
  });

  test('offsets that jump are reported as missed before the data after the gap', async () => {
    const { s, link, events } = follow();
    const sock = await s.socket(0);
    reply(sock, (await sent(sock, 'subscribe')).id, { epoch: 'e1', offset: 0 });
    await settle();
    pushAll(sock, [1, 2, 5, 6]);
    await settle();
    assert.deepEqual(events.slice(1), [['data', 1, 1], ['data', 2, 2], ['missed', 'e1', 4], ['data', 5, 5], ['data', 6, 6]]);
    link.close();
  });

  test('from: the first subscribe resumes a position kept from before', async () => {
    const { s, link, events } = follow({}, { from: { epoch: 'e9', offset: 41 } });
    const sock = await s.socket(0);
    const sub = await sent(sock, 'subscribe');
    assert.deepEqual(sub.params, ['prices', { epoch: 'e9', offset: 41 }]);
    pushAll(sock, [42]);
    reply(sock, sub.id, { epoch: 'e9', offset: 42, recovered: true });
    await settle();
    assert.deepEqual(events, [['subscribed', true, { epoch: 'e9', offset: 41 }], ['data', 42, 42]]);
    link.close();
  });

  test('method and params are configurable; the answer is read the same', async () => {
    const { s, link, events } = follow({}, {
      method: 'feed.join',
      params: (topic, from) => ({ name: topic, after: from }),
    });
    const first = await s.socket(0);
    const sub = await sent(first, 'feed.join');
    assert.deepEqual(sub.params, { name: 'prices', after: null });
    reply(first, sub.id, { epoch: 'e1', offset: 7 });
    await settle();
    pushAll(first, [8]);
    await settle();
    first.closedByServer(1006, '', false);
    const second = await s.socket(1);
    const again = await sent(second, 'feed.join');
    assert.deepEqual(again.params, { name: 'prices', after: { epoch: 'e1', offset: 8 } });
    link.close();
    assert.deepEqual(data(events), [8]);
  });
});

describe('link.topic(): failures and bounds', () => {
  test('an error answer is onFailed; the link stays up and subscribes again on the next connection', async () => {
    const { s, link, events, states } = follow();
    const first = await s.socket(0);
    replyError(first, (await sent(first, 'subscribe')).id, -32602, 'no topic `prices`');
    await states.until(isState('connected'), 'connected despite the refusal');
    pushAll(first, [1]); // not subscribed on this connection: not handed over
    await settle();
    assert.equal(events.length, 1);
    assert.equal(events[0][0], 'failed');
    assert.match(events[0][1], /^prices: no topic `prices`$/);
    first.closedByServer(1006, '', false);
    const second = await s.socket(1);
    const sub = await sent(second, 'subscribe');
    assert.deepEqual(sub.params, ['prices']);
    reply(second, sub.id, { epoch: 'e1', offset: 0 });
    await settle();
    pushAll(second, [1]);
    await settle();
    assert.deepEqual(data(events), [1]);
    link.close();
  });

  test('the failure is an RpcError; an answer that is no subscription fails too', async () => {
    const failures = [];
    const { s, link } = follow({}, { onFailed: (e) => failures.push(e) });
    const first = await s.socket(0);
    replyError(first, (await sent(first, 'subscribe')).id, 7, 'seven');
    await settle();
    first.closedByServer(1006, '', false);
    const second = await s.socket(1);
    reply(second, (await sent(second, 'subscribe')).id, { offset: 'x' });
    await settle();
    assert.ok(failures[0] instanceof RpcError && failures[0].code === 7, String(failures[0]));
    assert.match(failures[1].message, /answered \{"offset":"x"\}: neither \{epoch, offset\} nor a boolean/);
    link.close();
  });

  test('no answer in time: onFailed with TimeoutError, the connection is closed, the next one subscribes', async () => {
    const failures = [];
    const { s, link } = follow({}, { timeoutMs: 30, onFailed: (e) => failures.push(e) });
    const first = await s.socket(0);
    await sent(first, 'subscribe'); // never answered
    const second = await s.socket(1);
    assert.ok(failures[0] instanceof TimeoutError, String(failures[0]));
    assert.equal(first.readyState, 3, 'the first connection was closed');
    assert.deepEqual((await sent(second, 'subscribe')).params, ['prices']);
    link.close();
  });

  test('a connection that drops while the subscribe waits is no failure: the next resumes the same position', async () => {
    const { s, link, events } = follow();
    const first = await s.socket(0);
    reply(first, (await sent(first, 'subscribe')).id, { epoch: 'e1', offset: 3 });
    await settle();
    first.closedByServer(1006, '', false);
    const second = await s.socket(1);
    await sent(second, 'subscribe');
    pushAll(second, [4]); // held, then lost with the connection
    second.closedByServer(1006, '', false);
    const third = await s.socket(2);
    const sub = await sent(third, 'subscribe');
    assert.deepEqual(sub.params, ['prices', { epoch: 'e1', offset: 3 }]);
    pushAll(third, [4]);
    reply(third, sub.id, { epoch: 'e1', offset: 4, recovered: true });
    await settle();
    assert.deepEqual(events.filter((e) => e[0] === 'failed'), []);
    assert.deepEqual(data(events), [4]);
    link.close();
  });

  /**
   * The second connection's server sends `flood` before the subscribe answer, past a
   * bound of `topicOptions`: the position is given up (no memory held), the connection
   * closed with 4008 naming the bound, and the third subscribes afresh and says missed.
   */
  async function pastTheBound(topicOptions, flood, bound) {
    const { s, link, events } = follow({}, topicOptions);
    const first = await s.socket(0);
    reply(first, (await sent(first, 'subscribe')).id, { epoch: 'e1', offset: 0 });
    await settle();
    pushAll(first, [1]);
    await settle();
    first.closedByServer(1006, '', false);
    const second = await s.socket(1);
    let closed;
    second.addEventListener('close', (ev) => (closed = ev));
    const sub = await sent(second, 'subscribe');
    assert.deepEqual(sub.params, ['prices', { epoch: 'e1', offset: 1 }]);
    flood(second);
    await settle();
    assert.equal(closed?.code, 4008);
    assert.equal(closed?.reason, `resume backlog over ${bound}`);
    reply(second, sub.id, { epoch: 'e1', offset: 7, recovered: true }); // too late: gone
    const third = await s.socket(2);
    const fresh = await sent(third, 'subscribe');
    assert.deepEqual(fresh.params, ['prices'], 'the position was given up');
    reply(third, fresh.id, { epoch: 'e1', offset: 9 });
    await settle();
    pushAll(third, [10]);
    await settle();
    assert.deepEqual(events.slice(2), [['subscribed', undefined, null], ['missed', 'e1', 9], ['data', 10, 10]]);
    link.close();
  }

  test('past maxHeld before the answer: the position is given up (no memory held), reconnect, missed', async () => {
    // The 4th is one more than it holds.
    await pastTheBound({ maxHeld: 3 }, (sock) => pushAll(sock, [2, 3, 4, 5, 6, 7]), 'maxHeld');
  });

  test('past maxHeldBytes before the answer: the same, however few they are', async () => {
    // Three of about 1 KiB each, well under maxHeld: the third is past 3,000.
    const big = 'x'.repeat(1000);
    const flood = (sock) => [2, 3, 4].forEach((offset) => push(sock, 'prices', { offset, data: big }));
    await pastTheBound({ maxHeld: 100, maxHeldBytes: 3000 }, flood, 'maxHeldBytes');
  });

  test('the default maxHeld is LIMITS.maxHeld; a bad one throws at once', () => {
    assert.equal(LIMITS.maxHeld, 10000);
    const link = reconnecting('ws://x/rpc', { WebSocket: fakeServer(['fail']).WebSocket });
    assert.throws(() => link.topic('a', { maxHeld: -1 }), /maxHeld must be a number from 0 up/);
    assert.throws(() => link.topic('b', { from: { epoch: 'e', offset: -2 } }), TypeError);
    assert.throws(() => link.topic('c', { onData: 5 }), /"onData" must be a function/);
    link.close();
  });

  test('a notification that is not {offset, data} is onFailed and skipped', async () => {
    const { s, link, events } = follow();
    const sock = await s.socket(0);
    reply(sock, (await sent(sock, 'subscribe')).id, { epoch: 'e1', offset: 0 });
    await settle();
    push(sock, 'prices', { price: 3 });
    pushAll(sock, [1]);
    await settle();
    assert.equal(events[1][0], 'failed');
    assert.match(events[1][1], /^prices: a "prices" notification is not \{"offset":N,"data":\.\.\.\}: \{"price":3\}$/);
    assert.deepEqual(data(events), [1]);
    link.close();
  });

  test('a callback that throws reaches onHandlerError; later data still arrives', async () => {
    let n = 0;
    const { s, link, errors } = follow({}, {
      onData: () => {
        n += 1;
        if (n === 1) throw new Error('page broke');
      },
    });
    const sock = await s.socket(0);
    reply(sock, (await sent(sock, 'subscribe')).id, { epoch: 'e1', offset: 0 });
    await settle();
    pushAll(sock, [1, 2]);
    await settle();
    assert.equal(n, 2);
    assert.deepEqual(errors, [['topic "prices" onData', 'page broke']]);
    link.close();
  });
});

describe('link.topic(): without history, gaps, and the link', () => {
  test('a topic without history (the answer is a boolean): params are the data; a reconnect is missed', async () => {
    const { s, link, follower, events } = follow();
    const first = await s.socket(0);
    reply(first, (await sent(first, 'subscribe')).id, true);
    await settle();
    push(first, 'prices', { n: 'a' });
    await settle();
    first.closedByServer(1006, '', false);
    const second = await s.socket(1);
    const sub = await sent(second, 'subscribe');
    assert.deepEqual(sub.params, ['prices'], 'no position to give');
    push(second, 'prices', { n: 'b' });
    reply(second, sub.id, true);
    await settle();
    assert.deepEqual(events, [
      ['subscribed', undefined, null], ['data', 'a', 0],
      ['subscribed', undefined, null], ['missed', '', 0], ['data', 'b', 0],
    ]);
    assert.equal(follower.position, null);
    link.close();
  });

  test('$/gap with a new epoch is missed, and the data after it (offsets starting again) arrives', async () => {
    const gaps = [];
    const { s, link, follower, events } = follow();
    link.notification('$/gap', (cx, p) => void gaps.push(p)); // the application's own handler still runs
    const sock = await s.socket(0);
    reply(sock, (await sent(sock, 'subscribe')).id, { epoch: 'e1', offset: 40 });
    await settle();
    pushAll(sock, [41]);
    push(sock, '$/gap', { topic: 'prices', epoch: 'e2', offset: 0 });
    push(sock, '$/gap', { topic: 'other', epoch: 'e7', offset: 3 }); // not ours
    pushAll(sock, [1, 2]);
    await settle();
    assert.deepEqual(events.slice(1), [['data', 41, 41], ['missed', 'e2', 0], ['data', 1, 1], ['data', 2, 2]]);
    assert.deepEqual(follower.position, { epoch: 'e2', offset: 2 });
    assert.equal(gaps.length, 2);
    link.close();
  });

  test('a gap before the subscribe answer waits in order with the data', async () => {
    const { s, link, events } = follow();
    const sock = await s.socket(0);
    const sub = await sent(sock, 'subscribe');
    push(sock, '$/gap', { topic: 'prices', epoch: 'e2', offset: 5 });
    pushAll(sock, [6]);
    reply(sock, sub.id, { epoch: 'e1', offset: 3 });
    await settle();
    assert.deepEqual(events, [['subscribed', undefined, null], ['missed', 'e2', 5], ['data', 6, 6]]);
    link.close();
  });

  test('subscribes before onConnect runs and before calls that wait go through', async () => {
    const order = [];
    const { s, link } = follow({ link: { onConnect: (peer) => peer.notify('hello') } });
    const pending = link.call('sum', [1, 2]);
    const sock = await s.socket(0);
    const sub = await sent(sock, 'subscribe');
    await settle();
    order.push(...sock.sent.map((t) => JSON.parse(t).method));
    reply(sock, sub.id, { epoch: 'e1', offset: 0 });
    const sum = await sent(sock, 'sum');
    order.push(...sock.sent.slice(1).map((t) => JSON.parse(t).method));
    reply(sock, sum.id, 3);
    assert.equal(await within(pending), 3);
    assert.deepEqual(order, ['subscribe', 'hello', 'sum']);
    link.close();
  });

  test('a topic followed while connected subscribes at once; stop() unsubscribes and it stays stopped', async () => {
    const s = fakeServer();
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, backoff: { initialMs: 1, maxMs: 1 } });
    await linkStates(link).until(isState('connected'));
    const first = await s.socket(0);
    const got = [];
    const follower = link.topic('news', { onData: (d) => got.push(d) });
    const sub = await sent(first, 'subscribe');
    assert.deepEqual(sub.params, ['news']);
    reply(first, sub.id, { epoch: 'e1', offset: 0 });
    await settle();
    push(first, 'news', { offset: 1, data: 'one' });
    await settle();
    follower.stop();
    assert.ok(follower.stopped);
    assert.deepEqual((await sent(first, 'unsubscribe')).params, ['news']);
    push(first, 'news', { offset: 2, data: 'two' });
    await settle();
    first.closedByServer(1006, '', false);
    const second = await s.socket(1);
    await linkStates(link).until(() => link.peer?.socket === second, 'the second connection up');
    assert.deepEqual(second.sent, [], 'not subscribed again');
    assert.deepEqual(got, ['one']);
    // The name is free again.
    link.topic('news');
    link.close();
  });

  test('a name is followed once, never beside its own notification handler, never rpc.*', () => {
    const link = reconnecting('ws://x/rpc', { WebSocket: fakeServer(['fail']).WebSocket });
    link.topic('prices');
    assert.throws(() => link.topic('prices'), /followed twice/);
    assert.throws(() => link.notification('prices', () => {}), /followed topic/);
    link.notification('news', () => {});
    assert.throws(() => link.topic('news'), /already has a notification handler/);
    assert.throws(() => link.topic('rpc.x'), /reserved/);
    assert.throws(() => link.topic('$/gap'), /gap notification/);
    link.close();
  });
});
