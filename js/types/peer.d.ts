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
 * The WebSocket class `options` name, or the global one; a TypeError that says what to
 * do when there is neither (Node 20 without `--experimental-websocket`).
 * @param {{ WebSocket?: typeof WebSocket }} options
 * @returns {typeof WebSocket}
 */
export function webSocketClass(options: {
    WebSocket?: typeof WebSocket;
}): typeof WebSocket;
/**
 * @typedef {object} PeerOptions
 * @property {number} [timeoutMs=30000] default per-call timeout; 0, Infinity or more than
 *   2^31 - 1 (about 24.8 days, setTimeout's longest delay): none
 * @property {(direction: 'in'|'out', text: string) => void} [onFrame] sees every text frame
 * @property {(error: unknown, method: string) => void} [onHandlerError] sees handler
 *   failures that are not RpcError (the caller only gets -32603); default console.error
 * @property {'lsp'|'mcp'|null} [cancelStyle='lsp'] the cancel a given-up call sends:
 *   `$/cancelRequest` (`'lsp'`), `notifications/cancelled` (`'mcp'`), or none (`null`).
 *   Incoming cancels are understood in either form.
 * @property {number} [maxPendingCalls=1024] how many of our calls may wait for their
 *   answers at once; past it `call` rejects at once (and a batch's `send` whose calls
 *   do not fit) with LimitError
 * @property {number} [maxQueued=1024] how many sends may wait for the connection (a
 *   socket still connecting; for a ReconnectingPeer, a link that is down); past it
 *   `call` rejects and `notify` throws with LimitError
 * @property {number} [maxQueuedBytes=1048576] how many bytes (UTF-8) those sends may
 *   hold; a send goes in while fewer wait, so one larger than this can still go
 * @property {number} [maxBatchLen=1000] the longest incoming batch (calls and
 *   notifications in one array) this peer runs; a longer one is answered with one
 *   -32600 error saying so and runs nothing, as the Rust peer's `max_batch_len`
 * @property {number} [maxRunningCalls=256] how many handlers of the other side's calls
 *   may run at once (each call of a batch counts; a handler that returns a plain value
 *   is done at once); a call that arrives past it is answered at once with -32001 Too
 *   many calls running (`ErrorCode.OVERLOADED`) and its handler does not run. A
 *   browser cannot stop reading, as the Rust peer does past its `max_in_flight`.
 *   Notifications for a notification handler do not count; one that runs a method
 *   (there is no notification handler of its name) counts as a call, and past the
 *   limit it is dropped and `onHandlerError` gets an RpcError -32001 saying so.
 * @property {number} [maxQueuedNotifications=256] how many of the other side's
 *   notifications may wait for their ordered handler (`notification`), as the Rust
 *   peer's `notification_queue`; a frame with one more closes the connection with 4008
 *   `too many notifications queued (limit N)`, since dropping one would break their
 *   order. A frame that arrives with room is queued whole, so at most the limit plus
 *   one batch wait.
 * @property {number} [maxBufferedAmount=1048576] how many bytes the socket may buffer
 *   (its `bufferedAmount`: sent but not yet on the network) before our sends are
 *   refused at once with LimitError (`call` and `batch().send()` reject, `notify`
 *   throws): a WebSocket has no event for a drained buffer, so waiting would mean
 *   polling, and the caller knows best whether to retry, drop or slow down. Past it
 *   an answer to the other side's call closes the connection with 4008 `outgoing
 *   buffer full` (the other side does not read what we send; a browser may not send
 *   1008 itself), and a cancel or progress value is skipped.
 *   Every limit takes Infinity for none.
 */
/**
 * What a handler gets first, as in the Rust peer's `(cx, params)`.
 * @typedef {object} HandlerContext
 * @property {Peer} peer the connection the call or notification came from: call the
 *   other side back through it
 * @property {AbortSignal} signal aborts when the caller cancels the call (never, for a
 *   notification). A handler that throws after it aborted answers -32800 Request
 *   cancelled; one that returns answers with what it returned (a partial result, say).
 *   In the MCP form no answer is sent.
 * @property {boolean} wantsProgress whether the caller asked for progress
 * @property {(value: any) => boolean} progress sends a progress value to the caller, if
 *   it asked; values arrive in order, before the answer. False when nothing was sent:
 *   not asked, cancelled, or skipped past `maxBufferedAmount`.
 */
