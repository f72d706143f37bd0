// limits.js: the bounds a peer keeps, their defaults, and the budget of sends that wait
// for a connection. Every bound has a default and an option (PeerOptions).
import { LimitError } from './errors.js';

/**
 * The limits' defaults, those of the Rust peer where it has the same bound: 1,024 frames
 * and 1 MiB for what waits to be sent (its `outgoing_queue` and `outgoing_queue_bytes`).
 */
export const LIMITS = Object.freeze({
  /** Our calls that may wait for their answers at once. */
  maxPendingCalls: 1024,
  /** Sends that may wait for the connection (a socket still connecting, a link that is down). */
  maxQueued: 1024,
  /** Bytes (UTF-8) of those sends. */
  maxQueuedBytes: 1024 * 1024,
  /** Bytes the socket may buffer (its `bufferedAmount`) before our sends are refused. */
  maxBufferedAmount: 1024 * 1024,
  /** Calls and notifications in one incoming batch (the Rust peer's `max_batch_len`). */
  maxBatchLen: 1000,
  /** Handlers of incoming calls running at once (the Rust peer's `max_in_flight`). */
  maxRunningCalls: 256,
  /**
   * Incoming notifications waiting for their ordered handler (the Rust peer's
   * `notification_queue`).
   */
  maxQueuedNotifications: 256,
  /**
   * Notifications a followed topic (`ReconnectingPeer.topic`) holds while its subscribe
   * answer is awaited: ten times the Rust server's default history (1,000), which it
   * replays before it answers.
   */
  maxHeld: 10000,
  /**
   * The same notifications' size, as the length of their params' JSON text (the Rust
   * client's `TopicOptions::max_held_bytes`): a few large ones are bounded as many small
   * ones are.
   */
  maxHeldBytes: 64 * 1024 * 1024,
});

/**
 * The value of limit `name` in `options`, or its default. A limit is a number from 0 up;
 * `Infinity` turns it off.
 * @param {Record<string, any>} options @param {keyof LIMITS} name @returns {number}
 */
export function limitOf(options, name) {
  const value = options[name] ?? LIMITS[name];
  if (typeof value !== 'number' || !(value >= 0)) {
    throw new RangeError(`${name} must be a number from 0 up (Infinity for none), not ${String(value)}`);
  }
  return value;
}

/**
 * Sends that wait for a connection, bounded in count and bytes. As in the Rust peer's
 * queue, a send goes in while fewer than the limit wait, so one frame larger than
 * `maxQueuedBytes` can still go (the bytes waiting stay under the limit plus one send).
 */
export class WaitingSends {
  #count = 0;
  #bytes = 0;
  #maxCount;
  #maxBytes;

  /** @param {number} maxCount @param {number} maxBytes */
  constructor(maxCount, maxBytes) {
    this.#maxCount = maxCount;
    this.#maxBytes = maxBytes;
  }

  /** How many sends wait. */
  get count() {
    return this.#count;
  }

  /** How many bytes they hold. */
  get bytes() {
    return this.#bytes;
  }

  /**
   * Counts in a send of `bytes`, or throws LimitError (and counts nothing) when the
   * limit is reached. Returns the function that counts it out again (once).
   * @param {number} bytes @param {string} what what is sent, for the error
   * @returns {() => void}
   */
  admit(bytes, what) {
    if (this.#count >= this.#maxCount) {
      throw new LimitError(what, 'maxQueued', this.#maxCount, `${this.#count} sends already wait for the connection`);
    }
    if (this.#bytes >= this.#maxBytes) {
      throw new LimitError(what, 'maxQueuedBytes', this.#maxBytes, `${this.#bytes} bytes already wait for the connection`);
    }
    this.#count += 1;
    this.#bytes += bytes;
    let counted = true;
    return () => {
      if (!counted) return;
      counted = false;
      this.#count -= 1;
      this.#bytes -= bytes;
    };
  }
}
