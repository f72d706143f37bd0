// jsonrpc-peer.js: the browser's JSON-RPC 2.0 peer, with the same semantics as the Rust `Peer`.
// A dependency-free ES module: import it as it is, no build step.
//
// One Peer per WebSocket. It serves the calls that arrive (registered with `method` /
// `notification`) and issues its own (`call`, `notify`, `batch`), matching answers to
// calls by id. Either side may call at any time, also from inside a handler.
//
// Choices the specification leaves to us (the same as the Rust peer where it has them):
// - Only a *valid* Request without an `id` member is a notification, and it is never
//   answered. An invalid object is answered with -32600 even without an `id` (the
//   specification's own example `{"jsonrpc": "2.0", "method": 1, "params": "bar"}`).
// - A response whose id is not one of ours (a late answer, `id: null`) is dropped.
// - Ids are echoed as JSON.parse reads them: integers beyond 2^53 lose precision, as in
//   any JavaScript JSON-RPC library.
// - Binary frames are ignored (no answer).
// - A notification for a name that has only a method runs the method and drops its
//   answer (the specification calls a notification a request without an id); a
//   notification handler of the same name takes precedence.
// - Cancellation and progress have the Rust peer's wire forms: a call given up (its
//   AbortSignal aborted, or its timeout passed) sends
//   `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":ID}}` (or MCP's
//   `notifications/cancelled` with `requestId`); a caller asks for progress with a
//   top-level `"progressToken"` member and gets
//   `{"method":"$/progress","params":{"token":T,"value":V}}` notifications. Incoming
//   cancels and progress are handled as they arrive, before the ordered notifications.

/** The error codes the specification defines. */
export const ErrorCode = Object.freeze({
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  /** The caller cancelled the call (the Language Server Protocol's RequestCancelled). */
  REQUEST_CANCELLED: -32800,
});

const CANCEL_LSP = '$/cancelRequest';
const CANCEL_MCP = 'notifications/cancelled';
const PROGRESS = '$/progress';

const MESSAGES = {
  [ErrorCode.PARSE_ERROR]: 'Parse error',
  [ErrorCode.INVALID_REQUEST]: 'Invalid Request',
  [ErrorCode.METHOD_NOT_FOUND]: 'Method not found',
  [ErrorCode.INVALID_PARAMS]: 'Invalid params',
  [ErrorCode.INTERNAL_ERROR]: 'Internal error',
  [ErrorCode.REQUEST_CANCELLED]: 'Request cancelled',
};

// WebSocket readyState values; the socket may be a fake without the static constants.
const CONNECTING = 0;
const OPEN = 1;

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
  constructor(code, message = MESSAGES[code] ?? 'Server error', data) {
    super(message);
    this.name = 'RpcError';
    this.code = code;
    this.data = data;
  }

  /** The wire shape `{ code, message, data? }`. */
  toJSON() {
    const e = { code: this.code, message: this.message };
    if (this.data !== undefined) e.data = this.data;
    return e;
  }
}

