// topics.js: the topics a ReconnectingPeer follows across reconnects (`link.topic(name)`),
// the browser's end of topic history, as the Rust `ReconnectingBuilder::topic` is.
//
// A follower remembers the last position it handed over (`{epoch, offset}`) and, on every
// new connection, subscribes from it: `subscribe [topic, {"epoch":E,"offset":K}]`. What
// arrives for the topic before the answer is held (the server queues its replay before
// it answers), because only the answer says whether it continues the last position
// (`recovered: true`) or starts after a new one (`recovered: false`, reported as missed).
// From then on each notification's `data` goes to `onData` in offset order, once: an
// offset not above the last is a duplicate and dropped, one that jumps is reported as
// missed first. The held ones are bounded (`maxHeld`): past it the position is given up,
// the connection closed, and the next subscription reports what was missed.
//
// Presence: with `info`, the subscription joins the topic's presence
// (`subscribe [topic, position_or_null, info]`); with `presence: true` it also asks for
// `presence.join` / `presence.leave` (`{"topic","addr","info"}`) and keeps the members
// live: after every subscribe answer it reads `presence [topic]` once, applies the events
// that came meanwhile (held, bounded by `maxHeld`) and then each one as it comes.
import { ClosedError, TimeoutError } from './errors.js';
import { limitOf } from './limits.js';

/**
 * A place in a topic's history: the `offset` of a publication (from 1, each the previous
 * + 1) in an `epoch`, an opaque string that changes when the history is lost (a server
 * restart, on one node). On the wire `{"epoch":"...","offset":42}`.
 * @typedef {object} Position
 * @property {string} epoch
 * @property {number} offset
 */

/**
 * Where a followed topic stands, given with each data and each missed report. On a topic
 * without history (the server answered `subscribe` with a boolean) `epoch` is `''` and
 * `offset` 0.
 * @typedef {object} TopicInfo
 * @property {string} topic the topic's name
 * @property {string} epoch the epoch the data is in (or continues in, after a miss)
 * @property {number} offset the data's offset; after a miss, the newest offset not
 *   received: data continues from the next
 */

/**
 * An answer to a follower's `subscribe`, as `onSubscribed` gets it.
 * @typedef {object} Subscription
 * @property {string} topic the topic's name
 * @property {boolean} history whether the topic keeps history (false: the server
 *   answered with a boolean; every reconnect may lose some, and is reported as missed)
 * @property {string} epoch the topic's epoch (`''` without history)
 * @property {number} offset the newest offset when the subscription took effect (0
 *   without history)
 * @property {Position | null} from the position subscribed from, or null (the first
 *   time, or after the position was given up)
 * @property {boolean} [recovered] with a position: whether everything after it was
 *   replayed (`false`: nothing was, and `onMissed` follows); absent without one
 */

/**
 * A member of a topic's presence, as `presence [topic]` lists it: one connection (a user
 * in two tabs is two members with one info).
 * @typedef {object} Member
 * @property {string} addr the member's connection: `NODE/ID` (`local/ID` without a cluster)
 * @property {any} info what it joined with (its `presence` member taken out)
 */

/**
 * A join or a leave: the params of `presence.join` and `presence.leave`
 * (`{"topic":"chat","addr":"b/7","info":{"user":"ana"}}`). A leave carries the info
 * the member joined with; a watcher is not told of its own join or leave.
 * @typedef {object} PresenceChange
 * @property {string} topic the topic joined or left
 * @property {string} addr the member's connection
 * @property {any} info what it joined with
 */

