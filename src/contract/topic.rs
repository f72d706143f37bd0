//! What names a notification sent to many peers: a string (for a name known only at
//! run time), or a [`Notification`] contract, whose params type is checked where the
//! notification is sent.

use super::Notification;

/// The method of a notification sent to every peer
/// ([`ServerHandle::broadcast`](crate::ServerHandle::broadcast)): a string, whose params
/// may be of any type, or a [`Notification`] contract, whose params must be its own
/// `Params`.
///
/// ```compile_fail,E0277
/// # fn run(handle: jsonrpc_peer::ServerHandle) -> jsonrpc_peer::Result<()> {
/// jsonrpc_peer::notification!(Tick = "tick", (u64,));
/// handle.broadcast(Tick, &("one",))?; // a (&str,) where Tick carries a (u64,)
/// # Ok(()) }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not send params of type `{P}`",
    label = "a notification of another params type",
    note = "a notification contract sends its own `Params` type (by reference); a string sends any"
)]
pub trait NotificationName<P: ?Sized> {
    /// The notification's method.
    fn method(&self) -> &str;

    /// Whether params that are one value go as a one-element array, as a contract's
    /// handler reads them (true for a [`Notification`] contract).
    #[doc(hidden)]
    fn positional(&self) -> bool {
        false
    }
}

impl<P: ?Sized> NotificationName<P> for &str {
    fn method(&self) -> &str {
        self
    }
}

impl<P: ?Sized> NotificationName<P> for String {
    fn method(&self) -> &str {
        self
    }
}

impl<P: ?Sized> NotificationName<P> for &String {
    fn method(&self) -> &str {
        self
    }
}

impl<N: Notification> NotificationName<N::Params> for N {
    fn method(&self) -> &str {
        N::NAME
    }

    fn positional(&self) -> bool {
        true
    }
}

/// A topic: its name, which subscribers subscribe to, and the method of the
/// notifications it sends them ([`Topics::publish`](crate::Topics::publish), and the
/// resuming client's [`ReconnectingBuilder::topic`](crate::ReconnectingBuilder::topic)).
///
/// - A string names both, and its params may be of any type.
/// - A [`Notification`] contract is the topic of its own name (`PriceTick` declared
///   `"price"` publishes on the topic `price`), and its params must be its own.
/// - [`OnTopic`] is a contract on a topic of another name
///   ([`Notification::on_topic`]): `PriceTick.on_topic("prices/BTC")` sends `price`
///   notifications to the subscribers of `prices/BTC`, so one handler of `price` on the
///   client serves several topics (the params, or the subscription, tell them apart).
///
/// ```
/// use jsonrpc_peer::{Notification, Topics};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// pub struct Price { symbol: String, cents: u64 }
/// jsonrpc_peer::notification!(pub PriceTick = "price", Price);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> jsonrpc_peer::Result<()> {
/// let topics = Topics::new();
/// let price = Price { symbol: "BTC".into(), cents: 6_500_000 };
/// topics.publish(PriceTick, &price).await?; // topic "price"
/// topics.publish(PriceTick.on_topic("prices/BTC"), &price).await?; // method "price"
/// topics.publish("prices", &serde_json::json!({"BTC": 65_000})).await?; // by name
/// # Ok(()) }
/// ```
///
/// A publication whose params are not the contract's fails to compile:
///
/// ```compile_fail,E0277
/// # async fn run(topics: jsonrpc_peer::Topics) -> jsonrpc_peer::Result<()> {
/// #[derive(serde::Serialize, serde::Deserialize)]
/// pub struct Price { cents: u64 }
/// jsonrpc_peer::notification!(pub PriceTick = "price", Price);
/// topics.publish(PriceTick, &65_000).await?; // an integer where PriceTick carries a Price
/// # Ok(()) }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a topic of params of type `{P}`",
    label = "a topic of another params type",
    note = "a notification contract publishes its own `Params` type (by reference); a string publishes any"
)]
pub trait Topic<P: ?Sized> {
    /// The topic's name.
    fn name(&self) -> &str;

    /// The method of its notifications (the name, unless it differs).
    fn method(&self) -> &str {
        self.name()
    }

    /// Whether params that are one value go as a one-element array, as a contract's
    /// handler reads them (true for a [`Notification`] contract). On a topic with
    /// history the value is the envelope's `data`, kept as published.
    #[doc(hidden)]
    fn positional(&self) -> bool {
        false
    }
}

impl<P: ?Sized> Topic<P> for &str {
    fn name(&self) -> &str {
        self
    }
}

impl<P: ?Sized> Topic<P> for String {
    fn name(&self) -> &str {
        self
    }
}

impl<P: ?Sized> Topic<P> for &String {
    fn name(&self) -> &str {
        self
    }
}

impl<N: Notification> Topic<N::Params> for N {
    fn name(&self) -> &str {
        N::NAME
    }

    fn positional(&self) -> bool {
        true
    }
}

/// A [`Notification`] contract on a topic whose name is not the notification's
/// method; from [`Notification::on_topic`].
#[derive(Clone, Debug)]
pub struct OnTopic<N> {
    _notification: N,
    name: String,
}

impl<N> OnTopic<N> {
    pub(crate) fn new(notification: N, name: impl Into<String>) -> Self {
        OnTopic {
            _notification: notification,
            name: name.into(),
        }
    }
}

impl<N: Notification> Topic<N::Params> for OnTopic<N> {
    fn name(&self) -> &str {
        &self.name
    }

    fn method(&self) -> &str {
        N::NAME
    }

    fn positional(&self) -> bool {
        true
    }
}

impl<N: Notification> Topic<N::Params> for &OnTopic<N> {
    fn name(&self) -> &str {
        &self.name
    }

    fn method(&self) -> &str {
        N::NAME
    }

    fn positional(&self) -> bool {
        true
    }
}
