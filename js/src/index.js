// jsonrpc-peer: JSON-RPC 2.0 between two equal peers over a WebSocket, for the browser
// (and Node), with the same semantics and wire forms as the Rust crate of the same name.
// Dependency-free ES modules: import them as they are, no build step.
//
//   wire.js       error codes, RpcError, building and checking messages (pure)
//   errors.js     what goes wrong locally: TimeoutError, ClosedError, LimitError, ...
//   limits.js     the bounds and their defaults
//   pending.js    our calls waiting for their answers (internal)
//   peer.js       Peer and connect(): one connection, both directions; what it sends
//   dispatch.js   what arrives on a connection: handlers, answers, cancels (internal)
//   batch.js      Batch: several calls and notifications in one frame
//   reconnect.js  ReconnectingPeer and reconnecting(): a link that comes back by itself
//   topics.js     TopicFollower: a topic followed across reconnects, resumed from its position;
//                 its presence (members, joins and leaves)

export { ErrorCode, RpcError } from './wire.js';
export { ClosedError, InvalidResponseError, LimitError, TimeoutError } from './errors.js';
export { LIMITS } from './limits.js';
export { Peer, connect } from './peer.js';
export { Batch } from './batch.js';
export { ReconnectingPeer, backoffDelay, reconnecting } from './reconnect.js';
export { PRESENCE_JOIN, PRESENCE_LEAVE, TopicFollower } from './topics.js';

/** @typedef {import('./peer.js').PeerOptions} PeerOptions */
/** @typedef {import('./peer.js').HandlerContext} HandlerContext */
/** @typedef {import('./peer.js').Handler} Handler */
/** @typedef {import('./batch.js').BatchItem} BatchItem */
/** @typedef {import('./reconnect.js').Backoff} Backoff */
/** @typedef {import('./reconnect.js').ReconnectOptions} ReconnectOptions */
/** @typedef {import('./reconnect.js').LinkState} LinkState */
/** @typedef {import('./topics.js').Position} Position */
/** @typedef {import('./topics.js').TopicInfo} TopicInfo */
/** @typedef {import('./topics.js').Subscription} Subscription */
/** @typedef {import('./topics.js').Member} Member */
/** @typedef {import('./topics.js').PresenceChange} PresenceChange */
/**
 * @template [T=any]
 * @typedef {import('./topics.js').TopicOptions<T>} TopicOptions
 */
