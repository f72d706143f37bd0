// pending.js: our calls that wait for their answers, by id. An answer, a timeout, an
// abort or the close settles each one exactly once, and it then leaves the map, so a
// late answer is simply unmatched.
import { InvalidResponseError, LimitError, TimeoutError } from './errors.js';
import { ErrorCode, MAX_TIMER_MS, RpcError, has, responseProblem } from './wire.js';

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
  /** @type {Map<number, Entry>} */
  #calls = new Map();
  // Each batch of calls sent that still has calls waiting, as the set of their ids: a
  // batch the other side refuses whole is answered with one error without an id.
  /** @type {Set<Set<number>>} */
  #batches = new Set();
  #max;

  /** @param {number} max how many calls may wait at once (`maxPendingCalls`) */
  constructor(max) {
    this.#max = max;
  }

  /** How many calls wait. */
  get size() {
    return this.#calls.size;
  }

  /**
   * Throws LimitError unless `n` more calls may wait.
   * @param {number} n @param {string} what what is refused, for the error
   */
  check(n, what) {
    if (this.#calls.size + n > this.#max) {
      throw new LimitError(what, 'maxPendingCalls', this.#max, `${this.#calls.size} calls already wait for their answers`);
    }
  }

  /**
   * Registers call `id` and returns the promise of its outcome. Past `timeoutMs` (0 or
   * Infinity: never) `onTimeout(error)` runs, which is to give the call up.
   * @param {number} id @param {string} method @param {number} timeoutMs
   * @param {(error: TimeoutError) => void} onTimeout
   * @returns {{promise: Promise<any>, entry: Entry}}
   */
  add(id, method, timeoutMs, onTimeout) {
    /** @type {Entry} */
    let entry;
    const promise = new Promise((resolve, reject) => {
      entry = { resolve, reject, timer: null, sent: false };
    });
    // Past setTimeout's longest delay (some 24.8 days) a timeout is as good as none.
    if (timeoutMs > 0 && timeoutMs <= MAX_TIMER_MS) {
      entry.timer = setTimeout(() => onTimeout(new TimeoutError(method, timeoutMs)), timeoutMs);
    }
    this.#calls.set(id, entry);
    return { promise, entry };
  }

  /**
   * The calls `ids` (added, and about to be sent) go out as one batch. While it is the
   * only batch with calls waiting, an Invalid Request or Parse error without an id is
   * taken as its refusal (see `answer`). @param {number[]} ids
   */
  batch(ids) {
    if (ids.length === 0) return;
    const batch = new Set(ids);
    this.#batches.add(batch);
    for (const id of ids) {
      const entry = this.#calls.get(id);
      if (entry) entry.batch = batch;
    }
  }

  /** @param {number} id @returns {Entry | undefined} */
  get(id) {
    return this.#calls.get(id);
  }

  /**
   * Ends call `id`: it leaves the map, its timer and abort listener go, then `fn` gets
   * its entry (to resolve or reject it). False when it was not waiting.
   * @param {number} id @param {(entry: Entry) => void} fn @returns {boolean}
   */
  settle(id, fn) {
    const entry = this.#calls.get(id);
    if (!entry) return false;
    this.#calls.delete(id);
    // The last of its batch to end takes the batch with it.
    if (entry.batch?.delete(id) && entry.batch.size === 0) this.#batches.delete(entry.batch);
    clearTimeout(entry.timer);
    entry.unlisten?.();
    fn(entry);
    return true;
  }

  /** Rejects every waiting call with `error`. @param {Error} error */
  rejectAll(error) {
    for (const id of [...this.#calls.keys()]) this.settle(id, (p) => p.reject(error));
  }

  /**
   * A response: the call it answers resolves with its result, or rejects with its
   * RpcError (or InvalidResponseError when it is malformed). Unknown ids are dropped,
   * but an error with `id: null` may be a batch's refusal (see `batch`).
   * @param {any} m
   */
  answer(m) {
    if (m.id === null) {
      this.#refused(m);
      return;
    }
    // Our ids are numbers; anything else cannot be one of our calls.
    if (typeof m.id !== 'number') return;
    this.settle(m.id, (p) => {
      const problem = responseProblem(m);
      if (problem) p.reject(new InvalidResponseError(problem, m));
      else if (has(m, 'error')) p.reject(new RpcError(m.error.code, m.error.message, m.error.data));
      else p.resolve(m.result);
    });
  }

  /**
   * An answer with `id: null`. An Invalid Request or Parse error is how the other side
   * refuses a whole batch it will not read (longer than it takes, not understood): it
   * names no batch, so each call still waiting of the one batch of ours with calls
   * waiting, if exactly one has, rejects with it. With several, which was refused cannot
   * be told: they wait on. Anything else is dropped; a single call is never ended by it.
   * @param {any} m
   */
  #refused(m) {
    if (this.#batches.size !== 1 || responseProblem(m) || !has(m, 'error')) return;
    const { code, message, data } = m.error;
    if (code !== ErrorCode.INVALID_REQUEST && code !== ErrorCode.PARSE_ERROR) return;
    const [batch] = this.#batches;
    // Each settle takes its id out of `batch`: go over a copy.
    for (const id of [...batch]) this.settle(id, (p) => p.reject(new RpcError(code, message, data)));
  }

  /**
   * A `$/progress` for one of our calls goes to its `onProgress`; false when it is not
   * for a call of ours that asked (then it is an ordinary notification).
   * @param {any} params @param {(error: unknown) => void} onError a throwing onProgress
   * @returns {boolean}
   */
  progress(params, onError) {
    const entry = typeof params?.token === 'number' ? this.#calls.get(params.token) : undefined;
    if (!entry?.onProgress) return false;
    try {
      entry.onProgress(params.value);
    } catch (e) {
      onError(e);
    }
    return true;
  }
}
