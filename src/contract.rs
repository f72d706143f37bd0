//! Typed contracts: a method or notification named once, with its params and result
//! types, used by both sides of a connection.
//!
//! A contract is a unit type implementing [`Method`] (name, params, result) or
//! [`Notification`] (name, params), in the spirit of `lsp-types`. The
//! [`method!`](crate::method) and [`notification!`](crate::notification) macros define
//! one in a line. No code is generated beyond those trait impls: a typed handler is
//! registered with [`Router::handle`] (or [`Router::handle_with`], with
//! [`MethodOptions`]) and [`Router::on`], which are [`Router::method`] and
//! [`Router::notification`] with the types taken from the contract; a typed call is
//! [`Caller::request`] (and [`Caller::send`] for a notification), which is
//! [`Caller::call`] with the name and types taken from it, on any handle that calls.
//! A notification contract also names what goes to many peers:
//! [`Topics::publish`](crate::Topics::publish) and
//! [`ServerHandle::broadcast`](crate::ServerHandle::broadcast) take it (see [`Topic`]).
//!
//! ```
//! use jsonrpc_peer::{connect, Caller, Router, Server};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! pub struct SubtractParams {
//!     pub minuend: i64,
//!     pub subtrahend: i64,
//! }
//! jsonrpc_peer::method!(pub Subtract = "subtract", SubtractParams => i64);
//! jsonrpc_peer::notification!(pub Log = "log", (String,));
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> jsonrpc_peer::Result<()> {
//! // No annotations: the closure's types come from the contract.
//! let router = Router::new()
//!     .handle(Subtract, |_cx, p| async move { Ok(p.minuend - p.subtrahend) })
//!     .on(Log, |_cx, (line,)| async move { println!("{line}") });
//! let server = Server::bind("127.0.0.1:0").await?;
//! let url = format!("ws://{}", server.local_addr()?);
//! tokio::spawn(server.serve(router));
//!
//! let peer = connect(&url, Router::new()).await?;
//! let d = peer.request(Subtract, &SubtractParams { minuend: 42, subtrahend: 23 }).await?;
//! assert_eq!(d, 19);
//! peer.send(Log, &("done".to_string(),)).await?;
//! peer.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! A handler whose result is not the contract's is refused where the closure is
//! written (`expected ... to be a future that resolves to Result<i64, RpcError>`):
//!
//! ```compile_fail,E0271
//! # use jsonrpc_peer::Router;
//! jsonrpc_peer::method!(Subtract = "subtract", (i64, i64) => i64);
//! let router = Router::new().handle(Subtract, |_cx, (a, b)| async move {
//!     Ok(format!("{}", a - b)) // a String, where the contract says i64
//! });
//! ```
//!
//! A call whose params or result type is not the contract's is refused at the call
//! (``expected `i64`, found `&str` `` on the `"42"`):
//!
//! ```compile_fail,E0308
//! # async fn run(peer: jsonrpc_peer::Peer) -> jsonrpc_peer::Result<()> {
//! use jsonrpc_peer::Caller;
//! jsonrpc_peer::method!(Subtract = "subtract", (i64, i64) => i64);
//! let d = peer.request(Subtract, &("42", 23)).await?;
//! # Ok(()) }
//! ```

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::RpcError;
use crate::lanes::MethodOptions;
use crate::router::{Context, Router};
#[cfg(doc)]
use crate::Caller;

mod api;
mod stream;
mod topic;

pub use api::{Api, ApiMismatch, Describe, Entry, Kind, Side};
pub use stream::{Notifications, DEFAULT_STREAM_CAPACITY};
pub use topic::{NotificationName, OnTopic, Topic};

/// A method: its name on the wire, the params it takes and the result it answers with.
///
/// Implement it on a unit type (so a call names it as a value, without a turbofish),
/// or define both with [`method!`](crate::method):
///
/// ```
/// use jsonrpc_peer::Method;
///
/// pub struct Subtract;
/// impl Method for Subtract {
///     const NAME: &'static str = "subtract";
///     type Params = (i64, i64);
///     type Result = i64;
/// }
/// ```
///
/// A derived struct as `Params` takes named and positional params alike, as any
/// handler's params do.
pub trait Method: Send + Sync + 'static {
    /// The method's name on the wire.
    const NAME: &'static str;
    /// What a call carries as `params`.
    type Params: Serialize + DeserializeOwned + Send + 'static;
    /// What a successful answer carries as `result`.
    type Result: Serialize + DeserializeOwned + Send + 'static;
}

