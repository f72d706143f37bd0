/**
 * Open a WebSocket to `url` and resolve to a Peer once it is open.
 * Rejects with ClosedError if the socket closes before opening.
 * Register handlers right after it resolves (before any other await), or build the
 * Peer yourself with `new Peer(new WebSocket(url))`, register, then `await peer.opened`.
 * For a connection that comes back by itself, see `reconnecting`.
 * @param {string} url e.g. `ws://127.0.0.1:8080/rpc`
 * @param {PeerOptions & { WebSocket?: typeof WebSocket }} [options]
 * @returns {Promise<Peer>}
 */
export function connect(url: string, options?: PeerOptions & {
    WebSocket?: typeof WebSocket;
}): Promise<Peer>;
/**
 * @typedef {object} Backoff
 * @property {number} [initialMs=100] the cap of the first wait
 * @property {number} [maxMs=10000] the largest cap
 * @property {number} [multiplier=2] how much the cap grows per failed attempt
 */
/**
 * The wait before attempt `attempt` (counted from 0 since the last success): a random
 * time between zero and `min(maxMs, initialMs * multiplier ** attempt)` ("full jitter"),
 * so pages that lost the same server at the same moment do not all come back at once.
 * The same rule as the Rust `Backoff`.
 * @param {Backoff} backoff
 * @param {number} attempt
 * @param {() => number} [random] a number in [0, 1)
 * @returns {number} milliseconds
 */
export function backoffDelay({ initialMs, maxMs, multiplier }: Backoff, attempt: number, random?: () => number): number;
/**
 * @typedef {object} ReconnectOptions
 * @property {Backoff} [backoff] the wait between attempts
 * @property {(peer: Peer) => any} [onConnect] runs after every (re)connect, before calls
 *   made through the ReconnectingPeer go through (subscribe again here); may be async.
 *   If it throws, the connection is closed (code 4000) and dialed again.
 * @property {typeof WebSocket} [WebSocket] the WebSocket class (default the global one)
 * @property {() => number} [random] for the jitter (default Math.random)
 */
/**
 * Where a ReconnectingPeer stands: `{ state: 'connecting', attempt }`,
 * `{ state: 'connected' }` (the onConnect hook has run), `{ state: 'waiting', attempt,
 * retryInMs }` (before the next attempt), `{ state: 'stopped' }` (after `close()`).
 * `attempt` counts failures since the last success.
 * @typedef {{state: 'connecting'|'connected'|'waiting'|'stopped', attempt?: number, retryInMs?: number}} LinkState
 */
/**
 * A connection that comes back by itself, like the Rust `Reconnecting`: when the socket
 * closes it dials again with exponential backoff and full jitter, runs the `onConnect`
 * hook, and carries on. Handlers registered on it serve every connection.
 *
 * Calls in flight when the link drops reject with ClosedError; calls made while it is
 * down wait for the next connection, up to their timeout. It dispatches a `statechange`
 * event (an Event with `detail`, the new LinkState) on every change of `state`.
 *
 * @param {string} url
 * @param {PeerOptions & ReconnectOptions} [options]
 * @returns {ReconnectingPeer}
 */
export function reconnecting(url: string, options?: PeerOptions & ReconnectOptions): ReconnectingPeer;
/** The error codes the specification defines. */
export const ErrorCode: Readonly<{
    PARSE_ERROR: -32700;
    INVALID_REQUEST: -32600;
    METHOD_NOT_FOUND: -32601;
    INVALID_PARAMS: -32602;
    INTERNAL_ERROR: -32603;
    /** The caller cancelled the call (the Language Server Protocol's RequestCancelled). */
    REQUEST_CANCELLED: -32800;
}>;
/**
 * An error that travels on the wire: the `error` member of a response.
 * Throw one from a handler to answer with it; a call rejects with one when the other
 * side answers with an error.
 */
export class RpcError extends Error {
    /**
     * @param {number} code an integer; -32768..-32000 are reserved by the specification
     * @param {string} [message] defaults to the specification's text for its codes
     * @param {*} [data] optional extra information, sent only when not `undefined`
     */
    constructor(code: number, message?: string, data?: any);
    code: number;
    data: any;
    /** The wire shape `{ code, message, data? }`. */
    toJSON(): {
        code: number;
        message: string;
    };
}
/** A call that got no answer within its `timeoutMs`. Local: it never travels on the wire. */
export class TimeoutError extends Error {
    /** @param {string} method @param {number} timeoutMs */
    constructor(method: string, timeoutMs: number);
    method: string;
    timeoutMs: number;
}
/**
 * The connection is gone (or was never open), so a call cannot be answered.
 * `close` holds `{ code, reason, wasClean }` when a close event said why.
 */
