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
export function backoffDelay({ initialMs, maxMs, multiplier }: Backoff | undefined, attempt: number, random?: () => number): number;
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
export function reconnecting(url: string, options?: import("./peer.js").PeerOptions & ReconnectOptions): ReconnectingPeer;
/** See `reconnecting`. */
export class ReconnectingPeer extends EventTarget {
    /** @param {string} url @param {import('./peer.js').PeerOptions & ReconnectOptions} [options] */
    constructor(url: string, options?: import("./peer.js").PeerOptions & ReconnectOptions);
    /** Default per-call timeout in ms, covering the wait for the link. */
    timeoutMs: number;
    /** @returns {LinkState} where the link stands now */
    get state(): LinkState;
    /** The current connection once `onConnect` has run on it, or null while the link is down. */
    get peer(): Peer;
    /** Number of calls and notifications waiting for the link. */
    get queuedCount(): number;
    /**
     * Serve calls of `name` on every connection; as `Peer.method`.
     * @param {string} name @param {import('./peer.js').Handler} handler @returns {this}
     */
    method(name: string, handler: import("./peer.js").Handler): this;
    /**
     * Handle notifications of `name` on every connection; as `Peer.notification`.
     * @param {string} name @param {import('./peer.js').Handler} handler @returns {this}
     */
    notification(name: string, handler: import("./peer.js").Handler): this;
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
    topic<T = any>(topic: string, options?: import("./topics.js").TopicOptions<T>): TopicFollower;
    /**
     * Resolves with the current Peer once the link is up (at once if it is).
     * @param {number} [timeoutMs] default `this.timeoutMs`
     * @returns {Promise<Peer>} rejects with TimeoutError, or ClosedError once stopped
     */
    connected(timeoutMs?: number): Promise<Peer>;
    /**
     * `Peer.call` on the current connection, waiting for one if the link is down; the
     * timeout covers the wait.
     * @param {string} method @param {Array|object} [params]
     * @param {{ timeoutMs?: number, signal?: AbortSignal, onProgress?: (value: any) => void }} [options]
     *   as for `Peer.call`; an abort while waiting for the link rejects at once
     * @returns {Promise<*>} as `Peer.call`; also LimitError when `maxQueued` or
     *   `maxQueuedBytes` is reached while the link is down
     */
    call(method: string, params?: any[] | object, { timeoutMs, signal, onProgress }?: {
        timeoutMs?: number;
        signal?: AbortSignal;
        onProgress?: (value: any) => void;
    }): Promise<any>;
    /**
     * `Peer.notify` on the current connection, waiting for one (up to `timeoutMs`) if the
     * link is down. Resolves once sent.
     * @param {string} method @param {Array|object} [params] @param {{ timeoutMs?: number }} [options]
     * @returns {Promise<void>} rejects as `Peer.notify` throws, and with TimeoutError
     */
    notify(method: string, params?: any[] | object, { timeoutMs }?: {
        timeoutMs?: number;
    }): Promise<void>;
    /**
     * Stop reconnecting and close the current connection. Calls waiting for the link reject
     * with ClosedError.
     * @param {number} [code=1000] @param {string} [reason]
     */
    close(code?: number, reason?: string): void;
    #private;
}
export type Backoff = {
    /**
     * the cap of the first wait
     */
    initialMs?: number;
    /**
     * the largest cap; also how long a link must stay up
     * for its loss to start the count again: one lost sooner after it opened counts as
     * one more failed attempt, so a server that accepts and closes at once (shedding
     * load) is dialed with growing waits, as one that is down is, not every `initialMs`
     */
    maxMs?: number;
    /**
     * how much the cap grows per failed attempt
     */
    multiplier?: number;
};
export type ReconnectOptions = {
    /**
     * the wait between attempts
     */
    backoff?: Backoff;
    /**
     * runs after every (re)connect, before calls
     * made through the ReconnectingPeer go through (subscribe again here); may be async.
     * If it throws, the connection is closed (code 4000) and dialed again.
     */
    onConnect?: (peer: Peer) => any;
    /**
     * the WebSocket class (default the global one)
     */
    WebSocket?: typeof WebSocket;
    /**
     * for the jitter (default Math.random)
     */
    random?: () => number;
    /**
     * the notification by which a server
     * reports lost publications to a followed topic (`{"topic":T,"epoch":E,"offset":K}`
     * when its history was lost, `{"topic":T}` without history, as a jsonrpc-peer cluster
     * sends it): `onMissed` for that topic. A handler registered for the same name still
     * gets it. null: none.
     */
    gapNotification?: string | null;
};
/**
 * Where a ReconnectingPeer stands: `{ state: 'connecting', attempt }`,
 * `{ state: 'connected' }` (the onConnect hook has run), `{ state: 'waiting', attempt,
 * retryInMs }` (before the next attempt), `{ state: 'stopped' }` (after `close()`).
 * `attempt` counts failures since the last success: a link that was up and was lost
 * counts as the first, and one lost sooner than `backoff.maxMs` after it opened counts
 * as one more.
 */
export type LinkState = {
    state: "connecting" | "connected" | "waiting" | "stopped";
    attempt?: number;
    retryInMs?: number;
};
import { Peer } from './peer.js';
import { TopicFollower } from './topics.js';
