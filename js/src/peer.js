// peer.js: one JSON-RPC 2.0 peer over one WebSocket, with the same semantics as the Rust
// `Peer`. It serves the calls that arrive (registered with `method` / `notification`)
// and issues its own (`call`, `notify`, `batch`), matching answers to calls by id.
// Either side may call at any time, also from inside a handler.
//
// Choices the specification leaves to us, beside those in wire.js (the same as the Rust
// peer where it has them):
// - A response whose id is not one of ours (a late answer, `id: null`) is dropped; but
//   an Invalid Request or Parse error with `id: null` while exactly one batch of our
//   calls waits is that batch's refusal, and ends its calls (pending.js).
// - Binary frames are ignored (no answer).
// - A notification for a name that has only a method runs the method and drops its
//   answer (the specification calls a notification a request without an id); a
//   notification handler of the same name takes precedence.
// - Incoming cancels and progress are handled as they arrive, before the ordered
//   notifications.
// - What waits is bounded (limits.js): our calls awaiting answers, frames sent while the
//   socket connects, and what the socket buffers; and so is the work the other side
//   starts here: handlers of its calls running, its notifications waiting in order.
import { Batch } from './batch.js';
import { ClosedError, LimitError } from './errors.js';
import { WaitingSends, limitOf } from './limits.js';
import { Pending } from './pending.js';
import { Dispatch } from './dispatch.js';
import { cancelNotification, request, truncateUtf8, utf8Length } from './wire.js';

// WebSocket readyState values; the socket may be a fake without the static constants.
const CONNECTING = 0;
const OPEN = 1;

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
export async function connect(url, options = {}) {
  const WS = webSocketClass(options);
  const peer = new Peer(new WS(url), options);
  await peer.opened;
  return peer;
}

/**
 * The WebSocket class `options` name, or the global one; a TypeError that says what to
 * do when there is neither (Node 20 without `--experimental-websocket`).
 * @param {{ WebSocket?: typeof WebSocket }} options
 * @returns {typeof WebSocket}
 */