/**
 * How a ReconnectingPeer follows a topic (`link.topic(name, options)`).
 * @template [T=any]
 * @typedef {object} TopicOptions
 * @property {(data: T, info: TopicInfo) => void} [onData] each publication's data (the
 *   notification's `params.data`; on a topic without history, its params), in offset
 *   order, once across reconnects
 * @property {(info: TopicInfo) => void} [onMissed] publications were lost: the position
 *   could not be resumed (outside the server's history, or of an epoch it no longer
 *   has), the offsets jumped, the server reported a gap (`$/gap`), or the topic keeps no
 *   history and the link came back. Fetch the state afresh; data continues after
 *   `info.offset` in `info.epoch`.
 * @property {(subscription: Subscription) => void} [onSubscribed] each answer to the
 *   follower's subscribe (after every connect), before what it held is handed over
 * @property {(error: Error, topic: string) => void} [onFailed] subscribing failed (an
 *   error answer, an answer that is not a subscription, no answer in time), or a
 *   notification is not `{"offset":N,"data":...}` (it is skipped). An error answer
 *   leaves the topic unsubscribed on this connection; no answer in time closes the
 *   connection, so that the next one subscribes again. A connection that closes while
 *   the subscribe waits is not a failure: the next one subscribes.
 * @property {any | (() => any)} [info] join the topic's presence with this (any JSON but
 *   null, such as `{"user": "ana"}`; a function is asked again at every subscribe): the
 *   subscribe call's third param, `[topic, position_or_null, info]`
 * @property {boolean} [presence=false] also hear who comes and goes: `presence: true` is
 *   added to `info` (which must then be an object, or absent: `{}`), so the server sends
 *   `presence.join` / `presence.leave` for the topic, and the follower keeps `members`
 *   live (read again after every reconnect)
 * @property {(change: PresenceChange) => void} [onJoin] another member joined (on any node)
 * @property {(change: PresenceChange) => void} [onLeave] another member left (it
 *   unsubscribed, its connection ended, or its node went)
 * @property {(members: Member[]) => void} [onPresence] with `presence`: the members, each
 *   time they change (after each read of `presence [topic]`, and each join and leave)
 * @property {string} [presenceMethod='presence'] the method that lists the members
 * @property {string} [presenceCountMethod='presence_count'] the method that counts them
 * @property {string} [method='subscribe'] the method that subscribes
 * @property {(topic: string, from: Position | null, info?: any) => Array<any>|object} [params] the
 *   subscribe call's params; default `[topic]`, or `[topic, {"epoch":E,"offset":K}]` with
 *   a position (the form of the Rust `TopicMethods` and `push_ticker --history N`), and
 *   `[topic, position_or_null, info]` with `info` or `presence`. The
 *   answer must be theirs too: `{"epoch":E,"offset":K,"recovered"?:bool}`, or a boolean
 *   for a topic without history.
 * @property {string | null} [unsubscribeMethod='unsubscribe'] what `stop()` calls with
 *   `[topic]` on the current connection; null: nothing
 * @property {Position} [from] where to start the first time: a position kept from an
 *   earlier page (`follower.position`, say in sessionStorage); default none
 * @property {number} [maxHeld=10000] notifications held while a subscribe answer is
 *   awaited; past it the position is given up, the connection closed (4008), and the
 *   next subscription is reported as missed
 * @property {number} [maxHeldBytes=67108864] the same notifications' size (the length of
 *   their params' JSON text, 64 MiB by default); past it, as past `maxHeld`
 * @property {number} [timeoutMs] the subscribe call's timeout; default the link's
 */

/**
 * What a follower needs from the ReconnectingPeer that owns it.
 * @typedef {object} FollowerHost
 * @property {() => number} timeoutMs the link's default timeout
 * @property {(error: unknown, where: string) => void} report a throwing callback
 * @property {() => import('./peer.js').Peer | null} current the open connection, if any
 * @property {(follower: TopicFollower) => void} forget stops routing to `follower`
 * @property {(method: string, params: any[]) => Promise<any>} call a call on the link,
 *   waiting for it if it is down
 */

/** The notification that tells a watcher a member joined: params a PresenceChange. */
export const PRESENCE_JOIN = 'presence.join';
/** The notification that tells a watcher a member left: params a PresenceChange. */
export const PRESENCE_LEAVE = 'presence.leave';

/** The internal side of a follower, for reconnect.js only (set in the class's static block). */
export let followers;

/**
 * A topic a ReconnectingPeer follows: made by `link.topic(name, options)`, which see.
 */
export class TopicFollower {
  #topic;
  #host;
  #onData;
  #onMissed;
  #onSubscribed;
  #onFailed;
  #method;
  #params;
  #unsubscribeMethod;
  #maxHeld;
  #maxHeldBytes;
  #timeoutMs;
  /** @type {Position | null} the last position handed over */
  #position = null;
  /** @type {import('./peer.js').Peer | null} the connection whose notifications count */
  #link = null;
  /** @type {'waiting' | 'history' | 'plain'} how notifications are read now */
  #mode = 'waiting';
  /** @type {{gap?: true, params: any}[]} what arrived before the subscribe answer, in order */
  #held = [];
  /** The size of what is held (the length of its params' JSON text). */
  #heldBytes = 0;
  /** The position was given up: the next answer is reported as missed. */
  #lost = false;
  /** A subscribe was answered before: this is a reconnect, not the first connect. */
  #subscribedBefore = false;
  #stopped = false;
  #info;
  #watch;
  #onJoin;
  #onLeave;
  #onPresence;
  #presenceMethod;
  #presenceCountMethod;
  /** @type {Map<string, any> | null} the members by addr; null until read on this connection */
  #members = null;
  /** @type {{joined: boolean, change: PresenceChange}[]} changes that came before the read */
  #changes = [];
  /** The members' read failed on this connection: changes are told, not kept. */
  #unread = false;

