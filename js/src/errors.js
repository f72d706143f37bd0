// errors.js: what goes wrong locally. None of these travels on the wire (RpcError, in
// wire.js, is the one that does).

/**
 * A call that got no answer within its `timeoutMs`. A ReconnectingPeer's call that
 * timed out waiting for the link says so, with where the link stands and its last
 * failure, in the message.
 */
export class TimeoutError extends Error {
  /** @param {string} method @param {number} timeoutMs @param {string} [why] */
  constructor(method, timeoutMs, why) {
    super(`call to "${method}" timed out after ${timeoutMs} ms${why ? ` (${why})` : ''}`);
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
 * at once rather than waiting for its timeout.
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
 * A send refused at once because a limit was reached: too many calls wait for their
 * answers (`maxPendingCalls`), too many sends (or bytes) wait for the connection
 * (`maxQueued`, `maxQueuedBytes`), or the socket already buffers too much
 * (`maxBufferedAmount`). Nothing was sent; trying again later may succeed.
 */
export class LimitError extends Error {
  /**
   * @param {string} what what was refused, e.g. `call to "sum"`
   * @param {'maxPendingCalls'|'maxQueued'|'maxQueuedBytes'|'maxBufferedAmount'} limit the option
   * @param {number} value the option's value
   * @param {string} detail what stands at the limit, e.g. `1024 calls wait for their answers`
   */
  constructor(what, limit, value, detail) {
    super(`${what} refused: ${detail} (${limit} is ${value})`);
    this.name = 'LimitError';
    this.limit = limit;
    this.value = value;
  }
}
