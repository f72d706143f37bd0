//! JSON-RPC 2.0 over WebSocket between two equal peers.
//!
//! Each connection runs one symmetric [`Peer`]: it serves the calls that arrive through
//! a [`Router`] and makes calls of its own, matching answers to calls by id. Either
//! side may call, notify, or send a batch; a handler may call back the side that called
//! it while it runs.
//!
//! ```
//! use jsonrpc_peer::{connect, Caller, Context, Router, RpcError, Server};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Subtract {
//!     minuend: i64,
//!     subtrahend: i64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> jsonrpc_peer::Result<()> {
//! // The server's methods. A derived struct takes named and positional params alike.
//! let router = Router::new().method("subtract", |_cx: Context, p: Subtract| async move {
//!     Ok::<_, RpcError>(p.minuend - p.subtrahend)
//! });
//! let server = Server::bind("127.0.0.1:0").await?;
//! let url = format!("ws://{}", server.local_addr()?);
//! tokio::spawn(server.serve(router));
//!
//! // The client serves methods too: the server may call it back.
//! let client = Router::new().method("hello", |_cx: Context, (): ()| async {
//!     Ok::<_, RpcError>("hi")
//! });
//! let peer = connect(&url, client).await?;
//! let positional: i64 = peer.call("subtract", [42, 23]).await?;
//! let named: i64 = peer
//!     .call("subtract", serde_json::json!({"subtrahend": 23, "minuend": 42}))
//!     .await?;
//! assert_eq!((positional, named), (19, 19));
//!
//! let err = peer.call::<i64>("divide", [1, 0]).await.unwrap_err();
//! assert_eq!(err.rpc().map(|e| e.code), Some(jsonrpc_peer::ErrorCode::METHOD_NOT_FOUND));
//! peer.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Where to go from here
//!
//! - [`contract`]: typed methods and notifications ([`Method`], [`Notification`]) for
//!   both sides, notification streams, and a service description ([`Api`]).
//! - [`Router`]: methods and notifications, typed params, shared state.
//! - [`Caller`]: one way to call, for a [`Peer`], a [`Reconnecting`] client and a
//!   peer on another node of a [`cluster`]; options per call (timeout, cancel grace,
//!   progress) on the awaited [`Call`].
//! - [`Peer`]: [`batch`](Peer::batch), close, closed, info; every call ends.
//! - [`Server`] and [`ServerHandle`]: the registry of live peers, broadcast, hooks,
//!   graceful shutdown; [`Topics`] for publish/subscribe.
//! - [`connect`] and [`Reconnecting`]: clients, one that comes back by itself.
//! - [`HandshakePolicy`]: connection limit, Origin allow-list, authentication.
//! - [`PeerConfig`]: every limit, with its default.
//! - [`layer`]: call layers around every call served and made (metrics, limits,
//!   authorization per call); [`RateLimit`]; [`Router::fallback`] for unnamed methods.
//!
//! Features: `axum` (mount an endpoint in an axum app: `axum::Endpoint`),
//! `rustls` (`wss://` for servers and clients), `schemars` (serve `rpc.discover`, an
//! OpenRPC document of an [`Api`]: `Router::discover`), `metrics` (the `Metrics` call
//! layer and the engine's metrics, through the `metrics` facade).
//!
//! # The choices behind the API
//!
//! - **Typed all the way.** A [`Method`] or [`Notification`] contract is accepted
//!   wherever a name is: [`Caller::request`] and [`Caller::send`],
//!   [`Router::handle`] and [`Router::handle_with`] (with [`MethodOptions`]: lanes,
//!   cooperative cancel), [`Topics::publish`] ([`Topic`]),
//!   [`ServerHandle::broadcast`] ([`NotificationName`]) and
//!   [`ReconnectingBuilder::topic`]. The params type is checked where the call is
//!   written; a string still names anything, for names known only at run time. A
//!   topic's name may differ from its notifications' method:
//!   `PriceTick.on_topic("prices/BTC")` ([`Notification::on_topic`]).
//! - **One way to call.** [`Caller`] is one required method, `send_request(request,
//!   options)`, that [`Peer`], [`Reconnecting`] and [`cluster::RemotePeer`] implement;
//!   `call`, `request`, `notify` and `send` are written once on top of it. Options are
//!   set on the awaited [`Call`] (`.timeout(d)`, `.cancel_grace(d)`,
//!   `.with_progress()`, or a whole [`CallOptions`]), so the common call stays
//!   `peer.request(M, &p).await`, a function can take `&impl Caller`, and a new option
//!   is one field and one method. A [`Batch`] registers and waits for its calls on the
//!   same path as a single call, and cancels those still waiting when dropped.
//! - **A request per redial.** [`Reconnecting`] makes each attempt's handshake request
//!   afresh: an async [`ReconnectingBuilder::before_dial`] hook gets the base request
//!   and returns the one to send (a token fetched now), and
//!   [`Reconnecting::set_request`] changes the base over a live connection (a token
//!   the server renewed); the connection up stays as it is.
//!
//! # What the wire sees
//!
//! Everything the JSON-RPC 2.0 specification says, to the letter: batches, notifications
//! that are never answered (not even with an error), `"id": null` as a request, ids
//! echoed exactly as received, the specification's error codes. Incoming arrays may
//! also hold responses, the other side's answer to a batch of ours.
//!
//! # Nothing hangs, nothing grows without bound
//!
//! Every call ends with its result, the other side's error, a timeout, or
//! [`Error::Closed`] with the reason. Every limit (message size, batch length, calls
//! in flight, queues) has a default and a setting in [`PeerConfig`]. A handler that
//! panics answers `-32603` and the connection goes on.
//!
//! # Untrusted input
//!
//! No frame makes a peer panic, hang or hold memory beyond its limits:
//! - text that is not JSON is answered `-32700 Parse error`; valid JSON that is not a
//!   request `-32600 Invalid Request` (with the id when one could be read);
//! - nesting depth costs no stack: envelopes are read without recursing into `params`,
//!   and serde_json stops at 128 levels when a handler's type reads them (`-32602`);
//! - a message over [`PeerConfig::max_message_size`] closes the connection with 1009
//!   before it is buffered whole;
//! - binary frames are ignored (JSON-RPC is text) and non-UTF-8 text frames are a
//!   WebSocket protocol error that ends the connection;
//! - an id of any size is echoed as received (bounded by the message size);
//! - a member given twice (`{"id":1,"id":2}`) makes the message invalid, as parsers
//!   disagree on which one wins.