  static {
    followers = {
      /** @param {TopicFollower} f @param {import('./peer.js').Peer} peer @returns {Promise<void>} */
      subscribe: (f, peer) => f.#subscribe(peer),
      /** @param {TopicFollower} f @param {import('./peer.js').Peer} peer @param {any} params */
      notification: (f, peer, params) => f.#notification(peer, params, false),
      /** @param {TopicFollower} f @param {import('./peer.js').Peer} peer @param {any} params */
      gap: (f, peer, params) => f.#notification(peer, params, true),
      /** @param {TopicFollower} f @param {import('./peer.js').Peer} peer @param {boolean} joined @param {any} params */
      presence: (f, peer, joined, params) => f.#presenceChange(peer, joined, params),
    };
  }

  /**
   * Made by `ReconnectingPeer.topic`; not to be called directly.
   * @param {string} topic @param {TopicOptions} options @param {FollowerHost} host
   */
  constructor(topic, options, host) {
    this.#topic = topic;
    this.#host = host;
    this.#onData = callback(options, 'onData');
    this.#onMissed = callback(options, 'onMissed');
    this.#onSubscribed = callback(options, 'onSubscribed');
    this.#onFailed = callback(options, 'onFailed');
    this.#method = options.method ?? 'subscribe';
    if (typeof this.#method !== 'string') throw new TypeError('topic option "method" must be a string');
    this.#params = callback(options, 'params') ?? defaultParams;
    this.#unsubscribeMethod = options.unsubscribeMethod === undefined ? 'unsubscribe' : options.unsubscribeMethod;
    if (this.#unsubscribeMethod !== null && typeof this.#unsubscribeMethod !== 'string') {
      throw new TypeError('topic option "unsubscribeMethod" must be a string or null');
    }
    this.#maxHeld = limitOf(options, 'maxHeld');
    this.#maxHeldBytes = limitOf(options, 'maxHeldBytes');
    this.#info = options.info === null ? undefined : options.info;
    this.#watch = options.presence === true;
    if (options.presence !== undefined && typeof options.presence !== 'boolean') {
      throw new TypeError('topic option "presence" must be a boolean');
    }
    if (this.#watch && typeof this.#info !== 'function' && this.#info !== undefined && !isObject(this.#info)) {
      throw new TypeError(`topic option "info" must be an object with "presence": true, not ${JSON.stringify(this.#info)}`);
    }
    this.#onJoin = callback(options, 'onJoin');
    this.#onLeave = callback(options, 'onLeave');
    this.#onPresence = callback(options, 'onPresence');
    this.#presenceMethod = options.presenceMethod ?? 'presence';
    this.#presenceCountMethod = options.presenceCountMethod ?? 'presence_count';
    if (typeof this.#presenceMethod !== 'string' || typeof this.#presenceCountMethod !== 'string') {
      throw new TypeError('topic options "presenceMethod" and "presenceCountMethod" must be strings');
    }
    this.#timeoutMs = options.timeoutMs;
    if (options.from !== undefined) {
      if (!isPosition(options.from)) {
        throw new TypeError(`topic option "from" must be {epoch: string, offset: integer >= 0}, not ${JSON.stringify(options.from)}`);
      }
      this.#position = { epoch: options.from.epoch, offset: options.from.offset };
    }
  }

  /** The topic's name. */
  get topic() {
    return this.#topic;
  }

  /**
   * The position of the last data handed over (or of the last miss reported); null before
   * the first subscription answered, and on a topic without history. Keep it to resume
   * from in another page (`from`).
   * @returns {Position | null}
   */
  get position() {
    return this.#position && { epoch: this.#position.epoch, offset: this.#position.offset };
  }

  /**
   * With `presence`: the members as last read and changed since, on every node (this
   * link's own connection among them); null while not read yet on this connection.
   * @returns {Member[] | null}
   */
  get members() {
    return this.#members && [...this.#members].map(([addr, info]) => ({ addr, info }));
  }

  /**
   * The topic's members on every node, asked now (`presence [topic]`), waiting for the
   * link if it is down.
   * @returns {Promise<Member[]>}
   */
  presence() {
    return this.#host.call(this.#presenceMethod, [this.#topic]);
  }

  /**
   * How many members the topic has on every node (`presence_count [topic]`): connections,
   * not users; count distinct infos of `presence()` for users.
   * @returns {Promise<number>}
   */
  presenceCount() {
    return this.#host.call(this.#presenceCountMethod, [this.#topic]);
  }

  /** Whether `stop()` was called. */
  get stopped() {
    return this.#stopped;
  }

  /**
   * Stop following: no more callbacks, no subscribing on later connections. The current
   * connection, if any, is sent `unsubscribeMethod [topic]` (its answer not awaited).
   */
  stop() {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#link = null;
    this.#held = [];
    this.#heldBytes = 0;
    this.#host.forget(this);
    const peer = this.#host.current();
    if (peer && this.#unsubscribeMethod) peer.call(this.#unsubscribeMethod, [this.#topic]).catch(() => {});
  }

  // ---- the connection's side -----------------------------------------------------

  /**
   * Subscribes on the new connection `peer` from the last position, then hands over what
   * arrived before the answer as the answer says. Never rejects.
   * @param {import('./peer.js').Peer} peer
   */
  async #subscribe(peer) {
    if (this.#stopped) return;
    this.#link = peer;
    this.#mode = 'waiting';
    this.#held = [];
    this.#heldBytes = 0;
    this.#members = null;
    this.#changes = [];
    this.#unread = false;
    const from = this.#lost ? null : this.position;
    let answer;
    try {
      const info = this.#joinInfo();
      const params = info === undefined
        ? this.#params(this.#topic, from && { ...from })
        : this.#params(this.#topic, from && { ...from }, info);
      answer = await peer.call(this.#method, params, {
        timeoutMs: this.#timeoutMs ?? this.#host.timeoutMs(),
      });
    } catch (e) {
      if (this.#link === peer) this.#subscribeFailed(peer, e);
      return;
    }
    if (this.#link !== peer) return; // gave this connection up meanwhile, or stopped
    const held = this.#held;
    this.#held = [];
    this.#heldBytes = 0;
    if (typeof answer === 'boolean') {
      this.#plain(from, held);
    } else if (isSubscribed(answer)) {
      this.#history(answer, from, held);
    } else {
      this.#subscribeFailed(peer, new Error(
        `"${this.#method}" for topic "${this.#topic}" answered ${JSON.stringify(answer)}: neither {epoch, offset} nor a boolean`,
      ));
      return;
    }
    this.#subscribedBefore = true;
    if (this.#watch) await this.#readMembers(peer);
  }

  /** The info this subscription joins with, `presence: true` added if asked; or undefined. */
  #joinInfo() {
    let info = typeof this.#info === 'function' ? this.#info() : this.#info;
    if (info === null) info = undefined;
    if (!this.#watch) return info;
    if (info !== undefined && !isObject(info)) {
      throw new TypeError(`topic "${this.#topic}": info must be an object to add "presence": true, not ${JSON.stringify(info)}`);
    }
    return { ...info, presence: true };
  }

  /**
   * Reads the members once on `peer`, then applies the changes that came meanwhile.
   * @param {import('./peer.js').Peer} peer
   */
  async #readMembers(peer) {
    let list;
    try {
      list = await peer.call(this.#presenceMethod, [this.#topic], { timeoutMs: this.#timeoutMs ?? this.#host.timeoutMs() });
    } catch (e) {
      if (this.#link === peer) this.#readFailed();
      if (this.#link === peer && !(e instanceof ClosedError) && !peer.isClosed) {
        this.#emit(this.#onFailed, 'onFailed', asError(e), this.#topic);
      }
      return;
    }
    if (this.#link !== peer) return;
    if (!Array.isArray(list) || !list.every(isMember)) {
      this.#readFailed();
      this.#emit(this.#onFailed, 'onFailed', new Error(
        `"${this.#presenceMethod}" for topic "${this.#topic}" answered ${JSON.stringify(list)?.slice(0, 200)}: not [{addr, info}]`,
      ), this.#topic);
      return;
    }
    const members = new Map(list.map((m) => [m.addr, m.info]));
    // What came before the answer is applied on it in order: a join it already has is set
    // again, a leave it no longer has deletes nothing.
    for (const { joined, change } of this.#changes) {
      if (joined) members.set(change.addr, change.info);
      else members.delete(change.addr);
    }
    this.#changes = [];
    this.#members = members;
    this.#emit(this.#onPresence, 'onPresence', this.members);
  }

  /** No members to apply changes to on this connection: none is kept (the next reads). */
  #readFailed() {
    this.#changes = [];
    this.#unread = true;
  }

  /**
   * A `presence.join` (joined) or `presence.leave` naming this topic, from `peer`.
   * @param {import('./peer.js').Peer} peer @param {boolean} joined @param {any} params
   */
  #presenceChange(peer, joined, params) {
    if (this.#link !== peer || this.#stopped) return;
    if (!isMember(params)) {
      this.#emit(this.#onFailed, 'onFailed', new Error(
        `a presence.${joined ? 'join' : 'leave'} is not {"topic","addr","info"}: ${JSON.stringify(params)?.slice(0, 200)}`,
      ), this.#topic);
      return;
    }
    const change = { topic: this.#topic, addr: params.addr, info: params.info };
    this.#emit(joined ? this.#onJoin : this.#onLeave, joined ? 'onJoin' : 'onLeave', change);
    if (!this.#watch || this.#unread) return;
    if (this.#members === null) {
      // Before the read's answer: kept to apply on it. Past the bound, the connection is
      // closed and the next one reads the members again.
      if (this.#changes.length >= this.#maxHeld) {
        this.#changes = [];
        this.#link = null;
        peer.close(4008, 'presence changes over maxHeld');
        return;
      }
      this.#changes.push({ joined, change });
      return;
    }
    if (joined) this.#members.set(change.addr, change.info);
    else this.#members.delete(change.addr);
    this.#emit(this.#onPresence, 'onPresence', this.members);
  }

  /**
   * The answer `{epoch, offset, recovered?}`: the topic keeps history.
   * @param {{epoch: string, offset: number, recovered?: boolean}} answer
   * @param {Position | null} from @param {{gap?: true, params: any}[]} held
   */
  #history(answer, from, held) {
    const resumed = answer.recovered === true && from !== null;
    // Resumed: the replay (held, or still to come) continues `from`. Not: live data
    // follows the answer's offset, and what was asked for is lost.
    this.#position = { epoch: answer.epoch, offset: resumed ? from.offset : answer.offset };
    // Not resumed and asked to, or followed before with no position (the topic had no
    // history then): what was published meanwhile is lost.
    const missed = !resumed && (from !== null || this.#lost || this.#subscribedBefore);
    this.#lost = false;
    this.#mode = 'history';
    this.#emit(this.#onSubscribed, 'onSubscribed', {
      topic: this.#topic, history: true, epoch: answer.epoch, offset: answer.offset, from,
      ...(answer.recovered === undefined ? {} : { recovered: answer.recovered }),
    });
    if (missed) this.#missed();
    this.#release(held);
  }

  /**
   * The answer `true`/`false`: a topic without history, whose params are the data.
   * @param {Position | null} from @param {{gap?: true, params: any}[]} held
   */
  #plain(from, held) {
    // What a reconnect lost cannot be known: every one after the first is a miss.
    const missed = this.#subscribedBefore || from !== null || this.#lost;
    this.#position = null;
    this.#lost = false;
    this.#mode = 'plain';
    this.#emit(this.#onSubscribed, 'onSubscribed', { topic: this.#topic, history: false, epoch: '', offset: 0, from });
    if (missed) this.#missed();
    this.#release(held);
  }

