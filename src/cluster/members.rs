//! Presence across the cluster: this node's members written to the bus's store, the
//! other nodes' members kept in a view per followed topic, their joins and leaves told
//! to the topics.
//!
//! Where the truth lives: each node owns its part of each topic (its own members) and
//! alone writes it, to the store (Redis keys with an expiry that its heartbeats refresh,
//! `member_store.rs`) and then, as a delta, on the topic's channel. Other nodes keep a
//! view built from a read of the store and the deltas that follow it (`view.rs`), so
//! [`presence_count`](crate::Topics::presence_count) is a read of memory. Nothing of
//! ours is central: a node that dies stops refreshing and its parts expire; the others
//! drop its members as soon as the roster does (its heartbeat window), or at once when
//! it says goodbye.
//!
//! One task owns this node's written parts (versions, what was written) and is the only
//! writer of the views; the relay and the receive loop reach it through [`Members`]:
//! a changed member marks its topic (never waits), deltas and gaps arrive in a bounded
//! queue (one that overflows is a topic read again), follow and unfollow as messages.
//!
//! Faults:
//! - a delta lost on the bus shows as a hole in the versions (or a gap in the channel's
//!   sequence): the node's part is read again;
//! - this node's bus outage: its deltas wait in the outbox, its writes are done again
//!   when the bus is back (each part anew, then a `sync` word so the others read it),
//!   and every view is read again. Nodes that left the roster while this node heard no
//!   one are not taken for dead then; one heartbeat window after the bus is back, those
//!   still missing are (the roster refills from their hellos meanwhile);
//! - another node leaves the roster (silent for its window, a goodbye, or back as
//!   another incarnation): its members leave every view at once;
//! - the store lost everything (a Redis restart): every node writes its parts again
//!   when its link is back; a part missing from a record of another generation than
//!   the one it was written in is kept until its node writes it or one more read finds
//!   it missing;
//! - whatever else slips through (a lost last delta): every heartbeat window, each view
//!   is compared with the store's versions and read again where they differ.

mod own;
mod relay;
mod task;
mod view;

pub(super) use relay::MembersRelay;
pub(super) use task::Task;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::backplane::{Backplane, BackplaneError};
use super::envelope::{Header, Me};
use super::member_store::{PresenceKey, PresenceRead, StoredPresence};
use super::status::ClusterState;
use super::sync::lock;
use crate::addr::ClusterError;
use crate::error::{Error, Result};
use view::View;

/// Deltas from the receive loop that may wait for the task; past this a topic is read
/// again instead.
const INCOMING: usize = 16_384;

/// Topics written or refreshed per bus round trip.
const BATCH: usize = 256;

/// The live nodes and their incarnations, as the nodes task publishes them.
pub(super) type Live = watch::Receiver<Arc<HashMap<String, String>>>;

/// The room's handle: what the relay, the receive loop and the node reach.
pub(super) struct Members {
    me: Arc<Me>,
    prefix: String,
    /// How long a written part lives without a refresh: the heartbeat window.
    ttl: Duration,
    call_timeout: Duration,
    bus: Arc<dyn Backplane>,
    /// The followed topics' views; the task alone writes them.
    views: DashMap<Box<str>, View>,
    /// This node's members that changed, by topic: a set, so as many entries as
    /// (topic, member) pairs at most, however fast they change.
    dirty: Mutex<HashMap<Box<str>, HashSet<u64>>>,
    wake: Notify,
    control: mpsc::UnboundedSender<Control>,
    incoming: mpsc::Sender<Incoming>,
    /// Topics whose deltas did not fit in the queue, or whose channel was interrupted.
    overflowed: Mutex<HashSet<Box<str>>>,
    /// Topics that lost their last local subscriber: their views may go.
    unfollowed: Mutex<HashSet<Box<str>>>,
    live: Live,
    state: watch::Receiver<ClusterState>,
}

enum Control {
    Follow(Box<str>, oneshot::Sender<()>),
    /// The bus is back after an outage of this node's (the receive loop, once per
    /// outage). Told, not only seen on the state's `watch`: that keeps only the latest
    /// value, and an outage shorter than the task's turn (down and up before it looked)
    /// would leave the views missing what was said meanwhile until the next check.
    BusBack,
    Shutdown(oneshot::Sender<()>),
}

enum Incoming {
    Said {
        topic: Box<str>,
        node: String,
        incarnation: String,
        body: Bytes,
    },
    Gap {
        topic: Box<str>,
        node: String,
    },
}

