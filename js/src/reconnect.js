// reconnect.js: a connection that comes back by itself, like the Rust `Reconnecting`.
//
// The life of a link: dial (#dial) -> the socket opens -> set the new connection up
// (#setUp) -> connected: calls waiting for the link go through -> the socket closes ->
// wait (backoff) -> dial again. What must outlive one connection lives here, not in a
// Peer: the handlers (given to every new Peer), the sends waiting for the link, the
// topics it follows (topics.js: their positions), and what #setUp restores on each new
// connection before calls go through: each followed topic subscribed again from its
// position, then the onConnect hook.
import { ClosedError, TimeoutError } from './errors.js';
import { WaitingSends, limitOf } from './limits.js';
import { Peer, webSocketClass } from './peer.js';
import { PRESENCE_JOIN, PRESENCE_LEAVE, TopicFollower, followers } from './topics.js';
import { MAX_TIMER_MS, checkName, request, utf8Length } from './wire.js';

/**
 * @typedef {object} Backoff
 * @property {number} [initialMs=250] the cap of the first wait
 * @property {number} [maxMs=3000] the largest cap; also how long a link must stay up
 *   for its loss to start the count again: one lost sooner after it opened counts as
 *   one more failed attempt, so a server that accepts and closes at once (shedding
 *   load) is dialed with growing waits, as one that is down is, not every `initialMs`
 * @property {number} [multiplier=2] how much the cap grows per failed attempt
 */

/**
 * The wait before attempt `attempt` (failures counted from 0 since the last link that
 * stayed up `maxMs`; see `Backoff`): a random time between zero and
 * `min(maxMs, initialMs * multiplier ** attempt)` ("full jitter"), so pages that lost
 * the same server at the same moment do not all come back at once. The same rule as the
 * Rust `Backoff`.
 * @param {Backoff | undefined} backoff
 * @param {number} attempt
 * @param {() => number} [random] a number in [0, 1)
 * @returns {number} milliseconds
 */
export function backoffDelay({ initialMs = 250, maxMs = 3000, multiplier = 2 } = {}, attempt, random = Math.random) {
  // setTimeout takes at most 2^31 - 1 ms: a longer wait would fire at once.
  const cap = Math.max(0, Math.min(maxMs, MAX_TIMER_MS, initialMs * multiplier ** Math.min(attempt, 64)));
  return random() * cap;
}

/**
 * @typedef {object} ReconnectOptions
 * @property {Backoff} [backoff] the wait between attempts
 * @property {(peer: Peer) => any} [onConnect] runs after every (re)connect, before calls
 *   made through the ReconnectingPeer go through (subscribe again here); may be async.
 *   If it throws, the connection is closed (code 4000) and dialed again.
 * @property {typeof WebSocket} [WebSocket] the WebSocket class (default the global one)
 * @property {() => number} [random] for the jitter (default Math.random)
 * @property {string | null} [gapNotification='$/gap'] the notification by which a server
 *   reports lost publications to a followed topic (`{"topic":T,"epoch":E,"offset":K}`
 *   when its history was lost, `{"topic":T}` without history, as a jsonrpc-peer cluster
 *   sends it): `onMissed` for that topic. A handler registered for the same name still
 *   gets it. null: none.
 */

/**
 * Where a ReconnectingPeer stands: `{ state: 'connecting', attempt }`,
 * `{ state: 'connected' }` (the onConnect hook has run), `{ state: 'waiting', attempt,
 * retryInMs }` (before the next attempt), `{ state: 'stopped' }` (after `close()`).
 * `attempt` counts failures since the last success: a link that was up and was lost
 * counts as the first, and one lost sooner than `backoff.maxMs` after it opened counts
 * as one more.
 * @typedef {{state: 'connecting'|'connected'|'waiting'|'stopped', attempt?: number, retryInMs?: number}} LinkState
 */

/**
 * A connection that comes back by itself, like the Rust `Reconnecting`: when the socket
 * closes it dials again with exponential backoff and full jitter, runs the `onConnect`
 * hook, and carries on. Handlers registered on it serve every connection.
 *
 * Calls in flight when the link drops reject with ClosedError; calls and notifications
 * made while it is down wait for the next connection, up to their timeout, at most
 * `maxQueued` of them holding at most `maxQueuedBytes` (past either, they reject at once
 * with LimitError). It dispatches a `statechange` event (an Event with `detail`, the new
 * LinkState) on every change of `state`.
 *
 * @param {string} url
 * @param {import('./peer.js').PeerOptions & ReconnectOptions} [options]
 * @returns {ReconnectingPeer}
 */