  /** Hands over what was held, in arrival order, now that the mode is known. */
  #release(held) {
    for (const { gap, params } of held) {
      if (this.#link === null) return; // a callback stopped it
      if (gap) this.#gap(params);
      else this.#deliver(params);
    }
  }

  /**
   * @param {import('./peer.js').Peer} peer @param {unknown} error
   */
  #subscribeFailed(peer, error) {
    this.#link = null;
    // The connection went: the next one subscribes again; nothing to report.
    if (error instanceof ClosedError || peer.isClosed) return;
    this.#emit(this.#onFailed, 'onFailed', asError(error), this.#topic);
    // No answer in time: this connection is no use for the topic; the next subscribes.
    if (error instanceof TimeoutError) peer.close(4000, `subscribing to "${this.#topic}" timed out`);
  }

  /**
   * A notification of the topic (or a gap report naming it) from `peer`.
   * @param {import('./peer.js').Peer} peer @param {any} params @param {boolean} gap
   */
  #notification(peer, params, gap) {
    if (this.#link !== peer) return; // an older connection's, or one whose subscribe failed
    if (this.#mode !== 'waiting') {
      if (gap) this.#gap(params);
      else this.#deliver(params);
      return;
    }
    // Measured only while held: the answer is awaited for a moment, and most
    // notifications never are.
    const bytes = this.#heldBytes + (JSON.stringify(params)?.length ?? 0);
    const over = this.#held.length >= this.#maxHeld ? 'maxHeld'
      : bytes > this.#maxHeldBytes ? 'maxHeldBytes' : null;
    if (over) {
      // The server sends more before its answer than we hold: give the position up
      // rather than memory, and start again on a new connection.
      this.#held = [];
      this.#heldBytes = 0;
      this.#lost = true;
      this.#link = null;
      peer.close(4008, `resume backlog over ${over}`);
      return;
    }
    this.#held.push(gap ? { gap: true, params } : { params });
    this.#heldBytes = bytes;
  }

  /** Delivers one notification's params, in the mode the answer set. */
  #deliver(params) {
    if (this.#mode === 'plain') {
      this.#emit(this.#onData, 'onData', params, { topic: this.#topic, epoch: '', offset: 0 });
      return;
    }
    const position = this.#position;
    if (!isItem(params)) {
      this.#emit(this.#onFailed, 'onFailed', new Error(
        `a "${this.#topic}" notification is not {"offset":N,"data":...}: ${JSON.stringify(params)?.slice(0, 200)}`,
      ), this.#topic);
      return;
    }
    if (!position || params.offset <= position.offset) return; // already handed over
    if (params.offset > position.offset + 1) {
      // A jump: the server skipped some for us (a slow subscriber's Drop policy, say).
      position.offset = params.offset - 1;
      this.#missed();
    }
    position.offset = params.offset;
    this.#emit(this.#onData, 'onData', params.data, { topic: this.#topic, epoch: position.epoch, offset: params.offset });
  }

  /**
   * A gap report (`$/gap`): `{"topic":T,"epoch":E,"offset":K}` when the topic's history
   * was lost (data continues from K + 1 in E), `{"topic":T}` for a topic without history.
   */
  #gap(params) {
    if (this.#mode === 'history' && isPosition(params)) {
      this.#position = { epoch: params.epoch, offset: params.offset };
    }
    this.#missed();
  }

  #missed() {
    const at = this.#position ?? { epoch: '', offset: 0 };
    this.#emit(this.#onMissed, 'onMissed', { topic: this.#topic, epoch: at.epoch, offset: at.offset });
  }

  /** Calls an application callback; a throw goes to the link's onHandlerError. */
  #emit(fn, name, ...args) {
    if (!fn || this.#stopped) return;
    try {
      fn(...args);
    } catch (e) {
      this.#host.report(e, `topic "${this.#topic}" ${name}`);
    }
  }
}

