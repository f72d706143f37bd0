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

/** The error codes the specification defines. */
export const ErrorCode = Object.freeze({
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
});

const MESSAGES = {
  [ErrorCode.PARSE_ERROR]: 'Parse error',
  [ErrorCode.INVALID_REQUEST]: 'Invalid Request',
  [ErrorCode.METHOD_NOT_FOUND]: 'Method not found',
  [ErrorCode.INVALID_PARAMS]: 'Invalid params',
  [ErrorCode.INTERNAL_ERROR]: 'Internal error',
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
 */

/**
 * A JSON-RPC 2.0 peer over one socket.
 *
 * The socket is anything shaped like the browser's WebSocket: `send(text)`,
 * `close(code, reason)`, `readyState` (0 connecting, 1 open, 2 closing, 3 closed) and the
 * handler properties `onopen`, `onmessage` (event with `data`), `onerror`, `onclose`
 * (event with `code`, `reason`, `wasClean`). The Peer takes those properties over.
 * Binary frames are ignored: JSON-RPC travels in text frames, and answering a binary
 * frame with a Parse error would only invite a loop with a confused peer.
 */
export class Peer {
  /** @param {WebSocket} socket @param {PeerOptions} [options] */
  constructor(socket, options = {}) {
    this.socket = socket;
    this.timeoutMs = options.timeoutMs ?? 30000;
    this._onFrame = options.onFrame;
    this._onHandlerError =
      options.onHandlerError ?? ((e, m) => console.error(`jsonrpc-peer: handler "${m}" failed:`, e));
    this._nextId = 1;
    /** @type {Map<number, {resolve: Function, reject: Function, timer: any}>} */
    this._pending = new Map();
    this._methods = new Map();
    this._notifications = new Map();
    // Notifications run one after another, in arrival order (as in the Rust peer):
    // a stream of updates must not be applied out of order by async handlers.
    this._notifyChain = Promise.resolve();
    this._queued = []; // frames sent while the socket was still connecting
    this._closedBy = null; // ClosedError once closed, locally or by the socket

    let opened, failed, closed;
    /** Resolves when the socket is open; rejects with ClosedError if it closes first. */
    this.opened = new Promise((res, rej) => ((opened = res), (failed = rej)));
    this.opened.catch(() => {}); // a failed open is also reported by `closed`: not unhandled
    /** Resolves with `{ code, reason, wasClean }` when the socket has closed. */
    this.closed = new Promise((res) => (closed = res));

    socket.onopen = () => {
      const queued = this._queued;
      this._queued = [];
      for (const text of queued) this._write(text);
      opened();
    };
    socket.onmessage = (ev) => this._receive(ev.data);
    // Keep the error: the close event that follows often says less (1006 and no reason).
    socket.onerror = (ev) => (this._lastError = ev?.message ?? ev?.error?.message);
    socket.onclose = (ev) => {
      const info = { code: ev?.code ?? 1006, reason: ev?.reason ?? '', wasClean: !!ev?.wasClean };
      const why = `code ${info.code}${info.reason ? ` (${info.reason})` : ''}` +
        (this._lastError && !info.wasClean ? `: ${this._lastError}` : '');
      this._shutdown(new ClosedError(why, info));
      failed(new ClosedError(`before it opened, ${why}`, info));
      closed(info);
    };
    if (socket.readyState === OPEN) opened();
  }

  /** Number of outgoing calls still awaiting their answer. */
  get pendingCount() {
    return this._pending.size;
  }

  /**
   * Call `method` on the other side.
   * Throws TypeError at once for a non-string method or params that are neither an
   * array nor an object (`undefined` leaves `params` out).
   * @param {string} method
   * @param {Array|object} [params]
   * @param {{ timeoutMs?: number }} [options]
   * @returns {Promise<*>} the result; rejects with RpcError (the answer was an error),
   *   TimeoutError, ClosedError or InvalidResponseError
   */
  call(method, params, { timeoutMs = this.timeoutMs } = {}) {
    const id = this._nextId++;
    const text = JSON.stringify(request(method, params, id));
    const answer = this._expect(id, method, timeoutMs);
    try {
      this._send(text);
    } catch (e) {
      this._settle(id, (p) => p.reject(e));
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
    this._send(JSON.stringify(request(method, params)));
  }

  /**
   * Start a batch: add calls and notifications, then `send()` them as ONE array frame.
   * @returns {Batch}
   */
  batch() {
    return new Batch(this);
  }

  /**
   * Serve requests for `name`. The handler gets `(params, peer)` (params `undefined`
   * when absent) and may be async and may call back through `peer`. Its return value is
   * the result (`undefined` is sent as `null`); an RpcError it throws is the answer;
   * any other throw answers -32603 Internal error. Notifications never reach it: register
   * those with `notification` (a name may have both).
   * @param {string} name not beginning with `rpc.` (reserved by the specification),
   *   not registered yet (registering twice throws)
   * @param {(params: any, peer: Peer) => any} handler
   * @returns {Peer} this, to chain
   */
  method(name, handler) {
    if (this._methods.has(checkName(name, handler))) throw new Error(`method "${name}" is registered twice`);
    this._methods.set(name, handler);
    return this;
  }

  /**
   * Handle notifications for `name`, one at a time in arrival order. Whatever the
   * handler returns or throws goes nowhere (throws reach `onHandlerError`).
   * @param {string} name not beginning with `rpc.`, not registered yet
   * @param {(params: any, peer: Peer) => any} handler
   * @returns {Peer} this, to chain
   */
  notification(name, handler) {
    if (this._notifications.has(checkName(name, handler))) {
      throw new Error(`notification "${name}" is registered twice`);
    }
    this._notifications.set(name, handler);
    return this;
  }

  /**
   * Close the connection. Pending calls are rejected at once with ClosedError; `closed`
   * resolves when the socket reports its close.
   * @param {number} [code=1000] 1000 or 3000-4999
   * @param {string} [reason]
   */
  close(code = 1000, reason = '') {
    this.socket.close(code, reason);
    this._shutdown(new ClosedError(`closed locally with code ${code}${reason ? ` (${reason})` : ''}`));
  }

  // ---- outgoing ------------------------------------------------------------------

  _expect(id, method, timeoutMs) {
    return new Promise((resolve, reject) => {
      const entry = { resolve, reject, timer: null };
      if (timeoutMs > 0 && timeoutMs < Infinity) {
        // The entry leaves the map on timeout, so a late answer is simply unmatched.
        entry.timer = setTimeout(
          () => this._settle(id, (p) => p.reject(new TimeoutError(method, timeoutMs))),
          timeoutMs,
        );
      }
      this._pending.set(id, entry);
    });
  }

  _settle(id, fn) {
    const entry = this._pending.get(id);
    if (!entry) return false;
    this._pending.delete(id);
    clearTimeout(entry.timer);
    fn(entry);
    return true;
  }

  _send(text) {
    if (this._closedBy) throw this._closedBy;
    const state = this.socket.readyState;
    if (state === CONNECTING) this._queued.push(text);
    else if (state === OPEN) this._write(text);
    // A closing browser socket drops sends silently; say so instead.
    else throw new ClosedError(`socket is ${state === 2 ? 'closing' : 'closed'}`);
  }

  _write(text) {
    this._frame('out', text);
    this.socket.send(text);
  }

  _frame(direction, text) {
    if (!this._onFrame) return;
    try {
      this._onFrame(direction, text);
    } catch {
      // A broken log hook must not break the connection.
    }
  }

  _shutdown(error) {
    if (this._closedBy) return;
    this._closedBy = error;
    this._queued = [];
    for (const id of [...this._pending.keys()]) this._settle(id, (p) => p.reject(error));
  }

  // ---- incoming ------------------------------------------------------------------

  _receive(data) {
    if (typeof data !== 'string') return; // binary frame: see the class comment
    this._frame('in', data);
    if (this._closedBy) return;
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      // Even for a broken batch the answer is ONE object (spec, "Batch Request Invalid JSON").
      this._answer(errorResponse(null, new RpcError(ErrorCode.PARSE_ERROR)));
      return;
    }
    if (!Array.isArray(msg)) {
      this._handleOne(msg).then((ans) => ans && this._answer(ans));
      return;
    }
    if (msg.length === 0) {
      this._answer(errorResponse(null, new RpcError(ErrorCode.INVALID_REQUEST)));
      return;
    }
    Promise.all(msg.map((m) => this._handleOne(m))).then((answers) => {
      const parts = answers.filter(Boolean);
      // An all-notification (or all-response) batch gets nothing at all.
      if (parts.length) this._answerText(`[${parts.join(',')}]`);
    });
  }

  /** Handle one message; resolves to the answer's JSON text, or null for none. */
  async _handleOne(m) {
    if (isResponse(m)) {
      this._route(m);
      return null;
    }
    const bad = invalidRequest(m);
    if (bad) return errorResponse(bad.id, new RpcError(ErrorCode.INVALID_REQUEST));
    // Only a valid Request without an `id` member is a notification; `"id": null` is not.
    if (!has(m, 'id')) {
      this._runNotification(m.method, m.params);
      return null;
    }
    const handler = this._methods.get(m.method);
    if (!handler) return errorResponse(m.id, new RpcError(ErrorCode.METHOD_NOT_FOUND));
    try {
      const result = await handler(m.params, this);
      return resultResponse(m.id, result);
    } catch (e) {
      return errorResponse(m.id, this._asRpcError(e, m.method));
    }
  }

  _runNotification(method, params) {
    // As in the Rust router, notifications reach notification handlers only; a method
    // of the same name is not run. Unknown: dropped, never answered, not even an error.
    const handler = this._notifications.get(method);
    if (!handler) return;
    this._notifyChain = this._notifyChain
      .then(() => handler(params, this))
      .catch((e) => {
        if (!(e instanceof RpcError)) this._onHandlerError(e, method);
      });
  }

  _asRpcError(e, method) {
    if (e instanceof RpcError) return e;
    this._onHandlerError(e, method);
    return new RpcError(ErrorCode.INTERNAL_ERROR);
  }

  _route(m) {
    // Our ids are numbers; anything else (null included) cannot be one of our calls.
    if (typeof m.id !== 'number') return;
    this._settle(m.id, (p) => {
      const problem = responseProblem(m);
      if (problem) p.reject(new InvalidResponseError(problem, m));
      else if (has(m, 'error')) p.reject(new RpcError(m.error.code, m.error.message, m.error.data));
      else p.resolve(m.result);
    });
  }

  _answer(text) {
    if (text) this._answerText(text);
  }

  _answerText(text) {
    try {
      this._send(text);
    } catch {
      // Closed meanwhile: the caller on the other side learns it from its own close.
    }
  }
}

/**
 * A batch under construction; see `Peer.batch()`.
 * `send()` resolves to one outcome per call, in the order added:
 * `{ ok: true, result }` or `{ ok: false, error }` (error: RpcError, TimeoutError,
 * ClosedError or InvalidResponseError). It never rejects for one failed call; it rejects only with ClosedError
 * when nothing could be sent.
 */
export class Batch {
  /** @param {Peer} peer */
  constructor(peer) {
    this._peer = peer;
    this._items = []; // ids are taken at send time, so a batch never sent uses none
    this._sent = false;
  }

  /** Add a call. @param {string} method @param {Array|object} [params] @returns {Batch} */
  call(method, params) {
    request(method, params); // validate now, where the mistake is
    this._items.push({ method, params, isCall: true });
    return this;
  }

  /** Add a notification. @param {string} method @param {Array|object} [params] @returns {Batch} */
  notify(method, params) {
    request(method, params);
    this._items.push({ method, params, isCall: false });
    return this;
  }

  /**
   * Send the batch as one array frame. An empty batch sends nothing; a batch of only
   * notifications resolves to `[]` once sent.
   * @param {{ timeoutMs?: number }} [options] timeout for each call in the batch
   * @returns {Promise<Array<{ok: true, result: *} | {ok: false, error: Error}>>}
   */
  async send({ timeoutMs = this._peer.timeoutMs } = {}) {
    if (this._sent) throw new Error('batch already sent');
    this._sent = true;
    const peer = this._peer;
    if (this._items.length === 0) return [];
    const msgs = [];
    const answers = [];
    for (const it of this._items) {
      if (!it.isCall) {
        msgs.push(request(it.method, it.params));
        continue;
      }
      const id = peer._nextId++;
      msgs.push(request(it.method, it.params, id));
      answers.push({ id, promise: peer._expect(id, it.method, timeoutMs) });
    }
    try {
      peer._send(JSON.stringify(msgs));
    } catch (e) {
      for (const a of answers) peer._settle(a.id, () => {});
      throw e;
    }
    return Promise.all(
      answers.map((a) =>
        a.promise.then(
          (result) => ({ ok: true, result }),
          (error) => ({ ok: false, error }),
        ),
      ),
    );
  }
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