export class ClosedError extends Error {
    /** @param {string} why @param {{code:number, reason:string, wasClean:boolean}} [close] */
    constructor(why: string, close?: {
        code: number;
        reason: string;
        wasClean: boolean;
    });
    close: {
        code: number;
        reason: string;
        wasClean: boolean;
    };
}
/**
 * The other side answered one of our calls with something that is not a valid response
 * (no `"jsonrpc": "2.0"`, both `result` and `error`, a malformed `error`). The call fails
 * at once rather than waiting for its timeout. Local: it never travels on the wire.
 */
export class InvalidResponseError extends Error {
    /** @param {string} problem @param {object} response the response as received */
    constructor(problem: string, response: object);
    response: any;
}
/**
 * A JSON-RPC 2.0 peer over one socket.
 *
 * The socket is anything shaped like the browser's WebSocket: `send(text)`,
 * `close(code, reason)`, `readyState` (0 connecting, 1 open, 2 closing, 3 closed) and
 * `addEventListener` for `open`, `message` (event with `data`), `error` and `close`
 * (event with `code`, `reason`, `wasClean`). The Peer only adds listeners, so other code
 * may listen to the same socket. Binary frames are ignored: JSON-RPC travels in text
 * frames, and answering a binary frame with a Parse error would only invite a loop with a
 * confused peer.
 */
export class Peer {
    /** @param {WebSocket} socket @param {PeerOptions} [options] */
    constructor(socket: WebSocket, options?: PeerOptions);
    /** Default per-call timeout in ms. */
    timeoutMs: number;
    /** Resolves when the socket is open; rejects with ClosedError if it closes first. */
    opened: Promise<any>;
    /** Resolves with `{ code, reason, wasClean }` when the socket has closed. */
    closed: Promise<any>;
    /** The socket this peer runs over. */
    get socket(): WebSocket;
    /** Number of outgoing calls still awaiting their answer. */
    get pendingCount(): number;
    /** Number of incoming calls whose handlers are still running. */
    get runningCount(): number;
    /** Whether the connection is gone (closed locally or by the socket). */
    get isClosed(): boolean;
    /**
     * Call `method` on the other side.
     * Throws TypeError at once for a non-string method or params that are neither an
     * array nor an object (`undefined` leaves `params` out).
     *
     * With `signal`, aborting it gives the call up: the other side is sent a cancel (see
     * `cancelStyle`) and the call rejects at once with `signal.reason`; a signal already
     * aborted sends nothing. A timeout sends the cancel too. With `onProgress`, the call
     * asks the other side for progress and `onProgress(value)` sees each value, in order,
     * before the call resolves; without it, no progress is asked for or delivered.
     * @param {string} method
     * @param {Array|object} [params]
     * @param {{ timeoutMs?: number, signal?: AbortSignal, onProgress?: (value: any) => void }} [options]
     * @returns {Promise<*>} the result; rejects with RpcError (the answer was an error),
     *   TimeoutError, ClosedError, InvalidResponseError, or the signal's reason
     */
    call(method: string, params?: any[] | object, { timeoutMs, signal, onProgress }?: {
        timeoutMs?: number;
        signal?: AbortSignal;
        onProgress?: (value: any) => void;
    }): Promise<any>;
    /**
     * Send a notification: no answer comes, not even an error.
     * Throws TypeError for bad arguments and ClosedError when the connection is gone.
     * @param {string} method
     * @param {Array|object} [params]
     */
    notify(method: string, params?: any[] | object): void;
    /**
     * Start a batch: add calls and notifications, then `send()` them as ONE array frame.
     * @returns {Batch}
     */
    batch(): Batch;
    /**
     * Serve requests for `name`. The handler gets `(params, peer, cx)` (params `undefined`
     * when absent; `cx` a HandlerContext: the cancel `signal`, `progress`) and may be
     * async and may call back through `peer`. Its return value is
     * the result (`undefined` is sent as `null`); an RpcError it throws is the answer;
     * any other throw answers -32603 Internal error. A notification of `name` runs it too,
     * and its answer is dropped, unless a `notification` handler of that name exists.
     * @param {string} name not beginning with `rpc.` (reserved by the specification),
     *   not registered yet (registering twice throws)
     * @param {(params: any, peer: Peer, cx: HandlerContext) => any} handler
     * @returns {Peer} this, to chain
     */
    method(name: string, handler: (params: any, peer: Peer, cx: HandlerContext) => any): Peer;
    /**
     * Handle notifications for `name`, one at a time in arrival order. Whatever the
     * handler returns or throws goes nowhere (throws reach `onHandlerError`). It takes
     * precedence over a `method` of the same name for notifications.
     * @param {string} name not beginning with `rpc.`, not registered yet
     * @param {(params: any, peer: Peer) => any} handler
     * @returns {Peer} this, to chain
     */
    notification(name: string, handler: (params: any, peer: Peer) => any): Peer;
    /**
     * Close the connection. Pending calls are rejected at once with ClosedError; `closed`
     * resolves when the socket reports its close.
     * @param {number} [code=1000] 1000 or 3000-4999
     * @param {string} [reason]
     */
    close(code?: number, reason?: string): void;
    #private;
}
/**
 * A batch under construction; see `Peer.batch()`.
 * `send()` resolves to one outcome per call, in the order added:
 * `{ ok: true, result }` or `{ ok: false, error }` (error: RpcError, TimeoutError,
 * ClosedError or InvalidResponseError). It never rejects for one failed call; it rejects
 * only with ClosedError when nothing could be sent.
 */
