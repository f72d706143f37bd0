// batch.js: calls and notifications gathered, then sent as one array frame.
import { request } from './wire.js';

/**
 * One call or notification of a batch, checked when it was added.
 * @typedef {{method: string, params: any, isCall: boolean}} BatchItem
 */

/**
 * A batch under construction; see `Peer.batch()`.
 * `send()` resolves to one outcome per call, in the order added:
 * `{ ok: true, result }` or `{ ok: false, error }` (error: RpcError, TimeoutError,
 * ClosedError or InvalidResponseError). It never rejects for one failed call; it rejects
 * only when nothing was sent: ClosedError (the connection is gone) or LimitError (its
 * calls would pass `maxPendingCalls`, or the socket buffers past `maxBufferedAmount`).
 */
export class Batch {
  #send;
  /** @type {BatchItem[]} ids are taken at send time, so a batch never sent uses none */
  #items = [];
  #sent = false;

  /**
   * Made by `Peer.batch()`, which hands it the peer's own way to send a batch.
   * @param {(items: BatchItem[], timeoutMs?: number) => Promise<any>[]} send sends the
   *   items as one frame and returns one promise per call, or throws when nothing was sent
   */
  constructor(send) {
    this.#send = send;
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
   * notifications resolves to `[]` once sent. When the other side refuses the batch
   * whole (one -32600 or -32700 with `id: null`: longer than its batch limit, say) while
   * it is the only batch of this peer's with calls waiting, each call still waiting ends
   * at once with that error, an RpcError; with other batches waiting, which was refused
   * cannot be told, and they wait for their timeout.
   * @param {{ timeoutMs?: number }} [options] timeout for each call in the batch (default
   *   the peer's `timeoutMs`)
   * @returns {Promise<Array<{ok: true, result: *} | {ok: false, error: Error}>>}
   */
  async send({ timeoutMs } = {}) {
    if (this.#sent) throw new Error('batch already sent');
    this.#sent = true;
    if (this.#items.length === 0) return [];
    const answers = this.#send(this.#items, timeoutMs);
    return Promise.all(
      answers.map((a) =>
        a.then(
          (result) => ({ ok: /** @type {const} */ (true), result }),
          (error) => ({ ok: /** @type {const} */ (false), error }),
        ),
      ),
    );
  }
}
