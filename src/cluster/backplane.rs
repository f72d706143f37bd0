//! The bus under a cluster: publish bytes to a channel, subscribe, unsubscribe, and one
//! stream of events; and, for topics with history, a log per topic that the bus keeps
//! and numbers (append, read, position). Nothing here knows JSON-RPC; envelopes,
//! ordering, duplicates and gaps are the cluster's business, written once above this
//! trait.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::keys::TopicKeys;
use super::member_store::{PartWrite, PresenceKey, PresenceRead, StoredPresence};
use crate::addr::ClusterError;
use crate::history::{HistoryConfig, Position};

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
    /// These channels' subscriptions were interrupted while the bus as a whole stayed up
    /// (one of several servers went away and another took over its channels, or a slot
    /// moved) and are in place again: messages published on them meanwhile may be lost
    /// to us. Only a bus spread over several servers (Redis Cluster) reports it.
    Interrupted {
        /// The channels, each subscribed again.
        channels: Vec<String>,
    },
    /// A subscription asked for with [`Backplane::subscribe`] took effect, at this point
    /// of the stream: messages on `channel` after this event were published after it,
    /// and any before it are left over from an earlier subscription to the channel. The
    /// cluster starts the channel's sequence marks afresh here, so that what was published
    /// while this node was not subscribed is not taken for a gap. Sent only for a
    /// channel that was not subscribed (not for one subscribed again after a reconnect);
    /// a bus that cannot place it in its stream does not send it.
    Subscribed {
        /// The channel.
        channel: String,
    },
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
    /// This bus cannot do that (a bus without topic history, say).
    #[error("the backplane does not support {0}")]
    Unsupported(String),
    /// The bus answered something this backplane does not understand.
    #[error("unexpected answer from the bus: {0}")]
    Protocol(String),
    /// The bus refused the message for good (a Redis ACL that does not allow its
    /// channel, say): sending it again would be refused again. The cluster's outbox
    /// gives such a message up (counted in
    /// [`ClusterStats::outbox_refused`](crate::cluster::ClusterStats::outbox_refused))
    /// rather than hold everything behind it.
    #[error("refused by the bus: {0}")]
    Refused(String),
    /// Some messages of one [`Backplane::publish_many`] were not published, for now,
    /// and the others were: the bus is up, but not where those messages go (on a Redis
    /// Cluster, a shard with no master while a replica takes over, or for good when it
    /// has none). `failed` are their places among the call's messages, in order. The
    /// cluster's outbox sends them again later, holding back only their channels
    /// meanwhile, so that one dead shard does not hold up what goes to the others.
    #[error("backplane unavailable for {} of the messages: {why}", failed.len())]
    Partial {
        /// The places of the messages not published.
        failed: Vec<usize>,
        /// Why, as the bus said.
        why: String,
    },
}

/// One publication to record in a topic's history and publish, in one step
/// ([`Backplane::append`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Append<'a> {
    /// Where the topic's history and channel are.
    pub keys: &'a TopicKeys,
    /// How much history is kept; the oldest go while any bound is exceeded.
    pub bounds: &'a HistoryConfig,
    /// The epoch to start when the topic has no history on the bus (never had one, or
    /// the bus lost it).
    pub new_epoch: &'a str,
    /// The first part of the message published on `keys.channel`: the bus publishes
    /// `head`, then `"ep":"EPOCH","off":OFFSET}` and a newline, then `data`, so that
    /// subscribers learn the position the bus gave it (the cluster's `head` is its
    /// envelope header without its closing brace).
    pub head: &'a [u8],
    /// What is recorded: the publication's data, as its subscribers get it.
    pub data: &'a [u8],
}

impl<'a> Append<'a> {
    /// An append of `data` to the history at `keys`.
    pub fn new(
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        new_epoch: &'a str,
        head: &'a [u8],
        data: &'a [u8],
    ) -> Self {
        Append {
            keys,
            bounds,
            new_epoch,
            head,
            data,
        }
    }

    /// The message the bus publishes for this append at `epoch` and `offset`.
    pub fn message(&self, epoch: &str, offset: u64) -> Bytes {
        let mut message = Vec::with_capacity(self.head.len() + self.data.len() + 48);
        message.extend_from_slice(self.head);
        message.extend_from_slice(format!("\"ep\":\"{epoch}\",\"off\":{offset}}}\n").as_bytes());
        message.extend_from_slice(self.data);
        Bytes::from(message)
    }
}

