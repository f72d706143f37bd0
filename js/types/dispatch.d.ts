/**
 * @typedef {import('./peer.js').Handler} Handler
 * @typedef {import('./peer.js').HandlerContext} HandlerContext
 */
export class Dispatch {
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
    constructor({ peer, pending, reply, notice, onHandlerError, maxBatchLen, maxRunningCalls, maxQueuedNotifications, overflow }: {
        peer: import("./peer.js").Peer;
        pending: import("./pending.js").Pending;
        reply: (text: string) => void;
        notice: (text: string) => boolean;
        onHandlerError: (error: unknown, method: string) => void;
        maxBatchLen?: number;
        maxRunningCalls?: number;
        maxQueuedNotifications?: number;
        overflow?: (reason: string) => void;
    });
    /** Number of incoming calls whose handlers are still running. */
    get runningCount(): number;
    /** @param {string} name @param {Handler} handler */
    method(name: string, handler: Handler): void;
    /** @param {string} name @param {Handler} handler */
    notification(name: string, handler: Handler): void;
    /** One text frame from the other side. @param {string} text */
    receive(text: string): void;
    #private;
}
export type Handler = import("./peer.js").Handler;
export type HandlerContext = import("./peer.js").HandlerContext;
