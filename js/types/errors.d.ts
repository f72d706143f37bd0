/**
 * A call that got no answer within its `timeoutMs`. A ReconnectingPeer's call that
 * timed out waiting for the link says so, with where the link stands and its last
 * failure, in the message.
 */
export class TimeoutError extends Error {
    /** @param {string} method @param {number} timeoutMs @param {string} [why] */
    constructor(method: string, timeoutMs: number, why?: string);
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
 * at once rather than waiting for its timeout.
 */
export class InvalidResponseError extends Error {
    /** @param {string} problem @param {object} response the response as received */
    constructor(problem: string, response: object);
    response: any;
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
    constructor(what: string, limit: "maxPendingCalls" | "maxQueued" | "maxQueuedBytes" | "maxBufferedAmount", value: number, detail: string);
    limit: "maxPendingCalls" | "maxQueued" | "maxQueuedBytes" | "maxBufferedAmount";
    value: number;
}