/** @param {string} topic @param {Position | null} from @param {any} [info] */
function defaultParams(topic, from, info) {
  const at = from && { epoch: from.epoch, offset: from.offset };
  if (info !== undefined) return [topic, at, info];
  return at ? [topic, at] : [topic];
}

/** @param {any} x @returns {x is Record<string, any>} */
function isObject(x) {
  return x !== null && typeof x === 'object' && !Array.isArray(x);
}

/** @param {any} x @returns {x is Member} */
function isMember(x) {
  return isObject(x) && typeof x.addr === 'string' && 'info' in x;
}

/** @param {any} x @returns {x is Position} */
function isPosition(x) {
  return x !== null && typeof x === 'object' && typeof x.epoch === 'string' && Number.isSafeInteger(x.offset) && x.offset >= 0;
}

/** @param {any} x @returns {x is {epoch: string, offset: number, recovered?: boolean}} */
function isSubscribed(x) {
  return isPosition(x) && (/** @type {any} */ (x).recovered === undefined || typeof (/** @type {any} */ (x).recovered) === 'boolean');
}

/** @param {any} x @returns {x is {offset: number, data: any}} */
function isItem(x) {
  return x !== null && typeof x === 'object' && Number.isSafeInteger(x.offset) && x.offset >= 1 && 'data' in x;
}

/** @param {Record<string, any>} options @param {string} name */
function callback(options, name) {
  const fn = options[name];
  if (fn !== undefined && typeof fn !== 'function') throw new TypeError(`topic option "${name}" must be a function`);
  return fn;
}

/** @param {unknown} e @returns {Error} */
function asError(e) {
  return e instanceof Error ? e : new Error(String(e));
}
