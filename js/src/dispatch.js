// dispatch.js: what arrives on a connection, after the frame was read. Parses it, routes
// responses to our waiting calls, runs handlers, and hands each answer back to the Peer
// to send. It owns the handler table and what runs: the incoming calls a cancel can
// reach, and the chain that keeps notifications in order.
import {
  CANCEL_LSP, CANCEL_MCP, ErrorCode, PROGRESS, RpcError, checkName, errorResponse, has,
  invalidRequest, isResponse, isValidId, progressNotification, resultResponse,
} from './wire.js';

/**
 * @typedef {import('./peer.js').Handler} Handler
 * @typedef {import('./peer.js').HandlerContext} HandlerContext
 */

export class Dispatch {
  /** @type {Map<string, Handler>} */
  #methods = new Map();
  /** @type {Map<string, Handler>} */
  #notifications = new Map();
  // Incoming calls still running, by their id's JSON text: what a cancel reaches.
  /** @type {Map<string, {controller: AbortController, style: null|'lsp'|'mcp'}>} */
  #running = new Map();
  // Notifications run one after another, in arrival order (as in the Rust peer):
  // a stream of updates must not be applied out of order by async handlers.
  /** @type {Promise<any>} */
  #notifyChain = Promise.resolve();
  // Bounds on the work the other side starts here (a browser cannot stop reading, as the
  // Rust peer does): handlers of its calls running, notifications waiting in the chain.
  #runningCalls = 0;
  #maxRunningCalls;
  #queuedNotifications = 0;
  #maxQueuedNotifications;
  // Whether the frame being handled arrived while the chain had room: a frame that did
  // is queued whole (a batch of notifications is never cut), so at most the limit plus
  // one batch wait.
  #roomForNotifications = true;
  #overflow;
  #pending;
  #reply;
  #notice;
  #onHandlerError;
  #maxBatchLen;
  #peer;
  /** @type {HandlerContext} what a notification's handler gets: nothing to cancel */
  #notificationContext;