/// What the task reads.
pub(super) struct Inbox {
    control: mpsc::UnboundedReceiver<Control>,
    incoming: mpsc::Receiver<Incoming>,
}

/// How the room is set up.
pub(super) struct Setup {
    pub me: Arc<Me>,
    pub prefix: String,
    pub window: Duration,
    pub call_timeout: Duration,
    pub bus: Arc<dyn Backplane>,
    pub live: Live,
    pub state: watch::Receiver<ClusterState>,
}

impl Members {
    pub fn new(setup: Setup) -> (Arc<Members>, Inbox) {
        let (control_tx, control) = mpsc::unbounded_channel();
        let (incoming_tx, incoming) = mpsc::channel(INCOMING);
        let members = Arc::new(Members {
            me: setup.me,
            prefix: setup.prefix,
            ttl: setup.window,
            call_timeout: setup.call_timeout,
            bus: setup.bus,
            views: DashMap::new(),
            dirty: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            control: control_tx,
            incoming: incoming_tx,
            overflowed: Mutex::new(HashSet::new()),
            unfollowed: Mutex::new(HashSet::new()),
            live: setup.live,
            state: setup.state,
        });
        (members, Inbox { control, incoming })
    }

    /// A presence envelope on `topic`'s channel (the receive loop).
    pub fn said(&self, topic: &str, header: &Header<'_>, body: Bytes) {
        if !self.views.contains_key(topic) {
            return; // not followed here: nobody's view to change
        }
        let incoming = Incoming::Said {
            topic: topic.into(),
            node: header.o.to_string(),
            incarnation: header.i.to_string(),
            body,
        };
        self.queue(topic, incoming);
    }

    /// Messages from `node` on `topic`'s channel went missing (the receive loop).
    pub fn gap(&self, topic: &str, node: &str) {
        if self.views.contains_key(topic) {
            let incoming = Incoming::Gap {
                topic: topic.into(),
                node: node.to_owned(),
            };
            self.queue(topic, incoming);
        }
    }

    /// The bus is back after this node's outage (the receive loop, once per outage):
    /// the task writes this node's parts again and reads every view again.
    pub fn bus_back(&self) {
        // Unbounded: one per outage. Gone only when the task is, and then nobody reads.
        let _ = self.control.send(Control::BusBack);
    }

    /// `topic`'s channel lost messages while the bus as a whole stayed up (one server
    /// of several went away, a slot moved; the receive loop): its view is read whole.
    pub fn interrupted(&self, topic: &str) {
        if self.views.contains_key(topic) {
            lock(&self.overflowed).insert(topic.into());
            self.wake.notify_one();
        }
    }

    fn queue(&self, topic: &str, incoming: Incoming) {
        if self.incoming.try_send(incoming).is_err() {
            lock(&self.overflowed).insert(topic.into());
            self.wake.notify_one();
        }
    }

    /// Takes this node's parts off the store, for at most `limit` (the node's
    /// shutdown; the others drop its members when it says goodbye).
    pub async fn shutdown(&self, limit: Duration) {
        let (done, wait) = oneshot::channel();
        if self.control.send(Control::Shutdown(done)).is_ok() {
            let _ = tokio::time::timeout(limit, wait).await;
        }
    }

    fn key(&self, topic: &str) -> PresenceKey {
        PresenceKey::new(&self.prefix, topic)
    }

    fn is_up(&self) -> bool {
        *self.state.borrow() == ClusterState::Up
    }

    /// The node is stopped: presence is this node's alone, as without a cluster.
    fn is_stopped(&self) -> bool {
        *self.state.borrow() == ClusterState::Stopped
    }

    async fn read(&self, topic: &str, node: Option<&str>, members: bool) -> Result<StoredPresence> {
        let mut read = PresenceRead::new(self.key(topic));
        read.node = node.map(str::to_owned);
        read.members = members;
        match tokio::time::timeout(self.call_timeout, self.bus.presence_read(read)).await {
            Ok(Ok(stored)) => Ok(stored),
            Ok(Err(e)) => Err(unavailable(&e)),
            Err(_) => Err(Error::timeout(None, self.call_timeout)),
        }
    }

    /// Whether a part read from the store is a live node's (not this one's).
    fn is_live(&self, node: &str, incarnation: &str) -> bool {
        node != self.me.id
            && self
                .live
                .borrow()
                .get(node)
                .is_some_and(|i| i == incarnation)
    }
}

/// Resolves once `stop` says so (its guard never lives across the select's handlers).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn unavailable(e: &BackplaneError) -> Error {
    Error::Cluster(ClusterError::Unavailable(e.to_string()))
}
