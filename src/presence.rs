//! The public face of presence: who is subscribed to a topic as a member, what their
//! join and leave events carry, the bounds, and the error. A leaf beside `addr.rs`: it
//! imports nothing else of the crate, so `error.rs` names [`PresenceError`] without
//! pointing up at `topics/` (where [`Topics`](crate::Topics) keeps the members).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::addr::PeerAddr;

/// One member of a topic: where its connection is and the info it joined with. On the
/// wire `{"addr":"b/7","info":{...}}`.
///
/// The info stays as the JSON text it arrived as (no parse until a type reads it):
///
/// ```
/// use jsonrpc_peer::Member;
///
/// let member: Member = serde_json::from_str(r#"{"addr":"b/7","info":{"user":"ana"}}"#).unwrap();
/// #[derive(serde::Deserialize)]
/// struct Who { user: String }
/// assert_eq!(member.info_as::<Who>().unwrap().user, "ana");
/// assert_eq!(member.addr.to_string(), "b/7");
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Member {
    /// The member's connection: its node and its id there (`local/ID` without a
    /// cluster).
    pub addr: PeerAddr,
    /// What the member joined with, as JSON text.
    pub info: Box<RawValue>,
}

impl Member {
    /// A member at `addr` with `info`.
    pub fn new(addr: PeerAddr, info: Box<RawValue>) -> Self {
        Member { addr, info }
    }

    /// The info read as `T`.
    ///
    /// # Errors
    ///
    /// serde's, when the info does not fit `T`.
    pub fn info_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.info.get())
    }
}

impl PartialEq for Member {
    fn eq(&self, other: &Self) -> bool {
        self.addr == other.addr && self.info.get() == other.info.get()
    }
}

impl Eq for Member {}

/// The params of the `presence.join` and `presence.leave` notifications:
/// `{"topic":"chat","addr":"b/7","info":{"user":"ana"}}`. A leave carries the info the
/// member joined with.
///
/// ```
/// use jsonrpc_peer::PresenceChange;
///
/// let change: PresenceChange =
///     serde_json::from_str(r#"{"topic":"chat","addr":"b/7","info":{"user":"ana"}}"#).unwrap();
/// assert_eq!((change.topic.as_str(), change.info.get()), ("chat", r#"{"user":"ana"}"#));
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PresenceChange {
    /// The topic joined or left.
    pub topic: String,
    /// The member's connection.
    pub addr: PeerAddr,
    /// What the member joined with, as JSON text.
    pub info: Box<RawValue>,
}

impl PartialEq for PresenceChange {
    fn eq(&self, other: &Self) -> bool {
        self.topic == other.topic && self.addr == other.addr && self.info.get() == other.info.get()
    }
}

impl Eq for PresenceChange {}

impl PresenceChange {
    /// A change of `topic` about the member at `addr` with `info`.
    pub fn new(topic: impl Into<String>, addr: PeerAddr, info: Box<RawValue>) -> Self {
        PresenceChange {
            topic: topic.into(),
            addr,
            info,
        }
    }

    /// The member this change is about.
    pub fn member(&self) -> Member {
        Member::new(self.addr.clone(), self.info.clone())
    }

    /// The info read as `T`.
    ///
    /// # Errors
    ///
    /// serde's, when the info does not fit `T`.
    pub fn info_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.info.get())
    }
}

/// A join or a leave, as [`Topics::presence_events`](crate::Topics::presence_events)
/// yields them (this node's members and, in a cluster, the other nodes').
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PresenceEvent {
    /// A member joined (the `presence.join` notification).
    Join(PresenceChange),
    /// A member left: it unsubscribed, its connection ended, or its node went (the
    /// `presence.leave` notification).
    Leave(PresenceChange),
    /// This receiver fell behind by more than
    /// [`PresenceLimits::event_capacity`] events and lost this many of them: what it
    /// shows may be stale; [`Topics::presence`](crate::Topics::presence) has the state.
    Lagged(u64),
}

/// The bounds of presence on one [`Topics`](crate::Topics)
/// ([`Topics::set_presence_limits`](crate::Topics::set_presence_limits)).
///
/// ```
/// use jsonrpc_peer::PresenceLimits;
///
/// let limits = PresenceLimits::default().max_members(500).max_info_bytes(256);
/// assert_eq!((limits.max_members, limits.max_info_bytes, limits.max_topics_per_peer), (500, 256, 100));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PresenceLimits {
    /// Members a topic may have (default 100,000), counted as this node knows them: in
    /// a cluster, joins on other nodes at the same moment may pass it by as many as
    /// are in flight.
    pub max_members: usize,
    /// Bytes of one member's info, as JSON text (default 1 KiB).
    pub max_info_bytes: usize,
    /// Topics one connection may be a member of or watch (default 100).
    pub max_topics_per_peer: usize,
    /// Events a [`presence_events`](crate::Topics::presence_events) receiver may fall
    /// behind by before it loses the oldest (default 4,096).
    pub event_capacity: usize,
}

impl Default for PresenceLimits {
    fn default() -> Self {
        PresenceLimits {
            max_members: 100_000,
            max_info_bytes: 1024,
            max_topics_per_peer: 100,
            event_capacity: 4096,
        }
    }
}

impl PresenceLimits {
    /// Sets [`max_members`](Self::max_members).
    pub fn max_members(mut self, value: usize) -> Self {
        self.max_members = value;
        self
    }

    /// Sets [`max_info_bytes`](Self::max_info_bytes).
    pub fn max_info_bytes(mut self, value: usize) -> Self {
        self.max_info_bytes = value;
        self
    }

    /// Sets [`max_topics_per_peer`](Self::max_topics_per_peer).
    pub fn max_topics_per_peer(mut self, value: usize) -> Self {
        self.max_topics_per_peer = value;
        self
    }

    /// Sets [`event_capacity`](Self::event_capacity) (at least 1). The events' channel
    /// is made with the first receiver: a capacity set after that changes nothing.
    pub fn event_capacity(mut self, value: usize) -> Self {
        self.event_capacity = value.max(1);
        self
    }
}

/// Why a connection could not join a topic's presence (as
/// [`Error::Presence`](crate::Error::Presence)).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PresenceError {
    /// Presence belongs to a subscription: subscribe first.
    #[error("not subscribed to topic `{topic}`")]
    NotSubscribed {
        /// The topic.
        topic: String,
    },
    /// The info is larger than [`PresenceLimits::max_info_bytes`].
    #[error("topic `{topic}`: member info of {bytes} bytes is over the limit of {max} bytes")]
    InfoTooLarge {
        /// The topic.
        topic: String,
        /// The info's size, as JSON text.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The topic has [`PresenceLimits::max_members`] members already.
    #[error("topic `{topic}` has {max} members, the most it may have")]
    TooManyMembers {
        /// The topic.
        topic: String,
        /// The limit.
        max: usize,
    },
    /// The connection is a member of (or watches) [`PresenceLimits::max_topics_per_peer`]
    /// topics already.
    #[error("a connection may be present in at most {max} topics")]
    TooManyTopics {
        /// The limit.
        max: usize,
    },
}