export class Batch {
    /** @param {Peer} peer */
    constructor(peer: Peer);
    /** Add a call. @param {string} method @param {Array|object} [params] @returns {Batch} */
    call(method: string, params?: any[] | object): Batch;
    /** Add a notification. @param {string} method @param {Array|object} [params] @returns {Batch} */
    notify(method: string, params?: any[] | object): Batch;
    /**
     * Send the batch as one array frame. An empty batch sends nothing; a batch of only
     * notifications resolves to `[]` once sent.
     * @param {{ timeoutMs?: number }} [options] timeout for each call in the batch
     * @returns {Promise<Array<{ok: true, result: *} | {ok: false, error: Error}>>}
     */
    send({ timeoutMs }?: {
        timeoutMs?: number;
    }): Promise<Array<{
        ok: true;
        result: any;
    } | {
        ok: false;
        error: Error;
    }>>;
    #private;
}
/** See `reconnecting`. */
export class ReconnectingPeer extends EventTarget {
    /** @param {string} url @param {PeerOptions & ReconnectOptions} [options] */
    constructor(url: string, options?: PeerOptions & ReconnectOptions);
    /** Default per-call timeout in ms, covering the wait for the link. */
    timeoutMs: number;
    /** @returns {LinkState} where the link stands now */
    get state(): LinkState;
    /** The current connection once `onConnect` has run on it, or null while the link is down. */
    get peer(): Peer;
    /** Serve calls of `name` on every connection; as `Peer.method`. @returns {ReconnectingPeer} */
    method(name: any, handler: any): ReconnectingPeer;
    /** Handle notifications of `name` on every connection; as `Peer.notification`. @returns {ReconnectingPeer} */
    notification(name: any, handler: any): ReconnectingPeer;
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
     * @returns {Promise<*>}
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
     * @returns {Promise<void>}
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
     * the largest cap
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
};
/**
 * Where a ReconnectingPeer stands: `{ state: 'connecting', attempt }`,
 * `{ state: 'connected' }` (the onConnect hook has run), `{ state: 'waiting', attempt,
 * retryInMs }` (before the next attempt), `{ state: 'stopped' }` (after `close()`).
 * `attempt` counts failures since the last success.
 */
export type LinkState = {
    state: "connecting" | "connected" | "waiting" | "stopped";
    attempt?: number;
    retryInMs?: number;
};
export type PeerOptions = {
    /**
     * default per-call timeout; 0 or Infinity: none
     */
    timeoutMs?: number;
    /**
     * sees every text frame
     */
    onFrame?: (direction: "in" | "out", text: string) => void;
    /**
     * sees handler
     * failures that are not RpcError (the caller only gets -32603); default console.error
     */
    onHandlerError?: (error: unknown, method: string) => void;
    /**
     * the cancel a given-up call sends:
     * `$/cancelRequest` (`'lsp'`), `notifications/cancelled` (`'mcp'`), or none (`null`).
     * Incoming cancels are understood in either form.
     */
    cancelStyle?: "lsp" | "mcp" | null;
};
/**
 * What a method handler gets as its third argument.
 */
export type HandlerContext = {
    /**
     * aborts when the caller cancels the call. A handler that
     * throws after it aborted answers -32800 Request cancelled; one that returns answers
     * with what it returned (a partial result, say). In the MCP form no answer is sent.
     */
    signal: AbortSignal;
    /**
     * whether the caller asked for progress
     */
    wantsProgress: boolean;
    /**
     * sends a progress value to the caller, if
     * it asked (else does nothing); values arrive in order, before the answer
     */
    progress: (value: any) => void;
};
