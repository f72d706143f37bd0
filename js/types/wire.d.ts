/**
 * A request (with `id`) or a notification (without), strict in what we send: throws
 * TypeError for a method that is not a string or params that are neither an array nor an
 * object (`undefined` leaves `params` out).
 * @param {string} method
 * @param {Array|object} [params]
 * @param {number} [id]
 * @returns {{jsonrpc: '2.0', method: string, params?: any, id?: number, progressToken?: number}}
 */
export function request(method: string, params?: any[] | object, id?: number): {
    jsonrpc: "2.0";
    method: string;
    params?: any;
    id?: number;
    progressToken?: number;
};
/**
 * The cancel notification for our call `id`, in the given style.
 * @param {'lsp'|'mcp'} style @param {number} id @returns {string}
 */
export function cancelNotification(style: "lsp" | "mcp", id: number): string;
/** A progress notification. @param {*} token @param {*} value @returns {string} */
export function progressNotification(token: any, value: any): string;
/**
 * Checks a handler registration; returns the name.
 * @param {string} name @param {Function} handler @returns {string}
 */
export function checkName(name: string, handler: Function): string;
/** @param {*} m @returns {boolean} */
export function isObject(m: any): boolean;
/** @param {*} id @returns {boolean} */
export function isValidId(id: any): boolean;
/**
 * A response is an object with `result` or `error` and no `method`; never answered.
 * @param {*} m @returns {boolean}
 */
export function isResponse(m: any): boolean;
/**
 * null when the response `m` (to one of our calls) is valid, else what is wrong.
 * @param {*} m @returns {string | null}
 */
export function responseProblem(m: any): string | null;
/**
 * null when `m` is a valid Request or Notification, else `{ id }` to answer with.
 * @param {*} m @returns {{id: *} | null}
 */
export function invalidRequest(m: any): {
    id: any;
} | null;
/** A result response's text. @param {*} id @param {*} result @returns {string} */
export function resultResponse(id: any, result: any): string;
/** An error response's text. @param {*} id @param {RpcError} err @returns {string} */
export function errorResponse(id: any, err: RpcError): string;
/**
 * `text` cut to at most `max` bytes of UTF-8, at a code point's boundary.
 * @param {string} text @param {number} max @returns {string}
 */
export function truncateUtf8(text: string, max: number): string;
export function utf8Length(text: any): any;
/** The error codes the specification defines. */
export const ErrorCode: Readonly<{
    PARSE_ERROR: -32700;
    INVALID_REQUEST: -32600;
    METHOD_NOT_FOUND: -32601;
    INVALID_PARAMS: -32602;
    INTERNAL_ERROR: -32603;
    /** The caller cancelled the call (the Language Server Protocol's RequestCancelled). */
    REQUEST_CANCELLED: -32800;
    /**
     * A server error of this package's (the specification's -32000..-32099): too many of
     * the other side's calls already run here (`maxRunningCalls`); the call did not run,
     * and may be tried again later.
     */
    OVERLOADED: -32001;
}>;
export const CANCEL_LSP: "$/cancelRequest";
export const CANCEL_MCP: "notifications/cancelled";
export const PROGRESS: "$/progress";
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
export function has(o: object, k: string): boolean;
/**
 * The UTF-8 length of `text` in bytes (what a text frame carries, and what a socket's
 * `bufferedAmount` counts), without encoding it.
 * @param {string} text @returns {number}
 */
/** The longest delay `setTimeout` takes: a longer one fires at once. */
export const MAX_TIMER_MS: 2147483647;