/// A notification: its name on the wire and the params it carries. See
/// [`notification!`](crate::notification).
pub trait Notification: Send + Sync + 'static {
    /// The notification's name on the wire.
    const NAME: &'static str;
    /// What it carries as `params`.
    type Params: Serialize + DeserializeOwned + Send + 'static;

    /// This notification, published on the topic `name` rather than on the topic of
    /// its own name: `topics.publish(PriceTick.on_topic("prices/BTC"), &price)` sends
    /// `price` notifications to the subscribers of `prices/BTC`. See [`Topic`].
    fn on_topic(self, name: impl Into<String>) -> OnTopic<Self>
    where
        Self: Sized,
    {
        OnTopic::new(self, name)
    }
}

/// Defines a [`Method`] contract in a line: a unit struct and its impl.
///
/// ```
/// # #[derive(serde::Serialize, serde::Deserialize)] pub struct SubtractParams { minuend: i64 }
/// jsonrpc_peer::method!(
///     /// Subtracts the subtrahend from the minuend.
///     pub Subtract = "subtract", SubtractParams => i64
/// );
/// use jsonrpc_peer::Method;
/// assert_eq!(Subtract::NAME, "subtract");
/// ```
#[macro_export]
macro_rules! method {
    ($(#[$attr:meta])* $vis:vis $name:ident = $wire:literal, $params:ty => $result:ty $(;)?) => {
        $(#[$attr])*
        #[derive(Clone, Copy, Debug, Default)]
        $vis struct $name;
        impl $crate::Method for $name {
            const NAME: &'static str = $wire;
            type Params = $params;
            type Result = $result;
        }
    };
}

/// Defines a [`Notification`] contract in a line: a unit struct and its impl.
///
/// ```
/// jsonrpc_peer::notification!(
///     /// The ticker's count, once a second.
///     pub Tick = "tick", (u64,)
/// );
/// use jsonrpc_peer::Notification;
/// assert_eq!(Tick::NAME, "tick");
/// ```
#[macro_export]
macro_rules! notification {
    ($(#[$attr:meta])* $vis:vis $name:ident = $wire:literal, $params:ty $(;)?) => {
        $(#[$attr])*
        #[derive(Clone, Copy, Debug, Default)]
        $vis struct $name;
        impl $crate::Notification for $name {
            const NAME: &'static str = $wire;
            type Params = $params;
        }
    };
}

impl<S: Send + Sync + 'static> Router<S> {
    /// Adds the handler of the method `M`: [`method`](Self::method) with the name, the
    /// params type and the result type taken from the contract, so the closure needs
    /// no annotations.
    ///
    /// # Panics
    ///
    /// As [`method`](Self::method): a name registered twice, or one beginning with `rpc.`.
    pub fn handle<M, F, Fut>(self, _method: M, handler: F) -> Self
    where
        M: Method,
        F: Fn(Context<S>, M::Params) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<M::Result, RpcError>> + Send + 'static,
    {
        self.method(M::NAME, handler)
    }

    /// Adds the handler of the method `M` that runs as `options` say (a lane,
    /// cooperative cancel): [`method_with`](Self::method_with) with the name and types
    /// taken from the contract.
    ///
    /// ```
    /// use jsonrpc_peer::{MethodOptions, Router};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Edit { doc: String, text: String }
    /// jsonrpc_peer::method!(pub Apply = "apply", Edit => usize);
    ///
    /// // Edits of one document in order, of different documents at once.
    /// let router = Router::new().handle_with(
    ///     Apply,
    ///     MethodOptions::new().keyed(|e: &Edit| e.doc.clone()),
    ///     |_cx, e| async move { Ok(e.text.len()) },
    /// );
    /// assert!(router.has_method("apply"));
    /// ```
    ///
    /// # Panics
    ///
    /// As [`method`](Self::method).
    pub fn handle_with<M, F, Fut>(
        self,
        _method: M,
        options: MethodOptions<M::Params>,
        handler: F,
    ) -> Self
    where
        M: Method,
        F: Fn(Context<S>, M::Params) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<M::Result, RpcError>> + Send + 'static,
    {
        self.method_with(M::NAME, options, handler)
    }

    /// Adds the handler of the notification `N`: [`notification`](Self::notification)
    /// with the name and params type taken from the contract. To read notifications as
    /// a stream instead, see [`stream`](Self::stream).
    ///
    /// # Panics
    ///
    /// As [`notification`](Self::notification).
    pub fn on<N, F, Fut>(self, _notification: N, handler: F) -> Self
    where
        N: Notification,
        F: Fn(Context<S>, N::Params) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.notification(N::NAME, handler)
    }
}
