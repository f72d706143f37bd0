//! The public face of topic history: its bounds, positions, what publishing and
//! subscribing answer, and its error. A leaf: it imports nothing of the crate, so
//! `error.rs` names `HistoryError` without pointing up at `topics/`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How much of a topic's past is kept, for subscribers that come back
/// ([`Topics::keep_history`](crate::Topics::keep_history)).
///
/// The oldest publications go first while any bound is exceeded: more than
/// [`max_len`](Self::max_len) publications, more than [`max_bytes`](Self::max_bytes) of
/// their data (as serialized), or older than [`max_age`](Self::max_age). A publication
/// whose data alone is larger than `max_bytes` is refused
/// ([`HistoryError::TooLarge`]).
///
/// ```
/// use std::time::Duration;
/// use jsonrpc_peer::HistoryConfig;
///
/// let config = HistoryConfig::default().max_len(100).max_age(Duration::from_secs(60));
/// assert_eq!((config.max_len, config.max_bytes), (100, 1 << 20));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryConfig {
    /// Publications kept (default 1,000).
    pub max_len: usize,
    /// Bytes of publications' data kept (default 1 MiB).
    pub max_bytes: usize,
    /// How long a publication is kept (default 5 minutes). Older ones are never
    /// replayed, and their memory goes within a minute after, even on a topic where
    /// nothing happens.
    pub max_age: Duration,
    /// How long a history made by
    /// [`keep_history_for_all`](crate::Topics::keep_history_for_all) is kept with no
    /// subscriber and no publication (default 24 hours); then it is forgotten, epoch and
    /// offset with it, so a process publishing on ever new topics (one per user, say)
    /// does not keep one for each for as long as it runs. A client resuming from a
    /// forgotten history is told its position was not recovered (as after a restart).
    /// In a cluster the bus keeps the history: a node forgets only its cache of it.
    /// Histories set up with [`keep_history`](crate::Topics::keep_history) are kept.
    pub max_idle: Duration,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            max_len: 1000,
            max_bytes: 1 << 20,
            max_age: Duration::from_secs(300),
            max_idle: Duration::from_secs(24 * 3600),
        }
    }
}

impl HistoryConfig {
    /// Sets [`max_len`](Self::max_len).
    pub fn max_len(mut self, value: usize) -> Self {
        self.max_len = value;
        self
    }

    /// Sets [`max_bytes`](Self::max_bytes).
    pub fn max_bytes(mut self, value: usize) -> Self {
        self.max_bytes = value;
        self
    }

    /// Sets [`max_age`](Self::max_age).
    pub fn max_age(mut self, value: Duration) -> Self {
        self.max_age = value;
        self
    }

    /// Sets [`max_idle`](Self::max_idle).
    pub fn max_idle(mut self, value: Duration) -> Self {
        self.max_idle = value;
        self
    }
}

/// A place in a topic's history: the `offset` of a publication (from 1, each the
/// previous + 1) within an `epoch`, an opaque string that changes whenever the history
/// offsets point into is lost (on one node: when the process restarts). On the wire
/// `{"epoch":"...","offset":42}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Position {
    /// Names one history of the topic.
    pub epoch: String,
    /// A publication's offset in it; 0 before the first.
    pub offset: u64,
}

/// What [`Topics::subscribe_from`](crate::Topics::subscribe_from) answers, serialized
/// exactly as the ready-made `subscribe` method answers on the wire:
/// `{"epoch":E,"offset":K}`, with `"recovered":true|false` when a position was given.
///
/// Live publications follow from `offset + 1`. With `recovered: true`, everything after
/// the position given up to `offset` was queued for the subscriber before this answer;
/// with `recovered: false` nothing was (the position was outside the history kept, or
/// of another epoch): the subscriber should fetch its state afresh.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Subscribed {
    /// The topic's current epoch.
    pub epoch: String,
    /// The newest offset when the subscription took effect.
    pub offset: u64,
    /// Whether everything after the position given was replayed; `None` (left out on
    /// the wire) when no position was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<bool>,
}

impl Subscribed {
    /// The position live publications continue from.
    pub fn position(&self) -> Position {
        Position {
            epoch: self.epoch.clone(),
            offset: self.offset,
        }
    }
}

/// What [`Topics::publish`](crate::Topics::publish) did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Published {
    /// How many of this node's subscribers it was queued for (those catching up on the
    /// history get it from there, and are not counted). In a cluster, on a topic with
    /// history, this node's live subscribers when the bus recorded it: they get it
    /// through the bus, in offset order, like every other node's.
    pub delivered: usize,
    /// On a topic with history, the offset it was recorded at; `None` without history.
    pub offset: Option<u64>,
}

/// Why a topic's history could not do what was asked (as
/// [`Error::History`](crate::Error::History)).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The topic keeps no history, so it has no positions to subscribe from.
    #[error("topic `{topic}` keeps no history")]
    NotKept {
        /// The topic.
        topic: String,
    },
    /// The publication's data alone is larger than the topic's
    /// [`HistoryConfig::max_bytes`]: it was not recorded, and reached no one.
    #[error("topic `{topic}`: a publication of {bytes} bytes does not fit its history of {max_bytes} bytes")]
    TooLarge {
        /// The topic.
        topic: String,
        /// The data's size, as serialized.
        bytes: usize,
        /// The topic's bound.
        max_bytes: usize,
    },
    /// In a cluster, a topic with history is published under its own name: every node
    /// makes the notification from the topic and the data the bus recorded. A
    /// publication under another method (a contract [`on_topic`](crate::Notification::on_topic))
    /// was not recorded, and reached no one.
    #[error("topic `{topic}` keeps history in a cluster: it is published as `{topic}`, not as `{method}`")]
    OtherName {
        /// The topic.
        topic: String,
        /// The method it was published under.
        method: String,
    },
}