export function webSocketClass(options) {
  const WS = options.WebSocket ?? globalThis.WebSocket;
  if (typeof WS !== 'function') {
    throw new TypeError(
      'no WebSocket class: pass one as the WebSocket option (from the "ws" package, say), ' +
        'or run Node 20 with --experimental-websocket',
    );
  }
  return WS;
}

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
  #socket;
  #onFrame;
  #cancelStyle;
  #maxBufferedAmount;
  #nextId = 1;
  #pending;
  #dispatch;
  /** @type {{text: string, release: () => void, id?: number}[]} frames sent while the socket connects */
  #queued = [];
  #waiting;
  /** @type {ClosedError | null} set once closed, locally or by the socket */
  #closedBy = null;
  #lastError;

  /** @param {WebSocket} socket @param {PeerOptions} [options] */
  constructor(socket, options = {}) {
    this.#socket = socket;
    /** Default per-call timeout in ms. */
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.#onFrame = options.onFrame;
    this.#cancelStyle = options.cancelStyle === undefined ? 'lsp' : options.cancelStyle;
    this.#pending = new Pending(limitOf(options, 'maxPendingCalls'));
    this.#waiting = new WaitingSends(limitOf(options, 'maxQueued'), limitOf(options, 'maxQueuedBytes'));
    this.#maxBufferedAmount = limitOf(options, 'maxBufferedAmount');
    this.#dispatch = new Dispatch({
      peer: this,
      pending: this.#pending,
      reply: (text) => this.#reply(text),
      notice: (text) => this.#notice(text),
      maxBatchLen: limitOf(options, 'maxBatchLen'),
      maxRunningCalls: limitOf(options, 'maxRunningCalls'),
      maxQueuedNotifications: limitOf(options, 'maxQueuedNotifications'),
      // The Rust peer closes a peer it cannot keep up with by 1008; a browser's WebSocket
      // may only send 1000 and 3000-4999, hence 4008 (as for `maxBufferedAmount`).
      overflow: (reason) => this.close(4008, reason),
      onHandlerError: options.onHandlerError ?? ((e, m) => console.error(`jsonrpc-peer: handler "${m}" failed:`, e)),
    });

    /** @type {any} */
    let opened, failed, closed;
    /**
     * Resolves when the socket is open; rejects with ClosedError if it closes first.
     * @type {Promise<void>}
     */
    this.opened = new Promise((res, rej) => ((opened = res), (failed = rej)));
    this.opened.catch(() => {}); // a failed open is also reported by `closed`: not unhandled
    /**
     * Resolves with `{ code, reason, wasClean }` when the socket has closed.
     * @type {Promise<{code: number, reason: string, wasClean: boolean}>}
     */
    this.closed = new Promise((res) => (closed = res));

    socket.addEventListener('open', () => {
      const queued = this.#queued;
      this.#queued = [];
      for (const { text, release } of queued) {
        release();
        this.#write(text);
      }
      opened();
    });
    socket.addEventListener('message', (ev) => this.#receive(ev.data));
    let closeSeen = false;
    const onClose = (/** @type {any} */ ev) => {
      if (closeSeen) return;
      closeSeen = true;
      const info = { code: ev?.code ?? 1006, reason: ev?.reason ?? '', wasClean: !!ev?.wasClean };
      const why = `code ${info.code}${info.reason ? ` (${info.reason})` : ''}` +
        (this.#lastError && !info.wasClean ? `: ${this.#lastError}` : '');
      this.#shutdown(new ClosedError(why, info));
      failed(new ClosedError(`before it opened, ${why}`, info));
      closed(info);
    };
    socket.addEventListener('error', (/** @type {any} */ ev) => {
      // Keep the error: the close event that follows often says less (1006 and no reason).
      this.#lastError = ev?.message ?? ev?.error?.message;
      // A browser has the socket CLOSED when a failed handshake fires `error`, and fires
      // `close` next. Node 20's built-in WebSocket (--experimental-websocket) fires only
      // `error` and stays CONNECTING: with no `close` by the next task, the socket is
      // taken as closed (1006), or a reconnecting peer would never dial again.
      if (socket.readyState === CONNECTING) setTimeout(() => onClose({ code: 1006, reason: '', wasClean: false }), 0);
    });
    socket.addEventListener('close', onClose);
    if (socket.readyState === OPEN) opened();
    // A socket already CLOSED fired its close event before we listened.
    else if (socket.readyState === 3) onClose({ code: 1006, reason: '', wasClean: false });
  }

  /** The socket this peer runs over. */
  get socket() {
    return this.#socket;
  }

  /** Number of outgoing calls still awaiting their answer. */
  get pendingCount() {
    return this.#pending.size;
  }

  /** Number of incoming calls whose handlers are still running. */
  get runningCount() {
    return this.#dispatch.runningCount;
  }

  /** Number of frames sent while the socket connects, waiting for it to open. */
  get queuedCount() {
    return this.#queued.length;
  }

  /** Whether the connection is gone (closed locally or by the socket). */
  get isClosed() {
    return this.#closedBy !== null;
  }

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
  call(method, params, { timeoutMs = this.timeoutMs, signal, onProgress } = {}) {
    const msg = request(method, params, this.#nextId);
    if (signal?.aborted) return Promise.reject(signal.reason);
    const what = `call to "${method}"`;
    try {
      this.#pending.check(1, what);
    } catch (e) {
      return Promise.reject(e);
    }
    const id = this.#nextId++;
    if (onProgress) msg.progressToken = id;
    const text = JSON.stringify(msg);
    const { promise, entry } = this.#pending.add(id, method, timeoutMs, (e) => this.#giveUp(id, e));
    entry.onProgress = onProgress;
    if (signal) {
      const onAbort = () => this.#giveUp(id, signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      entry.unlisten = () => signal.removeEventListener('abort', onAbort);
    }
    try {
      this.#send(text, what, id);
      entry.sent = true;
    } catch (e) {
      this.#pending.settle(id, (p) => p.reject(e));
    }
    return promise;
  }

  /**
   * Send a notification: no answer comes, not even an error.
   * Throws TypeError for bad arguments, ClosedError when the connection is gone, and
   * LimitError (nothing sent) past `maxQueued`, `maxQueuedBytes` or `maxBufferedAmount`.
   * @param {string} method
   * @param {Array|object} [params]
   */
  notify(method, params) {
    this.#send(JSON.stringify(request(method, params)), `notification "${method}"`);
  }

  /**
   * Start a batch: add calls and notifications, then `send()` them as ONE array frame.
   * @returns {Batch}
   */
  batch() {
    return new Batch((items, timeoutMs = this.timeoutMs) => this.#sendBatch(items, timeoutMs));
  }

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
  method(name, handler) {
    this.#dispatch.method(name, handler);
    return this;
  }

  /**
   * Handle notifications for `name`, one at a time in arrival order. The handler gets
   * `(cx, params)` as a method does (its `signal` never aborts). Whatever it returns or
   * throws goes nowhere (throws reach `onHandlerError`). It takes precedence over a
   * `method` of the same name for notifications.
   * @param {string} name not beginning with `rpc.`, not registered yet
   * @param {Handler} handler
   * @returns {this} to chain
   */
  notification(name, handler) {
    this.#dispatch.notification(name, handler);
    return this;
  }

  /**
   * Close the connection. Pending calls are rejected at once with ClosedError; `closed`
   * resolves when the socket reports its close.
   * @param {number} [code=1000] 1000 or 3000-4999
   * @param {string} [reason] cut to the 123 bytes of UTF-8 a close frame has room for
   *   (a WebSocket throws on a longer one)
   */
  close(code = 1000, reason = '') {
    reason = truncateUtf8(String(reason), 123);
    this.#socket.close(code, reason);
    this.#shutdown(new ClosedError(`closed locally with code ${code}${reason ? ` (${reason})` : ''}`));
  }

  // ---- outgoing ------------------------------------------------------------------

  /** Ends our call `id` with `error` and tells the other side, if it was sent. */
  #giveUp(id, error) {
    const entry = this.#pending.get(id);
    if (!entry) return;
    this.#pending.settle(id, (p) => p.reject(error));
    // A call still waiting for the socket to open is taken back: neither it nor its
    // cancel goes out.
    const waiting = this.#queued.findIndex((q) => q.id === id);
    if (waiting >= 0) {
      this.#queued.splice(waiting, 1)[0].release();
      return;
    }
    if (!entry.sent || !this.#cancelStyle || this.#closedBy) return;
    this.#notice(cancelNotification(this.#cancelStyle, id));
  }

  /**
   * Sends a batch's items (already checked) as one array frame; see `Batch.send`.
   * @param {import('./batch.js').BatchItem[]} items @param {number} timeoutMs
   * @returns {Promise<any>[]} one per call, in order
   */
  #sendBatch(items, timeoutMs) {
    const calls = items.filter((it) => it.isCall).length;
    this.#pending.check(calls, `a batch of ${calls} call${calls === 1 ? '' : 's'}`);
    const msgs = [];
    const answers = [];
    for (const it of items) {
      if (!it.isCall) {
        msgs.push(request(it.method, it.params));
        continue;
      }
      const id = this.#nextId++;
      msgs.push(request(it.method, it.params, id));
      const { promise, entry } = this.#pending.add(id, it.method, timeoutMs, (e) => this.#giveUp(id, e));
      answers.push({ id, promise, entry });
    }
    this.#pending.batch(answers.map((a) => a.id));
    try {
      this.#send(JSON.stringify(msgs), `a batch of ${items.length}`);
    } catch (e) {
      for (const a of answers) this.#pending.settle(a.id, () => {});
      throw e;
    }
    for (const a of answers) a.entry.sent = true;
    return answers.map((a) => a.promise);
  }

  /**
   * Sends one of our own frames (a call, a notification, a batch), or throws: ClosedError
   * when the connection is gone, LimitError past a bound (nothing is sent).
   * @param {string} text @param {string} what what is sent, for the errors
   * @param {number} [id] the call's id, when `text` is one call (it can be taken back
   *   while it waits for the socket to open)
   */
  #send(text, what, id) {
    if (this.#closedBy) throw this.#closedBy;
    const state = this.#socket.readyState;
    if (state === CONNECTING) {
      const release = this.#waiting.admit(utf8Length(text), what);
      this.#queued.push({ text, release, id });
    } else if (state === OPEN) {
      const buffered = this.#socket.bufferedAmount ?? 0;
      if (buffered >= this.#maxBufferedAmount) {
        throw new LimitError(what, 'maxBufferedAmount', this.#maxBufferedAmount, `the socket already buffers ${buffered} bytes`);
      }
      this.#write(text);
    } else {
      // A closing browser socket drops sends silently; say so instead.
      throw new ClosedError(`socket is ${state === 2 ? 'closing' : 'closed'}`);
    }
  }

  /**
   * Sends an answer to the other side's call. When the socket buffers more than
   * `maxBufferedAmount`, the other side does not read what we send: as the Rust peer
   * closes a peer that does not read with 1008, the connection closes, with 4008 (a
   * browser's WebSocket may only send 1000 and 3000-4999).
   * @param {string} text
   */
  #reply(text) {
    try {
      this.#send(text, 'an answer');
    } catch (e) {
      if (e instanceof LimitError && e.limit === 'maxBufferedAmount') this.close(4008, 'outgoing buffer full');
      // Closed meanwhile: the caller on the other side learns it from its own close.
    }
  }

  /**
   * Sends a cancel or a progress value, which may be skipped: past a bound, or closed.
   * @param {string} text @returns {boolean} whether it was sent
   */
  #notice(text) {
    try {
      this.#send(text, 'a notice');
      return true;
    } catch {
      return false;
    }
  }

  #write(text) {
    this.#frame('out', text);
    this.#socket.send(text);
  }

  #frame(direction, text) {
    if (!this.#onFrame) return;
    try {
      this.#onFrame(direction, text);
    } catch {
      // A broken log hook must not break the connection.
    }
  }

  #shutdown(error) {
    if (this.#closedBy) return;
    this.#closedBy = error;
    for (const { release } of this.#queued) release();
    this.#queued = [];
    this.#pending.rejectAll(error);
  }

  // ---- incoming ------------------------------------------------------------------

  /** @param {unknown} data */
  #receive(data) {
    if (typeof data !== 'string') return; // binary frame: see the class comment
    this.#frame('in', data);
    if (this.#closedBy) return;
    this.#dispatch.receive(data);
  }
}