  /**
   * @param {object} parts
   * @param {import('./peer.js').Peer} parts.peer what handlers get as `cx.peer`
   * @param {import('./pending.js').Pending} parts.pending our calls, for their answers and progress
   * @param {(text: string) => void} parts.reply sends an answer
   * @param {(text: string) => boolean} parts.notice sends a progress value; false when skipped
   * @param {(error: unknown, method: string) => void} parts.onHandlerError
   * @param {number} [parts.maxBatchLen] the longest incoming batch run; a longer one is
   *   answered with one -32600 and runs nothing
   * @param {number} [parts.maxRunningCalls] how many handlers of incoming calls run at
   *   once (a notification that runs a method counts); a call past it is answered
   *   -32001 and does not run, such a notification is dropped
   * @param {number} [parts.maxQueuedNotifications] how many notifications may wait for
   *   their ordered handler; one more calls `overflow`
   * @param {(reason: string) => void} [parts.overflow] closes the connection: the
   *   notification queue is full, and dropping one would break their order
   */
  constructor({
    peer, pending, reply, notice, onHandlerError, maxBatchLen = Infinity,
    maxRunningCalls = Infinity, maxQueuedNotifications = Infinity, overflow = () => {}
  }) {
    this.#maxBatchLen = maxBatchLen;
    this.#maxRunningCalls = maxRunningCalls;
    this.#maxQueuedNotifications = maxQueuedNotifications;
    this.#overflow = overflow;
    this.#peer = peer;
    this.#pending = pending;
    this.#reply = reply;
    this.#notice = notice;
    this.#onHandlerError = (e, m) => {
      try {
        onHandlerError(e, m);
      } catch {
        // A reporter that throws must not break the message loop (the order of the
        // notifications, or a call's -32603 answer).
      }
    };
    this.#notificationContext = Object.freeze({
      peer,
      signal: new AbortController().signal,
      wantsProgress: false,
      progress: () => false,
    });
  }

  /** Number of incoming calls whose handlers are still running. */
  get runningCount() {
    return this.#runningCalls;
  }

  /** @param {string} name @param {Handler} handler */
  method(name, handler) {
    if (this.#methods.has(checkName(name, handler))) throw new Error(`method "${name}" is registered twice`);
    this.#methods.set(name, handler);
  }

  /** @param {string} name @param {Handler} handler */
  notification(name, handler) {
    if (this.#notifications.has(checkName(name, handler))) {
      throw new Error(`notification "${name}" is registered twice`);
    }
    this.#notifications.set(name, handler);
  }

  /** One text frame from the other side. @param {string} text */
  receive(text) {
    this.#roomForNotifications = this.#queuedNotifications < this.#maxQueuedNotifications;
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      // Even for a broken batch the answer is ONE object (spec, "Batch Request Invalid JSON").
      this.#reply(errorResponse(null, new RpcError(ErrorCode.PARSE_ERROR)));
      return;
    }
    if (!Array.isArray(msg)) {
      this.#handleOne(msg).then((ans) => ans && this.#reply(ans));
      return;
    }
    if (msg.length > this.#maxBatchLen) {
      const why = `batch of ${msg.length} exceeds the limit of ${this.#maxBatchLen}`;
      this.#reply(errorResponse(null, new RpcError(ErrorCode.INVALID_REQUEST, 'Invalid Request', why)));
      return;
    }
    if (msg.length === 0) {
      this.#reply(errorResponse(null, new RpcError(ErrorCode.INVALID_REQUEST)));
      return;
    }
    Promise.all(msg.map((m) => this.#handleOne(m))).then((answers) => {
      const parts = answers.filter(Boolean);
      // An all-notification (or all-response) batch gets nothing at all.
      if (parts.length) this.#reply(`[${parts.join(',')}]`);
    });
  }

  /**
   * Handle one message; resolves to the answer's JSON text, or null for none.
   * @param {any} m @returns {Promise<string | null>}
   */
  async #handleOne(m) {
    // Closed while this frame is handled (its notifications overflowed): nothing more runs.
    if (this.#peer.isClosed) return null;
    if (isResponse(m)) {
      this.#pending.answer(m);
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
      if (m.method === PROGRESS && this.#pending.progress(m.params, (e) => this.#onHandlerError(e, PROGRESS))) {
        return null;
      }
      this.#runNotification(m.method, m.params);
      return null;
    }
    const handler = this.#methods.get(m.method);
    if (!handler) return errorResponse(m.id, new RpcError(ErrorCode.METHOD_NOT_FOUND));
    // Each call counts, also inside a batch; past the limit it is refused, not queued
    // (the other side may try again later).
    if (this.#runningCalls >= this.#maxRunningCalls) {
      const why = `the limit of ${this.#maxRunningCalls} running calls is reached`;
      return errorResponse(m.id, new RpcError(ErrorCode.OVERLOADED, undefined, why));
    }
    const key = JSON.stringify(m.id);
    // A second call with the id of one still running cannot be told apart by a cancel:
    // it runs, but only the first is cancellable.
    const own = !this.#running.has(key);
    /** @type {{controller: AbortController, style: null|'lsp'|'mcp', done: boolean}} */
    const running = { controller: new AbortController(), style: null, done: false };
    if (own) this.#running.set(key, running);
    const token = has(m, 'progressToken') ? m.progressToken : undefined;
    /** @type {HandlerContext} */
    const cx = Object.freeze({
      peer: this.#peer,
      signal: running.controller.signal,
      wantsProgress: token !== undefined,
      progress: (value) => token !== undefined && !running.style && !running.done && this.#notice(progressNotification(token, value)),
    });
    let answer;
    this.#runningCalls += 1;
    try {
      // A handler that returns a plain value is done at once: a batch of synchronous
      // calls never counts up toward the limit.
      const out = handler(cx, m.params);
      answer = resultResponse(m.id, typeof out?.then === 'function' ? await out : out);
    } catch (e) {
      answer = cx.signal.aborted
        ? errorResponse(m.id, new RpcError(ErrorCode.REQUEST_CANCELLED))
        : errorResponse(m.id, this.#asRpcError(e, m.method));
    } finally {
      this.#runningCalls -= 1;
      running.done = true;
      if (own) this.#running.delete(key);
    }
    // The MCP form of cancel asks for no answer at all.
    return running.style === 'mcp' ? null : answer;
  }

  /**
   * An incoming cancel: aborts the handler of the call it names, if it still runs.
   * @param {'lsp'|'mcp'} style @param {any} params
   */
  #onCancel(style, params) {
    const id = style === 'mcp' ? params?.requestId : params?.id;
    if (!isValidId(id)) return;
    const running = this.#running.get(JSON.stringify(id));
    // Finished or unknown: nothing changes, and a cancel is never answered.
    if (!running || running.style) return;
    running.style = style;
    running.controller.abort(new RpcError(ErrorCode.REQUEST_CANCELLED));
  }

  /** @param {string} method @param {any} params */
  #runNotification(method, params) {
    const cx = this.#notificationContext;
    const handler = this.#notifications.get(method);
    if (!handler) {
      // A notification is a request without an id: a method of that name runs, as a call
      // would (not in the notifications' order), and its answer is dropped. Unknown:
      // dropped, never answered, not even an error.
      const asMethod = this.#methods.get(method);
      if (!asMethod) return;
      // It runs as a call does, so it counts as one: past the limit it cannot be
      // refused with an answer, so it is dropped, and `onHandlerError` hears why (a
      // flood of them must not run without bound, and a browser cannot stop reading).
      if (this.#runningCalls >= this.#maxRunningCalls) {
        const why = `dropped: the limit of ${this.#maxRunningCalls} running calls is reached`;
        this.#onHandlerError(new RpcError(ErrorCode.OVERLOADED, undefined, why), method);
        return;
      }
      this.#runningCalls += 1;
      Promise.resolve()
        .then(() => asMethod(cx, params))
        .catch((e) => {
          if (!(e instanceof RpcError)) this.#onHandlerError(e, method);
        })
        .finally(() => {
          this.#runningCalls -= 1;
        });
      return;
    }
    if (!this.#roomForNotifications) {
      this.#overflow(`too many notifications queued (limit ${this.#maxQueuedNotifications})`);
      return;
    }
    this.#queuedNotifications += 1;
    this.#notifyChain = this.#notifyChain
      .then(() => {
        this.#queuedNotifications -= 1; // running now, no longer waiting
        return handler(cx, params);
      })
      .catch((e) => {
        if (!(e instanceof RpcError)) this.#onHandlerError(e, method);
      });
  }

  /** @param {unknown} e @param {string} method @returns {RpcError} */
  #asRpcError(e, method) {
    if (e instanceof RpcError) return e;
    this.#onHandlerError(e, method);
    return new RpcError(ErrorCode.INTERNAL_ERROR);
  }
}