/// One publication of a topic's history, as the bus kept it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// Its offset.
    pub offset: u64,
    /// How long ago it was recorded, by the bus's clock.
    pub age: Duration,
    /// Its data, as appended.
    pub data: Bytes,
}

/// A topic's history as the bus has it now, and entries of it
/// ([`Backplane::read_history`], [`Backplane::history_position`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct HistoryRead {
    /// The history's epoch; empty when the topic has none on the bus.
    pub epoch: String,
    /// The oldest offset kept (`last + 1` when none is).
    pub first: u64,
    /// The newest offset (0 before the first).
    pub last: u64,
    /// The entries asked for, in offset order: those after the offset given, when it is
    /// at least `first - 1` (else none: what followed it is gone).
    pub entries: Vec<HistoryEntry>,
}

impl HistoryRead {
    /// The epoch and newest offset.
    pub fn position(&self) -> Position {
        Position {
            epoch: self.epoch.clone(),
            offset: self.last,
        }
    }
}

fn unsupported<'a, T: Send + 'a>(what: &str) -> BoxFuture<'a, Result<T, BackplaneError>> {
    let error = BackplaneError::Unsupported(what.to_owned());
    Box::pin(async move { Err(error) })
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
            BackplaneError::Unavailable(reason) | BackplaneError::Partial { why: reason, .. } => {
                reason
            }
            BackplaneError::Closed
            | BackplaneError::Unsupported(_)
            | BackplaneError::Protocol(_)
            | BackplaneError::Refused(_) => e.to_string(),
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
    /// round trip; on an error, some of them may have been published (the cluster
    /// sends them again after the next [`BusEvent::Up`] and receivers drop duplicates;
    /// after [`BackplaneError::Refused`] it gives them up). A bus that knows which
    /// failed while the rest went through says so with [`BackplaneError::Partial`].
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

    /// Over how many channels the cluster spreads what every node publishes and every
    /// node hears (broadcasts and heartbeats). Default 1: one channel each. A bus whose
    /// channels live on several servers asks for more, so that no one server carries
    /// every node's broadcasts; each node publishes on one of them, chosen by its name
    /// (so its own order holds), and listens to all. Every node of a cluster must get
    /// the same number.
    fn spread(&self) -> usize {
        1
    }

    /// Records a publication in a topic's history and publishes it, atomically: the bus
    /// gives it the next offset of the topic (from 1, each the previous + 1, whichever
    /// node appends), trims the oldest while any bound is exceeded, and publishes
    /// [`Append::message`] on the topic's channel. When the topic has no history on
    /// the bus, one starts with [`Append::new_epoch`]. Resolves with the position once
    /// recorded; an error means it may or may not have been.
    ///
    /// A bus may record several appends of one topic at once and publish them as one
    /// *run*: `head`, then `"n":N,"ep":"EPOCH","off":FIRST}` and a newline, then each
    /// one's data after its length (4 bytes, big-endian), at offsets `FIRST` to
    /// `FIRST + N - 1` (the Redis backplane does, for what its publishers hand in
    /// together). Receiving nodes take either form.
    ///
    /// The default fails with [`BackplaneError::Unsupported`]: a bus without history.
    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Position, BackplaneError>> {
        let _ = append;
        unsupported("topic history (append)")
    }

    /// Reads a topic's history: its position and at most `max` entries after `after`
    /// (none when `after` is older than the oldest kept minus one). Trims by age first;
    /// never starts an epoch.
    ///
    /// The default fails with [`BackplaneError::Unsupported`].
    fn read_history<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        after: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        let _ = (keys, bounds, after, max);
        unsupported("topic history (read)")
    }

    /// A topic's history position (no entries), starting an epoch with `new_epoch`
    /// when the topic has none on the bus. Trims by age first.
    ///
    /// The default fails with [`BackplaneError::Unsupported`].
    fn history_position<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        new_epoch: &'a str,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        let _ = (keys, bounds, new_epoch);
        unsupported("topic history (position)")
    }

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
