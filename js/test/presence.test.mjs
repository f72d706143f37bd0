// link.topic(name, {info, presence: true}): a topic's presence in the browser peer. Over
// fake sockets whose "server" each test scripts frame by frame, in the wire forms of the
// Rust `TopicMethods::presence` and `cluster_node`: `subscribe [topic, position_or_null,
// info]`, `presence [topic]`, `presence_count [topic]`, and the notifications
// `presence.join` / `presence.leave` with `{"topic","addr","info"}`.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { reconnecting, PRESENCE_JOIN, PRESENCE_LEAVE } from 'jsonrpc-peer';
import { nextTurn, fakeServer, linkStates, isState } from './helpers.mjs';

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
const push = (sock, method, params) => sock.receive(JSON.stringify({ jsonrpc: '2.0', method, params }));
const settle = async () => {
  await nextTurn();
  await nextTurn();
};
const ana = { addr: 'a/1', info: { user: 'ana' } };
const ben = { addr: 'b/7', info: { user: 'ben' } };
const cat = { addr: 'b/9', info: { user: 'cat' } };
const change = (m, topic = 'chat') => ({ topic, addr: m.addr, info: m.info });
/** The members' addrs, sorted: what a page lists. */
const addrs = (members) => members.map((m) => m.addr).sort();

/** A link following `chat` with these topic options; every callback, in order. */
function follow(topicOptions = {}) {
  const s = fakeServer();
  const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket, backoff: { initialMs: 1, maxMs: 1 } });
  const events = [];
  const follower = link.topic('chat', {
    onJoin: (c) => events.push(['join', c.addr, c.info]),
    onLeave: (c) => events.push(['leave', c.addr, c.info]),
    onPresence: (members) => events.push(['members', addrs(members)]),
    onFailed: (e) => events.push(['failed', e.message]),
    ...topicOptions,
  });
  return { s, link, follower, events, states: linkStates(link) };
}

describe('link.topic(): presence', () => {
  test('info joins: subscribe [topic, null, info], no presence read without presence: true', async () => {
    const { s, link, follower, events, states } = follow({ info: { user: 'ana' } });
    const sock = await s.socket(0);
    const sub = await sent(sock, 'subscribe');
    assert.deepEqual(sub.params, ['chat', null, { user: 'ana' }]);
    reply(sock, sub.id, true);
    await states.until(isState('connected'));
    assert.equal(follower.members, null, 'members are kept only with presence: true');
    assert.deepEqual(events, []);
    // The calls are there all the same, in their wire forms.
    const listed = follower.presence();
    const call = await sent(sock, 'presence');
    assert.deepEqual(call.params, ['chat']);
    reply(sock, call.id, [ana, ben]);
    assert.deepEqual(await listed, [ana, ben]);
    const counted = follower.presenceCount();
    const count = await sent(sock, 'presence_count');
    assert.deepEqual(count.params, ['chat']);
    reply(sock, count.id, 2);
    assert.equal(await counted, 2);
    link.close();
  });

  test('presence: true asks for the events, reads the members once, then keeps them live', async () => {
    const { s, link, follower, events, states } = follow({ info: () => ({ user: 'ana' }), presence: true });
    const sock = await s.socket(0);
    const sub = await sent(sock, 'subscribe');
    assert.deepEqual(sub.params, ['chat', null, { user: 'ana', presence: true }]);
    reply(sock, sub.id, true);
    const read = await sent(sock, 'presence');
    assert.deepEqual(read.params, ['chat']);
    // A join and a leave arrive before the read's answer: told at once, applied on it.
    push(sock, PRESENCE_JOIN, change(cat));
    push(sock, PRESENCE_LEAVE, change(ben));
    await settle();
    assert.equal(follower.members, null);
    reply(sock, read.id, [ana, ben]); // read before cat came and ben went
    await states.until(isState('connected'));
    assert.deepEqual(addrs(follower.members), ['a/1', 'b/9']);
    push(sock, 'presence.join', change(ben));
    push(sock, 'presence.join', change({ addr: 'c/1', info: 'x' }, 'other')); // another topic's
    push(sock, 'presence.leave', change(cat));
    await settle();
    assert.deepEqual(events, [
      ['join', 'b/9', { user: 'cat' }],
      ['leave', 'b/7', { user: 'ben' }],
      ['members', ['a/1', 'b/9']],
      ['join', 'b/7', { user: 'ben' }],
      ['members', ['a/1', 'b/7', 'b/9']],
      ['leave', 'b/9', { user: 'cat' }],
      ['members', ['a/1', 'b/7']],
    ]);
    assert.deepEqual(follower.members, [ana, ben].sort((x, y) => (x.addr < y.addr ? -1 : 1)));
    link.close();
  });

  test('after a reconnect the members are read again: who left meanwhile is gone, no event twice', async () => {
    const { s, link, follower, events } = follow({ info: { user: 'ana' }, presence: true });
    const first = await s.socket(0);
    reply(first, (await sent(first, 'subscribe')).id, true);
    reply(first, (await sent(first, 'presence')).id, [ana, ben, cat]);
    await settle();
    first.closedByServer(1006, '', false);
    // A change on the old connection after it is gone is not applied.
    const second = await s.socket(1);
    push(first, 'presence.leave', change(ben));
    const sub = await sent(second, 'subscribe');
    assert.deepEqual(sub.params, ['chat', null, { user: 'ana', presence: true }]);
    reply(second, sub.id, true);
    reply(second, (await sent(second, 'presence')).id, [{ addr: 'a/2', info: ana.info }, cat]);
    await settle();
    assert.deepEqual(addrs(follower.members), ['a/2', 'b/9']);
    assert.deepEqual(events, [['members', ['a/1', 'b/7', 'b/9']], ['members', ['a/2', 'b/9']]]);
    link.close();
  });

  test('bad input: options refused at once, malformed changes and answers reported, not applied', async () => {
    const s = fakeServer();
    const link = reconnecting('ws://x/rpc', { WebSocket: s.WebSocket });
    assert.throws(() => link.topic('a', { presence: 'yes' }), /"presence" must be a boolean/);
    assert.throws(() => link.topic('b', { presence: true, info: 'ana' }), /"info" must be an object/);
    assert.throws(() => link.topic('c', { onJoin: 1 }), /"onJoin" must be a function/);
    link.close();

    const { s: s2, link: link2, follower, events } = follow({ presence: true });
    const sock = await s2.socket(0);
    const sub = await sent(sock, 'subscribe');
    assert.deepEqual(sub.params, ['chat', null, { presence: true }], 'no info: joins with {}');
    reply(sock, sub.id, true);
    reply(sock, (await sent(sock, 'presence')).id, [ana]);
    await settle();
    push(sock, 'presence.join', { topic: 'chat', info: 1 }); // no addr
    await settle();
    assert.deepEqual(addrs(follower.members), ['a/1']);
    assert.equal(events.length, 2);
    assert.match(events[1][1], /presence\.join is not \{"topic","addr","info"\}/);
    link2.close();
  });

  test('a presence read that is not a member list is reported and nothing is shown', async () => {
    const { s, link, follower, events } = follow({ info: { user: 'ana' }, presence: true });
    const sock = await s.socket(0);
    reply(sock, (await sent(sock, 'subscribe')).id, true);
    reply(sock, (await sent(sock, 'presence')).id, { members: 3 });
    await settle();
    assert.equal(follower.members, null);
    assert.equal(events.length, 1);
    assert.match(events[0][1], /not \[\{addr, info\}\]/);
    link.close();
  });
});
