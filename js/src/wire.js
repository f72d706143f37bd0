// wire.js: the JSON-RPC 2.0 wire forms. Error codes and RpcError (what travels in an
// error response), and the pure functions that build and check messages. Nothing here
// touches a socket.
//
// Choices the specification leaves to us (the same as the Rust peer where it has them):
// - Only a *valid* Request without an `id` member is a notification, and it is never
//   answered. An invalid object is answered with -32600 even without an `id` (the
//   specification's own example `{"jsonrpc": "2.0", "method": 1, "params": "bar"}`).
// - Ids are echoed as JSON.parse reads them: integers beyond 2^53 lose precision, as in
//   any JavaScript JSON-RPC library.
// - Cancellation and progress have the Rust peer's wire forms:
//   `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":ID}}` (or MCP's
//   `notifications/cancelled` with `requestId`), a top-level `"progressToken"` member on a
//   request, and `{"method":"$/progress","params":{"token":T,"value":V}}` notifications.

/** The error codes the specification defines. */
export const ErrorCode = Object.freeze({
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  /** The caller cancelled the call (the Language Server Protocol's RequestCancelled). */
  REQUEST_CANCELLED: -32800,
  /**
   * A server error of this package's (the specification's -32000..-32099): too many of
   * the other side's calls already run here (`maxRunningCalls`); the call did not run,
   * and may be tried again later.
   */
  OVERLOADED: -32001,
});

export const CANCEL_LSP = '$/cancelRequest';
export const CANCEL_MCP = 'notifications/cancelled';
export const PROGRESS = '$/progress';

const MESSAGES = {
  [ErrorCode.PARSE_ERROR]: 'Parse error',
  [ErrorCode.INVALID_REQUEST]: 'Invalid Request',
  [ErrorCode.METHOD_NOT_FOUND]: 'Method not found',
  [ErrorCode.INVALID_PARAMS]: 'Invalid params',
  [ErrorCode.INTERNAL_ERROR]: 'Internal error',
  [ErrorCode.REQUEST_CANCELLED]: 'Request cancelled',
  [ErrorCode.OVERLOADED]: 'Too many calls running',
};

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

/**
 * A request (with `id`) or a notification (without), strict in what we send: throws
 * TypeError for a method that is not a string or params that are neither an array nor an
 * object (`undefined` leaves `params` out).
 * @param {string} method
 * @param {Array|object} [params]
 * @param {number} [id]
 * @returns {{jsonrpc: '2.0', method: string, params?: any, id?: number, progressToken?: number}}
 */
export function request(method, params, id) {
  if (typeof method !== 'string') throw new TypeError('method must be a string');
  if (params !== undefined && (params === null || typeof params !== 'object')) {
    throw new TypeError('params must be an array, an object or undefined');
  }
  /** @type {{jsonrpc: '2.0', method: string, params?: any, id?: number, progressToken?: number}} */
  const m = { jsonrpc: '2.0', method };
  if (params !== undefined) m.params = params;
  if (id !== undefined) m.id = id;
  return m;
}

/**
 * The cancel notification for our call `id`, in the given style.
 * @param {'lsp'|'mcp'} style @param {number} id @returns {string}
 */
export function cancelNotification(style, id) {
  return JSON.stringify(
    style === 'mcp'
      ? { jsonrpc: '2.0', method: CANCEL_MCP, params: { requestId: id } }
      : { jsonrpc: '2.0', method: CANCEL_LSP, params: { id } },
  );
}

/** A progress notification. @param {*} token @param {*} value @returns {string} */
export function progressNotification(token, value) {
  return JSON.stringify({ jsonrpc: '2.0', method: PROGRESS, params: { token, value } });
}

/**
 * Checks a handler registration; returns the name.
 * @param {string} name @param {Function} handler @returns {string}
 */
export function checkName(name, handler) {
  if (typeof name !== 'string') throw new TypeError('method name must be a string');
  if (name.startsWith('rpc.')) {
    throw new Error(`method names beginning with "rpc." are reserved by JSON-RPC 2.0: ${name}`);
  }
  if (typeof handler !== 'function') throw new TypeError('handler must be a function');
  return name;
}

/** @param {object} o @param {string} k @returns {boolean} */
export const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

/** @param {*} m @returns {boolean} */
export function isObject(m) {
  return m !== null && typeof m === 'object' && !Array.isArray(m);
}

/** @param {*} id @returns {boolean} */
export function isValidId(id) {
  return id === null || typeof id === 'string' || typeof id === 'number';
}

/**
 * A response is an object with `result` or `error` and no `method`; never answered.
 * @param {*} m @returns {boolean}
 */
export function isResponse(m) {
  return isObject(m) && !has(m, 'method') && (has(m, 'result') || has(m, 'error'));
}

/**
 * null when the response `m` (to one of our calls) is valid, else what is wrong.
 * @param {*} m @returns {string | null}
 */
export function responseProblem(m) {
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

/**
 * null when `m` is a valid Request or Notification, else `{ id }` to answer with.
 * @param {*} m @returns {{id: *} | null}
 */
export function invalidRequest(m) {
  if (!isObject(m)) return { id: null };
  const ok =
    m.jsonrpc === '2.0' &&
    typeof m.method === 'string' &&
    (m.params === undefined || (m.params !== null && typeof m.params === 'object')) &&
    (!has(m, 'id') || isValidId(m.id));
  if (ok) return null;
  return { id: has(m, 'id') && isValidId(m.id) ? m.id : null };
}

/** A result response's text. @param {*} id @param {*} result @returns {string} */
export function resultResponse(id, result) {
  try {
    // The result member is required, so a handler returning nothing answers null; a
    // value JSON leaves out (a function, a symbol, a toJSON giving undefined) is no result.
    const body = JSON.stringify(result === undefined ? null : result);
    if (body === undefined) return errorResponse(id, new RpcError(ErrorCode.INTERNAL_ERROR));
    return `{"jsonrpc":"2.0","result":${body},"id":${JSON.stringify(id)}}`;
  } catch {
    // A result JSON cannot carry (BigInt, a cycle) is the handler's failure.
    return errorResponse(id, new RpcError(ErrorCode.INTERNAL_ERROR));
  }
}

/** An error response's text. @param {*} id @param {RpcError} err @returns {string} */
export function errorResponse(id, err) {
  try {
    return JSON.stringify({ jsonrpc: '2.0', error: err.toJSON(), id });
  } catch {
    return JSON.stringify({ jsonrpc: '2.0', error: { code: err.code, message: err.message }, id });
  }
}

/**
 * The UTF-8 length of `text` in bytes (what a text frame carries, and what a socket's
 * `bufferedAmount` counts), without encoding it.
 * @param {string} text @returns {number}
 */
/** The longest delay `setTimeout` takes: a longer one fires at once. */
export const MAX_TIMER_MS = 0x7fffffff;

/**
 * `text` cut to at most `max` bytes of UTF-8, at a code point's boundary.
 * @param {string} text @param {number} max @returns {string}
 */
export function truncateUtf8(text, max) {
  if (utf8Length(text) <= max) return text;
  let out = '';
  let bytes = 0;
  for (const ch of text) {
    const n = utf8Length(ch);
    if (bytes + n > max) break;
    out += ch;
    bytes += n;
  }
  return out;
}

export function utf8Length(text) {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) bytes += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      // A surrogate pair: two code units, four bytes.
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 2;
        i += 1;
      } else bytes += 2;
    } else bytes += 2;
  }
  return bytes;
}