export function reconnecting(url, options = {}) {
  return new ReconnectingPeer(url, options);
}

/** See `reconnecting`. */
export class ReconnectingPeer extends EventTarget {
  #url;
  #options;
  #WS;
  #random;
  /** @type {Map<string, import('./peer.js').Handler>} */
  #methods = new Map();
  /** @type {Map<string, import('./peer.js').Handler>} */
  #notifications = new Map();
  /** @type {Map<string, TopicFollower>} the followed topics, by name */
  #followers = new Map();
  /** @type {string | null} */
  #gapName;
  /** @type {Set<string>} the notification names routed on the current connection */
  #routed = new Set();
  /** @type {Peer | null} */
  #peer = null;
  /** @type {Peer | null} the connection #setUp runs (or ran) on */
  #settingUp = null;
  /** @type {LinkState} */
  #state = { state: 'connecting', attempt: 0 };
  #attempt = 0;
  /** @type {number | null} when the current connection, once connected, opened (Date.now()) */
  #openedAt = null;
  #retryTimer = null;
  #stopped = false;
  /** @type {Set<(outcome: Peer | Error) => void>} whoever waits for the link */
  #waiters = new Set();
  #waiting; // the calls and notifications among them: bounded
  /** @type {string | null} why the last connection failed or ended, for a timeout's message */
  #lastFailure = null;

