//! Where a peer is in a cluster (its node's name and its local id), and what goes wrong
//! between nodes. A leaf that imports nothing of the crate: [`Error::Cluster`] names
//! [`ClusterError`] from the ground floor, and the cluster re-exports both
//! (`jsonrpc_peer::cluster::{ClusterError, PeerAddr}`).
//!
//! [`Error::Cluster`]: crate::Error::Cluster

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// What went wrong between nodes.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The node answered that it has no peer with that id.
    #[error("no peer {0}")]
    NoSuchPeer(PeerAddr),
    /// The node is not live (never seen, gone silent, or said goodbye).
    #[error("node {0:?} is not live")]
    NodeDown(String),
    /// The bus is unreachable.
    #[error("the bus is unavailable: {0}")]
    Unavailable(String),
    /// The other node could not make the call.
    #[error("the other node failed the call: {0}")]
    Remote(String),
    /// This node's cluster is stopped.
    #[error("the cluster is stopped")]
    Stopped,
    /// Bad configuration (node name, a handle already attached).
    #[error("cluster configuration: {0}")]
    Config(String),
    /// This node holds as much as it may for the bus (its outbox is full, or too many
    /// publications wait to be recorded): what failed reached no one.
    #[error("the cluster is overloaded: {0}")]
    Overloaded(String),
}

/// The address of a peer anywhere in a cluster: its node's name and its local
/// [`Peer::id`](crate::Peer::id). Written `node/42` ([`Display`](fmt::Display), [`FromStr`], and serde
/// as that string).
///
/// ```
/// use jsonrpc_peer::cluster::PeerAddr;
///
/// let addr: PeerAddr = "eu-1/42".parse().unwrap();
/// assert_eq!((addr.node.as_str(), addr.peer), ("eu-1", 42));
/// assert_eq!(addr.to_string(), "eu-1/42");
/// assert!("no-slash".parse::<PeerAddr>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    /// The node's name.
    pub node: String,
    /// The peer's id on that node.
    pub peer: u64,
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.node, self.peer)
    }
}

/// Why a string is not a [`PeerAddr`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a peer address (node/id): {0:?}")]
pub struct ParsePeerAddrError(String);

impl FromStr for PeerAddr {
    type Err = ParsePeerAddrError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let bad = || ParsePeerAddrError(s.chars().take(80).collect());
        let (node, peer) = s.rsplit_once('/').ok_or_else(bad)?;
        let peer = peer.parse().map_err(|_| bad())?;
        if !valid_node_id(node) {
            return Err(bad());
        }
        Ok(PeerAddr {
            node: node.to_owned(),
            peer,
        })
    }
}

impl Serialize for PeerAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PeerAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A node name: 1 to 64 characters of `A-Z a-z 0-9 . _ : -` (it becomes part of bus
/// channel names and of every [`PeerAddr`]).
pub(crate) fn valid_node_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}
