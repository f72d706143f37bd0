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
    /**
     * Made by `Peer.batch()`, which hands it the peer's own way to send a batch.
     * @param {(items: BatchItem[], timeoutMs?: number) => Promise<any>[]} send sends the
     *   items as one frame and returns one promise per call, or throws when nothing was sent
     */
    constructor(send: (items: BatchItem[], timeoutMs?: number) => Promise<any>[]);
    /** Add a call. @param {string} method @param {Array|object} [params] @returns {Batch} */
    call(method: string, params?: any[] | object): Batch;
    /** Add a notification. @param {string} method @param {Array|object} [params] @returns {Batch} */
    notify(method: string, params?: any[] | object): Batch;
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
    send({ timeoutMs }?: {
        timeoutMs?: number;
    }): Promise<Array<{
        ok: true;
        result: any;
    } | {
        ok: false;
        error: Error;
    }>>;
    #private;
}
/**
 * One call or notification of a batch, checked when it was added.
 */
export type BatchItem = {
    method: string;
    params: any;
    isCall: boolean;
};