/**
 * A method or notification handler: `(cx, params)`, params `undefined` when absent. It
 * may be async.
 * @typedef {(cx: HandlerContext, params: any) => any} Handler
 */
/**
 * A JSON-RPC 2.0 peer over one socket.
 *
 * The socket is anything shaped like the browser's WebSocket: `send(text)`,
 * `close(code, reason)`, `readyState` (0 connecting, 1 open, 2 closing, 3 closed),
 * `bufferedAmount` (read if present) and `addEventListener` for `open`, `message` (event
 * with `data`), `error` and `close` (event with `code`, `reason`, `wasClean`). The Peer
 * only adds listeners, so other code may listen to the same socket. Binary frames are
 * ignored: JSON-RPC travels in text frames, and answering a binary frame with a Parse
 * error would only invite a loop with a confused peer.
 */
export class Peer {
    /** @param {WebSocket} socket @param {PeerOptions} [options] */
    constructor(socket: WebSocket, options?: PeerOptions);
    /** Default per-call timeout in ms. */
    timeoutMs: number;
    /**
     * Resolves when the socket is open; rejects with ClosedError if it closes first.
     * @type {Promise<void>}
     */
    opened: Promise<void>;
    /**
     * Resolves with `{ code, reason, wasClean }` when the socket has closed.
     * @type {Promise<{code: number, reason: string, wasClean: boolean}>}
     */
    closed: Promise<{
        code: number;
        reason: string;
        wasClean: boolean;
    }>;
    /** The socket this peer runs over. */
    get socket(): WebSocket;
    /** Number of outgoing calls still awaiting their answer. */
    get pendingCount(): number;
    /** Number of incoming calls whose handlers are still running. */
    get runningCount(): number;
    /** Number of frames sent while the socket connects, waiting for it to open. */
    get queuedCount(): number;
    /** Whether the connection is gone (closed locally or by the socket). */
    get isClosed(): boolean;
    /**
     * Call `method` on the other side.
     * Throws TypeError at once for a non-string method or params that are neither an
     * array nor an object (`undefined` leaves `params` out).
     *
     * With `signal`, aborting it gives the call up: the other side is sent a cancel (see
     * `cancelStyle`) and the call rejects at once with `signal.reason`; a signal already
     * aborted sends nothing. A timeout sends the cancel too. A call given up while the
     * socket is still connecting is not sent at all, nor its cancel. With `onProgress`, the call
     * asks the other side for progress and `onProgress(value)` sees each value, in order,
     * before the call resolves; without it, no progress is asked for or delivered.
     * @param {string} method
     * @param {Array|object} [params]
     * @param {{ timeoutMs?: number, signal?: AbortSignal, onProgress?: (value: any) => void }} [options]
     * @returns {Promise<*>} the result; rejects with RpcError (the answer was an error),
     *   TimeoutError, ClosedError, InvalidResponseError, LimitError (nothing was sent: see
     *   the `max*` options), or the signal's reason
     */
    call(method: string, params?: any[] | object, { timeoutMs, signal, onProgress }?: {
        timeoutMs?: number;
        signal?: AbortSignal;
        onProgress?: (value: any) => void;
    }): Promise<any>;
    /**
     * Send a notification: no answer comes, not even an error.
     * Throws TypeError for bad arguments, ClosedError when the connection is gone, and
     * LimitError (nothing sent) past `maxQueued`, `maxQueuedBytes` or `maxBufferedAmount`.
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
     * Serve requests for `name`. The handler gets `(cx, params)`: `cx` a HandlerContext
     * (`cx.peer` to call back, the cancel `signal`, `progress`), params `undefined` when
     * absent. It may be async. Its return value is the result (`undefined` is sent as
     * `null`); an RpcError it throws is the answer; any other throw answers -32603 Internal
     * error. A notification of `name` runs it too, and its answer is dropped, unless a
     * `notification` handler of that name exists.
     * @param {string} name not beginning with `rpc.` (reserved by the specification),
     *   not registered yet (registering twice throws)
     * @param {Handler} handler
     * @returns {this} to chain
     */
    method(name: string, handler: Handler): this;
    /**
     * Handle notifications for `name`, one at a time in arrival order. The handler gets
     * `(cx, params)` as a method does (its `signal` never aborts). Whatever it returns or
     * throws goes nowhere (throws reach `onHandlerError`). It takes precedence over a
     * `method` of the same name for notifications.
     * @param {string} name not beginning with `rpc.`, not registered yet
     * @param {Handler} handler
     * @returns {this} to chain
     */
    notification(name: string, handler: Handler): this;
    /**
     * Close the connection. Pending calls are rejected at once with ClosedError; `closed`
     * resolves when the socket reports its close.
     * @param {number} [code=1000] 1000 or 3000-4999
     * @param {string} [reason] cut to the 123 bytes of UTF-8 a close frame has room for
     *   (a WebSocket throws on a longer one)
     */
    close(code?: number, reason?: string): void;
    #private;
}
export type PeerOptions = {
    /**
     * default per-call timeout; 0, Infinity or more than
     * 2^31 - 1 (about 24.8 days, setTimeout's longest delay): none
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
    /**
     * how many of our calls may wait for their
     * answers at once; past it `call` rejects at once (and a batch's `send` whose calls
     * do not fit) with LimitError
     */
    maxPendingCalls?: number;
    /**
     * how many sends may wait for the connection (a
     * socket still connecting; for a ReconnectingPeer, a link that is down); past it
     * `call` rejects and `notify` throws with LimitError
     */
    maxQueued?: number;
    /**
     * how many bytes (UTF-8) those sends may
     * hold; a send goes in while fewer wait, so one larger than this can still go
     */
    maxQueuedBytes?: number;
    /**
     * the longest incoming batch (calls and
     * notifications in one array) this peer runs; a longer one is answered with one
     * -32600 error saying so and runs nothing, as the Rust peer's `max_batch_len`
     */
    maxBatchLen?: number;
    /**
     * how many handlers of the other side's calls
     * may run at once (each call of a batch counts; a handler that returns a plain value
     * is done at once); a call that arrives past it is answered at once with -32001 Too
     * many calls running (`ErrorCode.OVERLOADED`) and its handler does not run. A
     * browser cannot stop reading, as the Rust peer does past its `max_in_flight`.
     * Notifications for a notification handler do not count; one that runs a method
     * (there is no notification handler of its name) counts as a call, and past the
     * limit it is dropped and `onHandlerError` gets an RpcError -32001 saying so.
     */
    maxRunningCalls?: number;
    /**
     * how many of the other side's
     * notifications may wait for their ordered handler (`notification`), as the Rust
     * peer's `notification_queue`; a frame with one more closes the connection with 4008
     * `too many notifications queued (limit N)`, since dropping one would break their
     * order. A frame that arrives with room is queued whole, so at most the limit plus
     * one batch wait.
     */
    maxQueuedNotifications?: number;
    /**
     * how many bytes the socket may buffer
     * (its `bufferedAmount`: sent but not yet on the network) before our sends are
     * refused at once with LimitError (`call` and `batch().send()` reject, `notify`
     * throws): a WebSocket has no event for a drained buffer, so waiting would mean
     * polling, and the caller knows best whether to retry, drop or slow down. Past it
     * an answer to the other side's call closes the connection with 4008 `outgoing
     * buffer full` (the other side does not read what we send; a browser may not send
     * 1008 itself), and a cancel or progress value is skipped.
     * Every limit takes Infinity for none.
     */
    maxBufferedAmount?: number;
};
/**
 * What a handler gets first, as in the Rust peer's `(cx, params)`.
 */
export type HandlerContext = {
    /**
     * the connection the call or notification came from: call the
     * other side back through it
     */
    peer: Peer;
    /**
     * aborts when the caller cancels the call (never, for a
     * notification). A handler that throws after it aborted answers -32800 Request
     * cancelled; one that returns answers with what it returned (a partial result, say).
     * In the MCP form no answer is sent.
     */
    signal: AbortSignal;
    /**
     * whether the caller asked for progress
     */
    wantsProgress: boolean;
    /**
     * sends a progress value to the caller, if
     * it asked; values arrive in order, before the answer. False when nothing was sent:
     * not asked, cancelled, or skipped past `maxBufferedAmount`.
     */
    progress: (value: any) => boolean;
};
/**
 * A method or notification handler: `(cx, params)`, params `undefined` when absent. It
 * may be async.
 */
export type Handler = (cx: HandlerContext, params: any) => any;
import { Batch } from './batch.js';
