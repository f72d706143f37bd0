//! The bus under a cluster: publish bytes to a channel, subscribe, unsubscribe, and one
//! stream of events. Nothing here knows JSON-RPC; envelopes, ordering, duplicates and
//! gaps are the cluster's business, written once above this trait.

use std::future::Future;
use std::pin::Pin;

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::member_store::{PartWrite, PresenceKey, PresenceRead, StoredPresence};
use crate::addr::ClusterError;

/// A boxed, `Send` future, as the [`Backplane`] methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a bus reports, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BusEvent {
    /// A message published on a channel this bus is subscribed to.
    Message {
        /// The channel it was published on.
        channel: String,
        /// The bytes, as published.
        payload: Bytes,
    },
    /// The link to the bus is lost: messages published elsewhere meanwhile are lost to us.
    Down,
    /// The link is back and every subscription has been issued again.
    Up,
}

/// Why a bus operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackplaneError {
    /// The bus cannot be reached now (it is down or reconnecting).
    #[error("backplane unavailable: {0}")]
    Unavailable(String),
    /// The backplane was shut down.
    #[error("backplane closed")]
    Closed,
}

/// `?` turns it into this crate's [`Error`](crate::Error), so
/// `RedisBackplane::connect` (feature `redis`) fits a
/// function returning [`jsonrpc_peer::Result`](crate::Result): both kinds become
/// [`ClusterError::Unavailable`], the error a call across the cluster meets when the
/// bus cannot be reached.
///
/// ```
/// use jsonrpc_peer::cluster::{BackplaneError, ClusterError};
///
/// let e: jsonrpc_peer::Error = BackplaneError::Closed.into();
/// assert!(matches!(e, jsonrpc_peer::Error::Cluster(ClusterError::Unavailable(_))));
/// ```
impl From<BackplaneError> for crate::Error {
    fn from(e: BackplaneError) -> Self {
        let reason = match e {
            BackplaneError::Unavailable(reason) => reason,
            BackplaneError::Closed => e.to_string(),
        };
        crate::Error::Cluster(ClusterError::Unavailable(reason))
    }
}

/// A publish/subscribe bus shared by the nodes of a cluster (Redis, in-memory, later NATS).
///
/// Implementations own their subscription set: after a reconnect they issue it again
/// before reporting [`BusEvent::Up`]. A subscription made twice is one subscription.
pub trait Backplane: Send + Sync + 'static {
    /// Publishes `payload` on `channel`. Resolves once the bus accepted it; publishes
    /// made one after another from one backplane arrive everywhere in that order.
    fn publish(&self, channel: &str, payload: Bytes) -> BoxFuture<'_, Result<(), BackplaneError>>;

    /// Publishes several messages, in order, as [`publish`](Self::publish) would one
    /// after another. A bus that can pipeline (Redis) overrides this to send them in one
    /// round trip; on an error, any prefix of them may have been published (the cluster
    /// sends them again after the next [`BusEvent::Up`] and receivers drop duplicates).
    fn publish_many(
        &self,
        messages: Vec<(String, Bytes)>,
    ) -> BoxFuture<'_, Result<(), BackplaneError>> {
        Box::pin(async move {
            for (channel, payload) in messages {
                self.publish(&channel, payload).await?;
            }
            Ok(())
        })
    }

    /// Subscribes to `channel`. Resolves once the bus acknowledged it: a message
    /// published anywhere after that is delivered.
    fn subscribe(&self, channel: &str) -> BoxFuture<'_, Result<(), BackplaneError>>;

    /// Unsubscribes from `channel`.
    fn unsubscribe(&self, channel: &str) -> BoxFuture<'_, Result<(), BackplaneError>>;

    /// Presence: applies `writes` (each to one node's part of one topic's members, see
    /// [`PartWrite`]) in order, and answers each topic's record's generation after its
    /// write (empty for a change to a part that is gone: nothing written); on an error
    /// any prefix of them may have been applied. The default fails: a
    /// backplane that keeps nothing has presence on each node only.
    fn presence_write(
        &self,
        writes: Vec<PartWrite>,
    ) -> BoxFuture<'_, Result<Vec<String>, BackplaneError>> {
        let _ = writes;
        Box::pin(async { Err(no_presence()) })
    }

    /// Presence: reads one topic's parts ([`PresenceRead`]). The default fails.
    fn presence_read(
        &self,
        read: PresenceRead,
    ) -> BoxFuture<'_, Result<StoredPresence, BackplaneError>> {
        let _ = read;
        Box::pin(async { Err(no_presence()) })
    }

    /// Presence: extends the life of `node`'s parts of the topics at `keys` by `ttl`
    /// (and their indexes'); says, per key, whether the part was there (one that was
    /// not must be written again). The default fails.
    fn presence_refresh(
        &self,
        keys: Vec<PresenceKey>,
        node: &str,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<bool>, BackplaneError>> {
        let _ = (keys, node, ttl);
        Box::pin(async { Err(no_presence()) })
    }

    /// The event stream, taken once (later calls return `None`). Bounded: a consumer
    /// that stops reading makes the bus drop or disconnect, never grow without bound.
    fn events(&self) -> Option<mpsc::Receiver<BusEvent>>;

    /// Messages lost on their way to this node because its event stream was full
    /// (default 0, for a bus that never drops). A node reports it in
    /// [`ClusterStats::bus_dropped`](super::ClusterStats::bus_dropped), so it stays
    /// readable once the backplane moved into [`Cluster::builder`](super::Cluster::builder).
    fn dropped(&self) -> u64 {
        0
    }

    /// How many times the link to the bus was dialed again after a loss (default 0).
    /// A node reports it in [`ClusterStats::bus_reconnects`](super::ClusterStats::bus_reconnects).
    fn reconnects(&self) -> u64 {
        0
    }
}

/// What a backplane answers to presence methods it does not have.
fn no_presence() -> BackplaneError {
    BackplaneError::Unavailable("this backplane keeps no presence".into())
}