/** A call that got no answer within its `timeoutMs`. Local: it never travels on the wire. */
export class TimeoutError extends Error {
  /** @param {string} method @param {number} timeoutMs */
  constructor(method, timeoutMs) {
    super(`call to "${method}" timed out after ${timeoutMs} ms`);
    this.name = 'TimeoutError';
    this.method = method;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * The connection is gone (or was never open), so a call cannot be answered.
 * `close` holds `{ code, reason, wasClean }` when a close event said why.
 */
export class ClosedError extends Error {
  /** @param {string} why @param {{code:number, reason:string, wasClean:boolean}} [close] */
  constructor(why, close) {
    super(`connection closed: ${why}`);
    this.name = 'ClosedError';
    this.close = close;
  }
}

/**
 * The other side answered one of our calls with something that is not a valid response
 * (no `"jsonrpc": "2.0"`, both `result` and `error`, a malformed `error`). The call fails
 * at once rather than waiting for its timeout. Local: it never travels on the wire.
 */
export class InvalidResponseError extends Error {
  /** @param {string} problem @param {object} response the response as received */
  constructor(problem, response) {
    super(`invalid response: ${problem}`);
    this.name = 'InvalidResponseError';
    this.response = response;
  }
}

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
  const WS = options.WebSocket ?? globalThis.WebSocket;
  const peer = new Peer(new WS(url), options);
  await peer.opened;
  return peer;
}

/**
 * @typedef {object} PeerOptions
 * @property {number} [timeoutMs=30000] default per-call timeout; 0 or Infinity: none
 * @property {(direction: 'in'|'out', text: string) => void} [onFrame] sees every text frame
 * @property {(error: unknown, method: string) => void} [onHandlerError] sees handler
 *   failures that are not RpcError (the caller only gets -32603); default console.error
 * @property {'lsp'|'mcp'|null} [cancelStyle='lsp'] the cancel a given-up call sends:
 *   `$/cancelRequest` (`'lsp'`), `notifications/cancelled` (`'mcp'`), or none (`null`).
 *   Incoming cancels are understood in either form.
 */

/**
 * What a method handler gets as its third argument.
 * @typedef {object} HandlerContext
 * @property {AbortSignal} signal aborts when the caller cancels the call. A handler that
 *   throws after it aborted answers -32800 Request cancelled; one that returns answers
 *   with what it returned (a partial result, say). In the MCP form no answer is sent.
 * @property {boolean} wantsProgress whether the caller asked for progress
 * @property {(value: any) => void} progress sends a progress value to the caller, if
 *   it asked (else does nothing); values arrive in order, before the answer
 */

// Set in Peer's static block: lets Batch send through the Peer's one private method for
// it, without making any of the Peer's state reachable from outside the module.
let sendBatch;

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
  #socket;
  #onFrame;
  #onHandlerError;
  #nextId = 1;
  /** @type {Map<number, {resolve: Function, reject: Function, timer: any, sent: boolean, onProgress?: Function, unlisten?: Function}>} */
  #pending = new Map();
  // Incoming calls still running, by their id's JSON text: what a cancel reaches.
  /** @type {Map<string, {controller: AbortController, style: null|'lsp'|'mcp'}>} */
  #running = new Map();
  #cancelStyle;
  #methods = new Map();
  #notifications = new Map();
  // Notifications run one after another, in arrival order (as in the Rust peer):
  // a stream of updates must not be applied out of order by async handlers.
  #notifyChain = Promise.resolve();
  #queued = []; // frames sent while the socket was still connecting
  #closedBy = null; // ClosedError once closed, locally or by the socket
  #lastError;

  static {
    sendBatch = (peer, items, timeoutMs) => peer.#sendBatch(items, timeoutMs);
  }