#![warn(missing_docs)]
// No path a peer can reach may panic: no unwrap outside tests.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod addr;
#[cfg(feature = "axum")]
pub mod axum;
mod batch;
mod call;
mod cancel;
mod client;
pub mod cluster;
mod config;
pub mod contract;
mod deadline;
#[cfg(feature = "schemars")]
mod discover;
mod driver;
#[cfg(feature = "fuzzing")]
mod echo;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
mod history;
mod lanes;
pub mod layer;
mod limit;
mod logs;
mod message;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
mod metrics;
mod peer;
mod pending;
mod policy;
mod presence;
mod progress;
mod queue;
mod reconnect;
mod registry;
mod relay;
mod router;
mod server;
mod sync;
mod topics;
pub mod transport;

pub use batch::Batch;
pub use call::{Call, CallFuture, CallOptions, Caller, FromReply, Progress, Reply, Request};
#[cfg(feature = "rustls")]
pub use client::connect_with_tls;
pub use client::{connect, connect_with_config};
pub use config::{CancelStyle, PeerConfig, SlowPeer};
pub use contract::{
    Api, ApiMismatch, Method, Notification, NotificationName, Notifications, OnTopic, Topic,
};
#[cfg(feature = "schemars")]
pub use discover::OPENRPC_VERSION;
pub use error::{CloseReason, Error, ErrorCode, Result, RpcError};
pub use history::{HistoryConfig, HistoryError, Position, Published, Subscribed};
pub use lanes::MethodOptions;
pub use limit::{RateLimit, RATE_LIMIT_CLOSE};
pub use peer::{ConnectionInfo, Peer};
pub use policy::{HandshakePolicy, Refusal};
pub use presence::{Member, PresenceChange, PresenceError, PresenceEvent, PresenceLimits};
pub use reconnect::{
    Backoff, LinkState, Reconnecting, ReconnectingBuilder, TopicEvent, TopicEvents, TopicOptions,
};
pub use registry::ServerHandle;
pub use router::{Context, Router, Unrouted};
/// The schemars crate this one describes types with (feature `schemars`).
#[cfg(feature = "schemars")]
pub use schemars;
pub use server::Server;
/// What [`connect`] and [`Reconnecting::builder`] take: a URL, or a handshake request with
/// headers (`Authorization`, subprotocols), as tokio-tungstenite takes it.
pub use tokio_tungstenite::tungstenite::client::{ClientRequestBuilder, IntoClientRequest};
/// The `http` crate's types, as the handshake uses them (headers in [`ConnectionInfo`]).
pub use tokio_tungstenite::tungstenite::http;
pub use topics::{PresenceEvents, PresenceJoin, PresenceLeave, TopicMethods, Topics};

/// The README's code, compiled and run as a doc test so it stays true (with the axum
/// and metrics features, which its snippets need; `cargo test --workspace` turns them
/// on).
#[cfg(all(doctest, feature = "axum", feature = "metrics"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