  /** @param {string} url @param {import('./peer.js').PeerOptions & ReconnectOptions} [options] */
  constructor(url, options = {}) {
    super();
    this.#url = url;
    this.#options = options;
    this.#WS = webSocketClass(options); // none: a TypeError now, not a silent retry for ever
    this.#random = options.random ?? Math.random;
    this.#gapName = options.gapNotification === undefined ? '$/gap' : options.gapNotification;
    if (this.#gapName !== null) checkName(this.#gapName, () => {});
    // Every limit is checked now: a bad one throws here, not at each dial.
    limitOf(options, 'maxPendingCalls');
    limitOf(options, 'maxBufferedAmount');
    limitOf(options, 'maxBatchLen');
    limitOf(options, 'maxRunningCalls');
    limitOf(options, 'maxQueuedNotifications');
    this.#waiting = new WaitingSends(limitOf(options, 'maxQueued'), limitOf(options, 'maxQueuedBytes'));
    /** Default per-call timeout in ms, covering the wait for the link. */
    this.timeoutMs = options.timeoutMs ?? 30000;
    // Dial on the next microtask, so handlers chained right after construction serve the
    // very first connection.
    queueMicrotask(() => this.#dial());
  }

  /** @returns {LinkState} where the link stands now */
  get state() {
    return this.#state;
  }

  /** The current connection once `onConnect` has run on it, or null while the link is down. */
  get peer() {
    const peer = this.#state.state === 'connected' ? this.#peer : null;
    return peer && !peer.isClosed ? peer : null;
  }

  /** Number of calls and notifications waiting for the link. */
  get queuedCount() {
    return this.#waiting.count;
  }

  /**
   * Serve calls of `name` on every connection; as `Peer.method`.
   * @param {string} name @param {import('./peer.js').Handler} handler @returns {this}
   */
  method(name, handler) {
    if (this.#methods.has(checkName(name, handler))) throw new Error(`method "${name}" is registered twice`);
    this.#methods.set(name, handler);
    this.#peer?.method(name, handler);
    return this;
  }

  /**
   * Handle notifications of `name` on every connection; as `Peer.notification`.
   * @param {string} name @param {import('./peer.js').Handler} handler @returns {this}
   */
  notification(name, handler) {
    if (this.#notifications.has(checkName(name, handler))) {
      throw new Error(`notification "${name}" is registered twice`);
    }
    if (this.#followers.has(name)) throw new Error(`notification "${name}" is a followed topic's (topic())`);
    this.#notifications.set(name, handler);
    this.#route(name);
    return this;
  }

  /**
   * Follow `topic` across reconnects: after every (re)connect, before `onConnect` and
   * before calls made through the link go through, subscribe to it, from the last
   * position once there is one (`subscribe [topic, {"epoch":E,"offset":K}]`, the form of
   * the Rust `TopicMethods`; see `method` and `params`). The data of each publication
   * goes to `onData`, in offset order and once across reconnects; `onMissed` says when
   * some were lost (the position could not be resumed, or the topic keeps no history),
   * so the application fetches its state afresh. What arrives before a subscribe answer
   * is held, at most `maxHeld` notifications.
   *
   * Added while connected, it subscribes at once. The link serves the notifications
   * named `topic`, so `notification(topic)` must not be registered too.
   * @template [T=any]
   * @param {string} topic not beginning with `rpc.`, not followed or handled yet
   * @param {import('./topics.js').TopicOptions<T>} [options]
   * @returns {TopicFollower} its `position`, and `stop()`
   */
  topic(topic, options = {}) {
    checkName(topic, () => {});
    if (this.#followers.has(topic)) throw new Error(`topic "${topic}" is followed twice`);
    if (this.#notifications.has(topic)) throw new Error(`topic "${topic}" already has a notification handler`);
    if (topic === this.#gapName) throw new Error(`"${topic}" is the gap notification, not a topic`);
    const follower = new TopicFollower(topic, options, {
      timeoutMs: () => this.timeoutMs,
      report: (e, where) => this.#report(e, where),
      current: () => (this.#peer && !this.#peer.isClosed ? this.#peer : null),
      forget: (f) => {
        if (this.#followers.get(f.topic) === f) this.#followers.delete(f.topic);
      },
      call: (method, params) => this.call(method, params),
    });
    this.#followers.set(topic, follower);
    this.#route(topic);
    this.#route(PRESENCE_JOIN);
    this.#route(PRESENCE_LEAVE);
    if (this.#gapName !== null) this.#route(this.#gapName);
    // #setUp subscribes the topics it finds when it starts; one added later subscribes now.
    const peer = this.#settingUp;
    if (peer && peer === this.#peer && !peer.isClosed) followers.subscribe(follower, peer);
    return follower;
  }

  /**
   * Resolves with the current Peer once the link is up (at once if it is).
   * @param {number} [timeoutMs] default `this.timeoutMs`
   * @returns {Promise<Peer>} rejects with TimeoutError, or ClosedError once stopped
   */
  connected(timeoutMs = this.timeoutMs) {
    return this.#connected(timeoutMs);
  }

  /** `connected`, given up (its timer and waiter gone) when `signal` aborts. */
  #connected(timeoutMs, signal) {
    const up = this.peer;
    if (up) return Promise.resolve(up);
    if (this.#stopped) return Promise.reject(stoppedError());
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      let timer = null;
      const onAbort = () => waiter(signal.reason);
      const waiter = (outcome) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#waiters.delete(waiter);
        if (outcome instanceof Peer) resolve(outcome);
        else reject(outcome);
      };
      if (timeoutMs > 0 && timeoutMs < Infinity) {
        // Past setTimeout's longest delay, the wait is as good as unbounded.
        if (timeoutMs <= MAX_TIMER_MS) {
          timer = setTimeout(() => waiter(new TimeoutError('(waiting for the connection)', timeoutMs, this.#stalled())), timeoutMs);
        }
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.add(waiter);
    });
  }

  /**
   * `Peer.call` on the current connection, waiting for one if the link is down; the
   * timeout covers the wait.
   * @param {string} method @param {Array|object} [params]
   * @param {{ timeoutMs?: number, signal?: AbortSignal, onProgress?: (value: any) => void }} [options]
   *   as for `Peer.call`; an abort while waiting for the link rejects at once
   * @returns {Promise<*>} as `Peer.call`; also LimitError when `maxQueued` or
   *   `maxQueuedBytes` is reached while the link is down
   */
  async call(method, params, { timeoutMs = this.timeoutMs, signal, onProgress } = {}) {
    const start = Date.now();
    const peer = await this.#link(method, params, `call to "${method}"`, timeoutMs, signal);
    const left = timeoutMs > 0 && timeoutMs < Infinity ? Math.max(1, timeoutMs - (Date.now() - start)) : timeoutMs;
    try {
      return await peer.call(method, params, { timeoutMs: left, signal, onProgress });
    } catch (e) {
      if (e instanceof TimeoutError) throw new TimeoutError(method, timeoutMs);
      throw e;
    }
  }

  /**
   * `Peer.notify` on the current connection, waiting for one (up to `timeoutMs`) if the
   * link is down. Resolves once sent.
   * @param {string} method @param {Array|object} [params] @param {{ timeoutMs?: number }} [options]
   * @returns {Promise<void>} rejects as `Peer.notify` throws, and with TimeoutError
   */
  async notify(method, params, { timeoutMs = this.timeoutMs } = {}) {
    (await this.#link(method, params, `notification "${method}"`, timeoutMs)).notify(method, params);
  }

  /**
   * Stop reconnecting and close the current connection. Calls waiting for the link reject
   * with ClosedError.
   * @param {number} [code=1000] @param {string} [reason]
   */
  close(code = 1000, reason = '') {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#retryTimer);
    const peer = this.#peer;
    this.#peer = null;
    peer?.close(code, reason);
    this.#setState({ state: 'stopped' });
    for (const w of [...this.#waiters]) w(stoppedError());
  }

  /**
   * The connection to send `method` on: the current one, or else the next, waited for
   * up to `timeoutMs`. A send that waits counts against `maxQueued` and `maxQueuedBytes`.
   * @param {string} method @param {Array|object | undefined} params @param {string} what
   * @param {number} timeoutMs @param {AbortSignal} [signal]
   * @returns {Promise<Peer>}
   */
  async #link(method, params, what, timeoutMs, signal) {
    const msg = request(method, params); // a bad argument throws now, not after the wait
    if (signal?.aborted) throw signal.reason;
    const up = this.peer;
    if (up) return up;
    if (this.#stopped) throw stoppedError();
    const release = this.#waiting.admit(utf8Length(JSON.stringify(msg)), what);
    try {
      return await this.#connected(timeoutMs, signal);
    } catch (e) {
      if (e instanceof TimeoutError) throw new TimeoutError(method, timeoutMs, this.#stalled());
      throw e;
    } finally {
      release();
    }
  }

  /** What a call that timed out waiting for the link is told: where it stands, and why. */
  #stalled() {
    const { state, attempt } = this.#state;
    const at = attempt ? `, attempt ${attempt}` : '';
    const last = this.#lastFailure ? `; last: ${this.#lastFailure}` : '';
    return `waiting for the connection: ${state}${at}${last}`;
  }

  #setState(state) {
    this.#state = Object.freeze(state);
    const ev = new Event('statechange');
    // @ts-ignore: an Event with `detail`, as the statechange event is documented
    ev.detail = this.#state;
    this.dispatchEvent(ev);
  }

  #dial() {
    if (this.#stopped) return;
    this.#setState({ state: 'connecting', attempt: this.#attempt });
    if (this.#stopped) return; // a statechange listener closed the link
    let peer;
    try {
      peer = new Peer(new this.#WS(this.#url), this.#options);
    } catch (e) {
      // A malformed URL throws at once; it never gets better, but it is retried like any
      // failure so that a page fixed under it (a proxy coming up) still connects.
      this.#lastFailure = `the WebSocket constructor threw: ${e}`;
      this.#retry();
      return;
    }
    for (const [n, h] of this.#methods) peer.method(n, h);
    this.#peer = peer;
    this.#routed = new Set();
    for (const n of this.#notifications.keys()) this.#route(n);
    for (const n of this.#followers.keys()) this.#route(n);
    if (this.#followers.size && this.#gapName !== null) this.#route(this.#gapName);
    if (this.#followers.size) {
      this.#route(PRESENCE_JOIN);
      this.#route(PRESENCE_LEAVE);
    }
    let refused = null; // why it never opened, when it did not (a refused socket: ECONNREFUSED)
    peer.closed.then(({ code, reason }) => {
      if (this.#peer !== peer) return;
      // A link that stayed up the longest wait starts the count again; one lost sooner
      // (or never connected) counts as one more failure, so a server that accepts and
      // closes at once is dialed with growing waits, not every `initialMs` for ever.
      const openedAt = this.#openedAt;
      this.#openedAt = null;
      if (openedAt !== null && Date.now() - openedAt >= longestWait(this.#options.backoff)) this.#attempt = 0;
      // A close of ours after onConnect failed keeps that failure as the reason.
      if (code !== 4000 || reason !== ON_CONNECT_FAILED) {
        this.#lastFailure = refused ?? `closed with code ${code}${reason ? ` (${reason})` : ''}`;
      }
      this.#peer = null;
      this.#retry();
    });
    // A failed open is handled by `closed` (its reaction runs after this one's).
    peer.opened.then(() => this.#setUp(peer), (e) => (refused = e instanceof Error ? e.message : String(e)));
  }

  /**
   * Routes notifications `name` on the current connection to #onNotification (once per
   * connection), which looks the handler and the follower up when one arrives: so they
   * can be added (and a follower stopped) while connected.
   * @param {string} name
   */
  #route(name) {
    const peer = this.#peer;
    if (!peer || this.#routed.has(name)) return;
    this.#routed.add(name);
    peer.notification(name, (cx, params) => this.#onNotification(name, cx, params));
  }

  /**
   * A notification `name` arrived: to the topic's follower, to the followers a gap report
   * names, and to the handler registered for it.
   * @param {string} name @param {import('./peer.js').HandlerContext} cx @param {any} params
   */
  #onNotification(name, cx, params) {
    const follower = this.#followers.get(name);
    if (follower) followers.notification(follower, cx.peer, params);
    if (name === this.#gapName) {
      const named = typeof params?.topic === 'string' ? this.#followers.get(params.topic) : undefined;
      if (named) followers.gap(named, cx.peer, params);
    }
    if (name === PRESENCE_JOIN || name === PRESENCE_LEAVE) {
      const named = typeof params?.topic === 'string' ? this.#followers.get(params.topic) : undefined;
      if (named) followers.presence(named, cx.peer, name === PRESENCE_JOIN, params);
    }
    return this.#notifications.get(name)?.(cx, params);
  }

  /** @param {unknown} e @param {string} where */
  #report(e, where) {
    try {
      (this.#options.onHandlerError ?? console.error)(e, where);
    } catch {
      // A reporter that throws must not break the link.
    }
  }

  /**
   * The new connection `peer` is open: restore on it what the link keeps across
   * connections, then offer it to the calls that wait: every followed topic subscribes
   * again (from its position), then the onConnect hook runs.
   * @param {Peer} peer
   */
  async #setUp(peer) {
    const opened = Date.now(); // the link's life counts from here, the hooks included
    this.#settingUp = peer;
    // Each follower handles its own failures; a subscribe that timed out closed `peer`.
    await Promise.all([...this.#followers.values()].map((f) => followers.subscribe(f, peer)));
    if (this.#peer !== peer || peer.isClosed) return;
    try {
      await this.#options.onConnect?.(peer);
    } catch (e) {
      this.#report(e, 'onConnect');
      this.#lastFailure = `onConnect failed: ${e}`;
      peer.close(4000, ON_CONNECT_FAILED);
      return;
    }
    if (this.#peer !== peer || peer.isClosed) return;
    this.#openedAt = opened;
    this.#lastFailure = null;
    this.#setState({ state: 'connected' });
    for (const w of [...this.#waiters]) w(peer);
  }

  #retry() {
    if (this.#stopped) return;
    // The closed handler restarted the count (#attempt 0) if the link stayed up long enough.
    const retryInMs = backoffDelay(this.#options.backoff, this.#attempt, this.#random);
    this.#attempt += 1;
    // Armed before the state is told: a statechange listener that closes the link clears it.
    this.#retryTimer = setTimeout(() => this.#dial(), retryInMs);
    this.#setState({ state: 'waiting', attempt: this.#attempt, retryInMs });
  }
}

/**
 * How long a link must stay up for its loss to start the backoff count again: the
 * backoff's `maxMs`, as the Rust `Backoff::max`.
 * @param {Backoff | undefined} backoff
 */
function longestWait({ maxMs = 3000 } = {}) {
  return maxMs;
}

/** The reason of the close (4000) that follows a failed onConnect. */
const ON_CONNECT_FAILED = 'onConnect failed';

function stoppedError() {
  return new ClosedError('the reconnecting peer was stopped');
}