  /** @param {WebSocket} socket @param {PeerOptions} [options] */
  constructor(socket, options = {}) {
    this.#socket = socket;
    /** Default per-call timeout in ms. */
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.#onFrame = options.onFrame;
    this.#cancelStyle = options.cancelStyle === undefined ? 'lsp' : options.cancelStyle;
    this.#onHandlerError =
      options.onHandlerError ?? ((e, m) => console.error(`jsonrpc-peer: handler "${m}" failed:`, e));

    let opened, failed, closed;
    /** Resolves when the socket is open; rejects with ClosedError if it closes first. */
    this.opened = new Promise((res, rej) => ((opened = res), (failed = rej)));
    this.opened.catch(() => {}); // a failed open is also reported by `closed`: not unhandled
    /** Resolves with `{ code, reason, wasClean }` when the socket has closed. */
    this.closed = new Promise((res) => (closed = res));

    socket.addEventListener('open', () => {
      const queued = this.#queued;
      this.#queued = [];
      for (const text of queued) this.#write(text);
      opened();
    });
    socket.addEventListener('message', (ev) => this.#receive(ev.data));
    // Keep the error: the close event that follows often says less (1006 and no reason).
    socket.addEventListener('error', (ev) => (this.#lastError = ev?.message ?? ev?.error?.message));
    socket.addEventListener('close', (ev) => {
      const info = { code: ev?.code ?? 1006, reason: ev?.reason ?? '', wasClean: !!ev?.wasClean };
      const why = `code ${info.code}${info.reason ? ` (${info.reason})` : ''}` +
        (this.#lastError && !info.wasClean ? `: ${this.#lastError}` : '');
      this.#shutdown(new ClosedError(why, info));
      failed(new ClosedError(`before it opened, ${why}`, info));
      closed(info);
    });
    if (socket.readyState === OPEN) opened();
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
    return this.#running.size;
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
   * aborted sends nothing. A timeout sends the cancel too. With `onProgress`, the call
   * asks the other side for progress and `onProgress(value)` sees each value, in order,
   * before the call resolves; without it, no progress is asked for or delivered.
   * @param {string} method
   * @param {Array|object} [params]
   * @param {{ timeoutMs?: number, signal?: AbortSignal, onProgress?: (value: any) => void }} [options]
   * @returns {Promise<*>} the result; rejects with RpcError (the answer was an error),
   *   TimeoutError, ClosedError, InvalidResponseError, or the signal's reason
   */
  call(method, params, { timeoutMs = this.timeoutMs, signal, onProgress } = {}) {
    const msg = request(method, params, this.#nextId);
    if (signal?.aborted) return Promise.reject(signal.reason);
    const id = this.#nextId++;
    if (onProgress) msg.progressToken = id;
    const text = JSON.stringify(msg);
    const answer = this.#expect(id, method, timeoutMs);
    const entry = this.#pending.get(id);
    entry.onProgress = onProgress;
    if (signal) {
      const onAbort = () => this.#giveUp(id, signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      entry.unlisten = () => signal.removeEventListener('abort', onAbort);
    }
    try {
      this.#send(text);
      entry.sent = true;
    } catch (e) {
      this.#settle(id, (p) => p.reject(e));
    }
    return answer;
  }

  /**
   * Send a notification: no answer comes, not even an error.
   * Throws TypeError for bad arguments and ClosedError when the connection is gone.
   * @param {string} method
   * @param {Array|object} [params]
   */
  notify(method, params) {
    this.#send(JSON.stringify(request(method, params)));
  }

  /**
   * Start a batch: add calls and notifications, then `send()` them as ONE array frame.
   * @returns {Batch}
   */
  batch() {
    return new Batch(this);
  }

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
  method(name, handler) {
    if (this.#methods.has(checkName(name, handler))) throw new Error(`method "${name}" is registered twice`);
    this.#methods.set(name, handler);
    return this;
  }

  /**
   * Handle notifications for `name`, one at a time in arrival order. Whatever the
   * handler returns or throws goes nowhere (throws reach `onHandlerError`). It takes
   * precedence over a `method` of the same name for notifications.
   * @param {string} name not beginning with `rpc.`, not registered yet
   * @param {(params: any, peer: Peer) => any} handler
   * @returns {Peer} this, to chain
   */
  notification(name, handler) {
    if (this.#notifications.has(checkName(name, handler))) {
      throw new Error(`notification "${name}" is registered twice`);
    }
    this.#notifications.set(name, handler);
    return this;
  }

  /**
   * Close the connection. Pending calls are rejected at once with ClosedError; `closed`
   * resolves when the socket reports its close.
   * @param {number} [code=1000] 1000 or 3000-4999
   * @param {string} [reason]
   */
  close(code = 1000, reason = '') {
    this.#socket.close(code, reason);
    this.#shutdown(new ClosedError(`closed locally with code ${code}${reason ? ` (${reason})` : ''}`));
  }

  // ---- outgoing ------------------------------------------------------------------

  #expect(id, method, timeoutMs) {
    return new Promise((resolve, reject) => {
      const entry = { resolve, reject, timer: null, sent: false };
      if (timeoutMs > 0 && timeoutMs < Infinity) {
        // The entry leaves the map on timeout, so a late answer is simply unmatched.
        entry.timer = setTimeout(() => this.#giveUp(id, new TimeoutError(method, timeoutMs)), timeoutMs);
      }
      this.#pending.set(id, entry);
    });
  }

  #settle(id, fn) {
    const entry = this.#pending.get(id);
    if (!entry) return false;
    this.#pending.delete(id);
    clearTimeout(entry.timer);
    entry.unlisten?.();
    fn(entry);
    return true;
  }

  /** Ends our call `id` with `error` and tells the other side, if it was sent. */
  #giveUp(id, error) {
    const entry = this.#pending.get(id);
    if (!entry) return;
    this.#settle(id, (p) => p.reject(error));
    if (!entry.sent || !this.#cancelStyle || this.#closedBy) return;
    const cancel =
      this.#cancelStyle === 'mcp'
        ? { jsonrpc: '2.0', method: CANCEL_MCP, params: { requestId: id } }
        : { jsonrpc: '2.0', method: CANCEL_LSP, params: { id } };
    this.#answer(JSON.stringify(cancel));
  }

  /** Sends a batch's items (already checked) as one array frame; see `Batch.send`. */
  #sendBatch(items, timeoutMs) {
    const msgs = [];
    const answers = [];
    for (const it of items) {
      if (!it.isCall) {
        msgs.push(request(it.method, it.params));
        continue;
      }
      const id = this.#nextId++;
      msgs.push(request(it.method, it.params, id));
      answers.push({ id, promise: this.#expect(id, it.method, timeoutMs) });
    }
    try {
      this.#send(JSON.stringify(msgs));
    } catch (e) {
      for (const a of answers) this.#settle(a.id, () => {});
      throw e;
    }
    return answers.map((a) => a.promise);
  }

  #send(text) {
    if (this.#closedBy) throw this.#closedBy;
    const state = this.#socket.readyState;
    if (state === CONNECTING) this.#queued.push(text);
    else if (state === OPEN) this.#write(text);
    // A closing browser socket drops sends silently; say so instead.
    else throw new ClosedError(`socket is ${state === 2 ? 'closing' : 'closed'}`);
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
    this.#queued = [];
    for (const id of [...this.#pending.keys()]) this.#settle(id, (p) => p.reject(error));
  }

  // ---- incoming ------------------------------------------------------------------

  #receive(data) {
    if (typeof data !== 'string') return; // binary frame: see the class comment
    this.#frame('in', data);
    if (this.#closedBy) return;
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      // Even for a broken batch the answer is ONE object (spec, "Batch Request Invalid JSON").
      this.#answer(errorResponse(null, new RpcError(ErrorCode.PARSE_ERROR)));
      return;
    }
    if (!Array.isArray(msg)) {
      this.#handleOne(msg).then((ans) => ans && this.#answer(ans));
      return;
    }
    if (msg.length === 0) {
      this.#answer(errorResponse(null, new RpcError(ErrorCode.INVALID_REQUEST)));
      return;
    }
    Promise.all(msg.map((m) => this.#handleOne(m))).then((answers) => {
      const parts = answers.filter(Boolean);
      // An all-notification (or all-response) batch gets nothing at all.
      if (parts.length) this.#answer(`[${parts.join(',')}]`);
    });
  }

  /** Handle one message; resolves to the answer's JSON text, or null for none. */
  async #handleOne(m) {
    if (isResponse(m)) {
      this.#route(m);
      return null;
    }
    const bad = invalidRequest(m);
    if (bad) return errorResponse(bad.id, new RpcError(ErrorCode.INVALID_REQUEST));
    // Only a valid Request without an `id` member is a notification; `"id": null` is not.
    if (!has(m, 'id')) {
      // Cancels and progress are handled as they arrive, not behind the ordered chain.
      if (m.method === CANCEL_LSP || m.method === CANCEL_MCP) {
        this.#onCancel(m.method === CANCEL_MCP ? 'mcp' : 'lsp', m.params);
        return null;
      }
      if (m.method === PROGRESS && this.#onProgress(m.params)) return null;
      this.#runNotification(m.method, m.params);
      return null;
    }
    const handler = this.#methods.get(m.method);
    if (!handler) return errorResponse(m.id, new RpcError(ErrorCode.METHOD_NOT_FOUND));
    const key = JSON.stringify(m.id);
    // A second call with the id of one still running cannot be told apart by a cancel:
    // it runs, but only the first is cancellable.
    const own = !this.#running.has(key);
    const running = { controller: new AbortController(), style: null };
    if (own) this.#running.set(key, running);
    const token = has(m, 'progressToken') ? m.progressToken : undefined;
    const cx = {
      signal: running.controller.signal,
      wantsProgress: token !== undefined,
      progress: (value) => {
        if (token === undefined || running.style) return;
        this.#answer(JSON.stringify({ jsonrpc: '2.0', method: PROGRESS, params: { token, value } }));
      },
    };
    let answer;
    try {
      const result = await handler(m.params, this, cx);
      answer = resultResponse(m.id, result);
    } catch (e) {
      answer = cx.signal.aborted
        ? errorResponse(m.id, new RpcError(ErrorCode.REQUEST_CANCELLED))
        : errorResponse(m.id, this.#asRpcError(e, m.method));
    } finally {
      if (own) this.#running.delete(key);
    }
    // The MCP form of cancel asks for no answer at all.
    return running.style === 'mcp' ? null : answer;
  }

  /** An incoming cancel: aborts the handler of the call it names, if it still runs. */
  #onCancel(style, params) {
    const id = style === 'mcp' ? params?.requestId : params?.id;
    if (!isValidId(id)) return;
    const running = this.#running.get(JSON.stringify(id));
    // Finished or unknown: nothing changes, and a cancel is never answered.
    if (!running || running.style) return;
    running.style = style;
    running.controller.abort(new RpcError(ErrorCode.REQUEST_CANCELLED));
  }

  /** A `$/progress` for one of our calls goes to its `onProgress`; false when not ours. */
  #onProgress(params) {
    const entry = typeof params?.token === 'number' ? this.#pending.get(params.token) : undefined;
    if (!entry?.onProgress) return false;
    try {
      entry.onProgress(params.value);
    } catch (e) {
      this.#onHandlerError(e, PROGRESS);
    }
    return true;
  }

  #runNotification(method, params) {
    const handler = this.#notifications.get(method);
    if (!handler) {
      // A notification is a request without an id: a method of that name runs, as a call
      // would (not in the notifications' order), and its answer is dropped. Unknown:
      // dropped, never answered, not even an error.
      const asMethod = this.#methods.get(method);
      if (asMethod) {
        Promise.resolve()
          .then(() => asMethod(params, this))
          .catch((e) => {
            if (!(e instanceof RpcError)) this.#onHandlerError(e, method);
          });
      }
      return;
    }
    this.#notifyChain = this.#notifyChain
      .then(() => handler(params, this))
      .catch((e) => {
        if (!(e instanceof RpcError)) this.#onHandlerError(e, method);
      });
  }

  #asRpcError(e, method) {
    if (e instanceof RpcError) return e;
    this.#onHandlerError(e, method);
    return new RpcError(ErrorCode.INTERNAL_ERROR);
  }

  #route(m) {
    // Our ids are numbers; anything else (null included) cannot be one of our calls.
    if (typeof m.id !== 'number') return;
    this.#settle(m.id, (p) => {
      const problem = responseProblem(m);
      if (problem) p.reject(new InvalidResponseError(problem, m));
      else if (has(m, 'error')) p.reject(new RpcError(m.error.code, m.error.message, m.error.data));
      else p.resolve(m.result);
    });
  }

  #answer(text) {
    if (!text) return;
    try {
      this.#send(text);
    } catch {
      // Closed meanwhile: the caller on the other side learns it from its own close.
    }
  }
}

/**
 * A batch under construction; see `Peer.batch()`.
 * `send()` resolves to one outcome per call, in the order added:
 * `{ ok: true, result }` or `{ ok: false, error }` (error: RpcError, TimeoutError,
 * ClosedError or InvalidResponseError). It never rejects for one failed call; it rejects
 * only with ClosedError when nothing could be sent.
 */
export class Batch {
  #peer;
  #items = []; // ids are taken at send time, so a batch never sent uses none
  #sent = false;

