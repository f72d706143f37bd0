/**
 * @typedef {object} Entry
 * @property {(value: any) => void} resolve
 * @property {(error: any) => void} reject
 * @property {any} timer
 * @property {boolean} sent whether the request left (only then is a cancel worth sending)
 * @property {(value: any) => void} [onProgress]
 * @property {() => void} [unlisten] removes the abort listener
 * @property {Set<number>} [batch] the ids of its batch still waiting, itself included
 *   (see `batch`)
 */
export class Pending {
    /** @param {number} max how many calls may wait at once (`maxPendingCalls`) */
    constructor(max: number);
    /** How many calls wait. */
    get size(): number;
    /**
     * Throws LimitError unless `n` more calls may wait.
     * @param {number} n @param {string} what what is refused, for the error
     */
    check(n: number, what: string): void;
    /**
     * Registers call `id` and returns the promise of its outcome. Past `timeoutMs` (0 or
     * Infinity: never) `onTimeout(error)` runs, which is to give the call up.
     * @param {number} id @param {string} method @param {number} timeoutMs
     * @param {(error: TimeoutError) => void} onTimeout
     * @returns {{promise: Promise<any>, entry: Entry}}
     */
    add(id: number, method: string, timeoutMs: number, onTimeout: (error: TimeoutError) => void): {
        promise: Promise<any>;
        entry: Entry;
    };
    /**
     * The calls `ids` (added, and about to be sent) go out as one batch. While it is the
     * only batch with calls waiting, an Invalid Request or Parse error without an id is
     * taken as its refusal (see `answer`). @param {number[]} ids
     */
    batch(ids: number[]): void;
    /** @param {number} id @returns {Entry | undefined} */
    get(id: number): Entry | undefined;
    /**
     * Ends call `id`: it leaves the map, its timer and abort listener go, then `fn` gets
     * its entry (to resolve or reject it). False when it was not waiting.
     * @param {number} id @param {(entry: Entry) => void} fn @returns {boolean}
     */
    settle(id: number, fn: (entry: Entry) => void): boolean;
    /** Rejects every waiting call with `error`. @param {Error} error */
    rejectAll(error: Error): void;
    /**
     * A response: the call it answers resolves with its result, or rejects with its
     * RpcError (or InvalidResponseError when it is malformed). Unknown ids are dropped,
     * but an error with `id: null` may be a batch's refusal (see `batch`).
     * @param {any} m
     */
    answer(m: any): void;
    /**
     * A `$/progress` for one of our calls goes to its `onProgress`; false when it is not
     * for a call of ours that asked (then it is an ordinary notification).
     * @param {any} params @param {(error: unknown) => void} onError a throwing onProgress
     * @returns {boolean}
     */
    progress(params: any, onError: (error: unknown) => void): boolean;
    #private;
}
export type Entry = {
    resolve: (value: any) => void;
    reject: (error: any) => void;
    timer: any;
    /**
     * whether the request left (only then is a cancel worth sending)
     */
    sent: boolean;
    onProgress?: (value: any) => void;
    /**
     * removes the abort listener
     */
    unlisten?: () => void;
    /**
     * the ids of its batch still waiting, itself included
     * (see `batch`)
     */
    batch?: Set<number>;
};
import { TimeoutError } from './errors.js';