  /** @param {Peer} peer */
  constructor(peer) {
    this.#peer = peer;
  }

  /** Add a call. @param {string} method @param {Array|object} [params] @returns {Batch} */
  call(method, params) {
    request(method, params); // validate now, where the mistake is
    this.#items.push({ method, params, isCall: true });
    return this;
  }

  /** Add a notification. @param {string} method @param {Array|object} [params] @returns {Batch} */
  notify(method, params) {
    request(method, params);
    this.#items.push({ method, params, isCall: false });
    return this;
  }

  /**
   * Send the batch as one array frame. An empty batch sends nothing; a batch of only
   * notifications resolves to `[]` once sent.
   * @param {{ timeoutMs?: number }} [options] timeout for each call in the batch
   * @returns {Promise<Array<{ok: true, result: *} | {ok: false, error: Error}>>}
   */
  async send({ timeoutMs = this.#peer.timeoutMs } = {}) {
    if (this.#sent) throw new Error('batch already sent');
    this.#sent = true;
    if (this.#items.length === 0) return [];
    const answers = sendBatch(this.#peer, this.#items, timeoutMs);
    return Promise.all(
      answers.map((a) =>
        a.then(
          (result) => ({ ok: true, result }),
          (error) => ({ ok: false, error }),
        ),
      ),
    );
  }
}

// ---- reconnecting ---------------------------------------------------------------------

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
export function backoffDelay({ initialMs = 100, maxMs = 10000, multiplier = 2 } = {}, attempt, random = Math.random) {
  const cap = Math.max(0, Math.min(maxMs, initialMs * multiplier ** Math.min(attempt, 64)));
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
export function reconnecting(url, options = {}) {
  return new ReconnectingPeer(url, options);
}

/** See `reconnecting`. */
export class ReconnectingPeer extends EventTarget {
  #url;
  #options;
  #WS;
  #random;
  #methods = [];
  #notifications = [];
  /** @type {Peer | null} */
  #peer = null;
  /** @type {LinkState} */
  #state = { state: 'connecting', attempt: 0 };
  #attempt = 0;
  #retryTimer = null;
  #stopped = false;
  #waiters = new Set(); // resolve functions of calls waiting for the link

  /** @param {string} url @param {PeerOptions & ReconnectOptions} [options] */
  constructor(url, options = {}) {
    super();
    this.#url = url;
    this.#options = options;
    this.#WS = options.WebSocket ?? globalThis.WebSocket;
    this.#random = options.random ?? Math.random;
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
    return this.#state.state === 'connected' ? this.#peer : null;
  }

  /** Serve calls of `name` on every connection; as `Peer.method`. @returns {ReconnectingPeer} */
  method(name, handler) {
    checkName(name, handler);
    this.#methods.push([name, handler]);
    this.#peer?.method(name, handler);
    return this;
  }

  /** Handle notifications of `name` on every connection; as `Peer.notification`. @returns {ReconnectingPeer} */
  notification(name, handler) {
    checkName(name, handler);
    this.#notifications.push([name, handler]);
    this.#peer?.notification(name, handler);
    return this;
  }

  /**
   * Resolves with the current Peer once the link is up (at once if it is).
   * @param {number} [timeoutMs] default `this.timeoutMs`
   * @returns {Promise<Peer>} rejects with TimeoutError, or ClosedError once stopped
   */
  connected(timeoutMs = this.timeoutMs) {
    const up = this.peer;
    if (up) return Promise.resolve(up);
    if (this.#stopped) return Promise.reject(stoppedError());
    return new Promise((resolve, reject) => {
      let timer = null;
      const waiter = (outcome) => {
        clearTimeout(timer);
        this.#waiters.delete(waiter);
        if (outcome instanceof Error) reject(outcome);
        else resolve(outcome);
      };
      if (timeoutMs > 0 && timeoutMs < Infinity) {
        timer = setTimeout(() => waiter(new TimeoutError('(waiting for the connection)', timeoutMs)), timeoutMs);
      }
      this.#waiters.add(waiter);
    });
  }

  /**
   * `Peer.call` on the current connection, waiting for one if the link is down; the
   * timeout covers the wait.
   * @param {string} method @param {Array|object} [params]
   * @param {{ timeoutMs?: number, signal?: AbortSignal, onProgress?: (value: any) => void }} [options]
   *   as for `Peer.call`; an abort while waiting for the link rejects at once
   * @returns {Promise<*>}
   */
  async call(method, params, { timeoutMs = this.timeoutMs, signal, onProgress } = {}) {
    request(method, params); // a bad argument throws now, not after the wait
    if (signal?.aborted) throw signal.reason;
    const start = Date.now();
    let peer;
    try {
      peer = await abortable(this.connected(timeoutMs), signal);
    } catch (e) {
      if (e instanceof TimeoutError) throw new TimeoutError(method, timeoutMs);
      throw e;
    }
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
   * @returns {Promise<void>}
   */
  async notify(method, params, { timeoutMs = this.timeoutMs } = {}) {
    request(method, params);
    (await this.connected(timeoutMs)).notify(method, params);
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

  #setState(state) {
    this.#state = Object.freeze(state);
    const ev = new Event('statechange');
    ev.detail = this.#state;
    this.dispatchEvent(ev);
  }

  #dial() {
    if (this.#stopped) return;
    this.#setState({ state: 'connecting', attempt: this.#attempt });
    let peer;
    try {
      peer = new Peer(new this.#WS(this.#url), this.#options);
    } catch (e) {
      // A malformed URL throws at once; it never gets better, but it is retried like any
      // failure so that a page fixed under it (a proxy coming up) still connects.
      this.#retry();
      return;
    }
    for (const [n, h] of this.#methods) peer.method(n, h);
    for (const [n, h] of this.#notifications) peer.notification(n, h);
    this.#peer = peer;
    peer.closed.then(() => {
      if (this.#peer !== peer) return;
      this.#peer = null;
      this.#retry();
    });
    peer.opened.then(async () => {
      try {
        await this.#options.onConnect?.(peer);
      } catch (e) {
        (this.#options.onHandlerError ?? console.error)(e, 'onConnect');
        peer.close(4000, 'onConnect failed');
        return;
      }
      if (this.#peer !== peer || peer.isClosed) return;
      this.#attempt = 0;
      this.#setState({ state: 'connected' });
      for (const w of [...this.#waiters]) w(peer);
    }, () => {}); // a failed open is handled by `closed` above
  }

  #retry() {
    if (this.#stopped) return;
    // A link that came up starts the count again; one that never did counts a failure.
    const retryInMs = backoffDelay(this.#options.backoff, this.#attempt, this.#random);
    this.#attempt += 1;
    this.#setState({ state: 'waiting', attempt: this.#attempt, retryInMs });
    this.#retryTimer = setTimeout(() => this.#dial(), retryInMs);
  }
}

/** `promise`, or a rejection with the signal's reason as soon as it aborts. */
function abortable(promise, signal) {
  if (!signal) return promise;
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function stoppedError() {
  return new ClosedError('the reconnecting peer was stopped');
}

// ---- wire helpers (pure) --------------------------------------------------------------

/** Build a request (with id) or notification (without), strict in what we send. */
function request(method, params, id) {
  if (typeof method !== 'string') throw new TypeError('method must be a string');
  if (params !== undefined && (params === null || typeof params !== 'object')) {
    throw new TypeError('params must be an array, an object or undefined');
  }
  const m = { jsonrpc: '2.0', method };
  if (params !== undefined) m.params = params;
  if (id !== undefined) m.id = id;
  return m;
}

function checkName(name, handler) {
  if (typeof name !== 'string') throw new TypeError('method name must be a string');
  if (name.startsWith('rpc.')) {
    throw new Error(`method names beginning with "rpc." are reserved by JSON-RPC 2.0: ${name}`);
  }
  if (typeof handler !== 'function') throw new TypeError('handler must be a function');
  return name;
}

const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

function isObject(m) {
  return m !== null && typeof m === 'object' && !Array.isArray(m);
}

function isValidId(id) {
  return id === null || typeof id === 'string' || typeof id === 'number';
}

/** A response is an object with `result` or `error` and no `method`; never answered. */
function isResponse(m) {
  return isObject(m) && !has(m, 'method') && (has(m, 'result') || has(m, 'error'));
}

/** null when the response `m` (to one of our calls) is valid, else what is wrong. */
function responseProblem(m) {
  if (m.jsonrpc !== '2.0') return '`jsonrpc` is not "2.0"';
  if (has(m, 'result') === has(m, 'error')) return 'a response has exactly one of `result` and `error`';
  if (has(m, 'error')) {
    const e = m.error;
    if (!isObject(e) || !Number.isInteger(e.code) || typeof e.message !== 'string') {
      return '`error` is not an object with an integer `code` and a string `message`';
    }
  }
  return null;
}

/** null when `m` is a valid Request or Notification, else `{ id }` to answer with. */
function invalidRequest(m) {
  if (!isObject(m)) return { id: null };
  const ok =
    m.jsonrpc === '2.0' &&
    typeof m.method === 'string' &&
    (m.params === undefined || (m.params !== null && typeof m.params === 'object')) &&
    (!has(m, 'id') || isValidId(m.id));
  if (ok) return null;
  return { id: has(m, 'id') && isValidId(m.id) ? m.id : null };
}

function resultResponse(id, result) {
  try {
    // The result member is required, so a handler returning nothing answers null.
    return JSON.stringify({ jsonrpc: '2.0', result: result === undefined ? null : result, id });
  } catch {
    // A result JSON cannot carry (BigInt, a cycle) is the handler's failure.
    return errorResponse(id, new RpcError(ErrorCode.INTERNAL_ERROR));
  }
}

function errorResponse(id, err) {
  try {
    return JSON.stringify({ jsonrpc: '2.0', error: err.toJSON(), id });
  } catch {
    return JSON.stringify({ jsonrpc: '2.0', error: { code: err.code, message: err.message }, id });
  }
}
