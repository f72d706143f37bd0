//! A running node: how its rooms are wired at the start, and its stop.
//!
//! Five tasks per node, each owning its state; they talk by messages or through the
//! narrow handle of the room they reach, never through each other's fields:
//!
//! - the **receive loop** (receive.rs) reads the bus's events in order; it owns the
//!   sequence numbers seen and moves the state between `Up` and `Down`;
//! - the **outbox** task (outbox.rs) owns the envelopes waiting for the bus and sends
//!   them in order; every room pushes into it through [`Outbox::push`];
//! - the **nodes** task (nodes.rs) owns the table of live nodes: the receive loop hands
//!   it heartbeats and goodbyes ([`Heard`]), it publishes the [`Roster`];
//! - the **subscriptions** task (subscriptions.rs) owns the set of topic channels the
//!   bus has, and keeps it in step with the local subscribers;
//! - the **history room** (history.rs) puts what the bus recorded in offset order per
//!   topic when it is not simply the next one: fills holes from the bus's history,
//!   starts a cache over when the bus lost it, looks again when the bus is back;
//! - the **members** task (members.rs) owns this node's presence as written to the
//!   bus's store, and the views of the other nodes' members.
//!
//! [`Calls`] (calls.rs) owns the pending map of calls to other nodes. The nodes and
//! subscriptions tasks ask the receive loop to forget sequence numbers by message
//! ([`Forget`]). A node is the handles of these rooms; a new feature (presence) adds a
//! room and its handle here, not fields to the others.
//!
//! [`Forget`]: super::sequence::Forget

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use super::backplane::{Backplane, BusEvent};
use super::calls::Calls;
use super::envelope::{Kind, Me};
use super::gaps::Gaps;
use super::history::{History, Inbound, Room};
use super::members::{self, Members, MembersRelay};
use super::nodes::{Heard, Nodes, Roster, Table};
use super::outbox::{self, Outbox};
use super::receive::Receive;
use super::relay::ClusterRelay;
use super::sequence::Marks;
use super::status::{ClusterState, ClusterStats, Counters, GapHook};
use super::subscriptions::{self, Subscriptions};
use crate::addr::ClusterError;
use crate::error::{Error, Result};
use crate::registry::ServerHandle;
use crate::topics::Topics;

/// What the nodes task may hold unread from the receive loop before that waits.
const HEARD_CAPACITY: usize = 256;

/// The builder's settings.
pub(crate) struct Options {
    pub prefix: String,
    pub heartbeat: Duration,
    pub missed: u32,
    pub outbox_limit: usize,
    pub call_timeout: Duration,
    pub max_remote_calls: usize,
    pub on_gap: Option<GapHook>,
    pub gap_method: Option<String>,
    pub max_recording: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: "jp".into(),
            heartbeat: Duration::from_secs(2),
            missed: 3,
            outbox_limit: 8 << 20,
            call_timeout: Duration::from_secs(30),
            max_remote_calls: 1024,
            on_gap: None,
            gap_method: None,
            max_recording: 10_000,
        }
    }
}

/// A configuration error, as [`Error::Cluster`].
pub(crate) fn config(message: String) -> Error {
    Error::Cluster(ClusterError::Config(message))
}

/// A running node: the handles of its rooms, for [`Cluster`](super::Cluster).
pub(crate) struct Node {
    pub me: Arc<Me>,
    pub handle: ServerHandle,
    pub topics: Topics,
    pub call_timeout: Duration,
    pub state: watch::Sender<ClusterState>,
    pub roster: Arc<Roster>,
    pub outbox: Arc<Outbox>,
    pub calls: Arc<Calls>,
    subscriptions: Arc<Subscriptions>,
    history: Arc<History>,
    members: Arc<Members>,
    counters: Arc<Counters>,
    /// Read for its counters only: the outbox and subscriptions tasks use it.
    bus: Arc<dyn Backplane>,
    stop: watch::Sender<bool>,
}

impl Node {
    /// Subscribes the node's own channels, builds its rooms, attaches the relay to the
    /// registry and topics, and starts the tasks.
    pub(crate) async fn start(
        bus: Box<dyn Backplane>,
        id: String,
        handle: ServerHandle,
        topics: Topics,
        options: Options,
    ) -> Result<Arc<Node>> {
        let events = bus
            .events()
            .ok_or_else(|| config("the backplane's events were already taken".into()))?;
        let bus: Arc<dyn Backplane> = Arc::from(bus);
        let me = Arc::new(Me::new(id, &options.prefix, bus.spread()));
        let channels = me.channels.all().iter().chain(me.channels.control());
        for channel in channels.chain([&me.own]) {
            bus.subscribe(channel).await?;
        }
        let (node, history, members) = Node::new(me, handle, topics, bus.clone(), &options);
        node.attach()?;
        crate::metrics::cluster_bus(true);
        crate::metrics::cluster_nodes(1);
        node.spawn(bus, events, history, members, options);
        Ok(Arc::new(node))
    }

    /// The rooms' handles, and the history room's and the members task's inboxes; no
    /// task runs yet.
    fn new(
        me: Arc<Me>,
        handle: ServerHandle,
        topics: Topics,
        bus: Arc<dyn Backplane>,
        options: &Options,
    ) -> (Node, mpsc::Receiver<Inbound>, members::Inbox) {
        let state = watch::Sender::new(ClusterState::Up);
        let counters = Arc::new(Counters::default());
        let (history, inbox) = History::new(
            bus.clone(),
            me.clone(),
            counters.clone(),
            options.max_recording,
            state.subscribe(),
        );
        let window = crate::deadline::times(options.heartbeat, options.missed);
        let roster = Arc::new(Roster::new(&me.id));
        let outbox = Arc::new(Outbox::new(options.outbox_limit, window, state.subscribe()));
        let calls = Arc::new(Calls::new(
            me.clone(),
            outbox.clone(),
            state.subscribe(),
            roster.watch(),
            handle.clone(),
            options.call_timeout,
            options.max_remote_calls,
        ));
        let (members, members_inbox) = Members::new(members::Setup {
            me: me.clone(),
            prefix: options.prefix.clone(),
            window,
            call_timeout: options.call_timeout,
            bus: bus.clone(),
            live: roster.watch_live(),
            state: state.subscribe(),
        });
        let node = Node {
            me,
            handle,
            topics,
            call_timeout: options.call_timeout,
            state,
            roster,
            outbox,
            calls,
            subscriptions: Arc::new(Subscriptions::default()),
            history: Arc::new(history),
            members,
            counters,
            bus,
            stop: watch::Sender::new(false),
        };
        (node, inbox, members_inbox)
    }

    /// Makes the registry's broadcasts and the topics' publishes cluster-wide.
    fn attach(&self) -> Result<()> {
        let relay = Arc::new(ClusterRelay::new(
            self.me.clone(),
            &self.outbox,
            &self.subscriptions,
            &self.history,
            self.state.subscribe(),
            self.call_timeout,
        ));
        if !self.handle.attach(relay.clone()) {
            return Err(config("this ServerHandle already has a cluster".into()));
        }
        if !self.topics.attach(relay) {
            return Err(config("these Topics already have a cluster".into()));
        }
        if !self
            .topics
            .attach_members(Arc::new(MembersRelay::new(&self.members)))
        {
            return Err(config("these Topics already have a cluster".into()));
        }
        Ok(())
    }

    /// Starts the six tasks, each in a span that names the node, and says hello.
    fn spawn(
        &self,
        bus: Arc<dyn Backplane>,
        events: mpsc::Receiver<BusEvent>,
        inbox: mpsc::Receiver<Inbound>,
        members_inbox: members::Inbox,
        options: Options,
    ) {
        let (forget_tx, forget_rx) = mpsc::unbounded_channel();
        let (heard_tx, heard_rx) = mpsc::channel::<Heard>(HEARD_CAPACITY);
        let span = tracing::info_span!("cluster", node = %self.me.id);
        let gaps = Arc::new(Gaps {
            counters: self.counters.clone(),
            hook: options.on_gap,
            method: options.gap_method,
            topics: self.topics.clone(),
        });
        let room = Room {
            topics: self.topics.clone(),
            history: self.history.clone(),
            gaps: gaps.clone(),
            state: self.state.subscribe(),
            retry: HashSet::new(),
        };
        tokio::spawn(
            room.run(inbox, self.stop.subscribe())
                .instrument(span.clone()),
        );
        let receive = Receive {
            me: self.me.clone(),
            handle: self.handle.clone(),
            topics: self.topics.clone(),
            state: self.state.clone(),
            live: self.roster.watch(),
            nodes: heard_tx,
            calls: self.calls.clone(),
            outbox: self.outbox.clone(),
            subscriptions: self.subscriptions.clone(),
            history: self.history.clone(),
            members: self.members.clone(),
            counters: self.counters.clone(),
            gaps,
            marks: Marks::default(),
            before_outage: HashSet::new(),
        };
        let receive = receive.run(events, forget_rx, self.stop.subscribe());
        tokio::spawn(receive.instrument(span.clone()));
        let send = outbox::run(self.outbox.clone(), bus.clone(), self.stop.subscribe());
        tokio::spawn(send.instrument(span.clone()));
        let nodes = Nodes {
            me: self.me.clone(),
            table: Table::default(),
            roster: self.roster.clone(),
            outbox: self.outbox.clone(),
            calls: self.calls.clone(),
            handle: self.handle.clone(),
            interval: options.heartbeat,
            missed: options.missed,
        };
        nodes.heartbeat(true);
        let nodes = nodes.run(heard_rx, forget_tx.clone(), self.stop.subscribe());
        tokio::spawn(nodes.instrument(span.clone()));
        let members = members::Task::new(
            self.members.clone(),
            self.topics.clone(),
            self.outbox.clone(),
            options.heartbeat,
            options.missed,
        );
        tokio::spawn(
            members
                .run(members_inbox, self.stop.subscribe())
                .instrument(span.clone()),
        );
        let keep = subscriptions::run(
            self.subscriptions.clone(),
            bus,
            self.topics.clone(),
            self.me.clone(),
            self.history.clone(),
            forget_tx,
            self.stop.subscribe(),
        );
        tokio::spawn(keep.instrument(span));
    }

    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
        self.state.send_replace(ClusterState::Stopped);
        crate::metrics::cluster_bus(false);
        self.calls.fail_all(&ClusterError::Stopped);
    }

    pub(crate) async fn shutdown(&self) {
        if *self.stop.borrow() {
            return;
        }
        // This node's members off the store first; the others drop them at the goodbye.
        self.members.shutdown(Duration::from_secs(1)).await;
        let goodbye = self.me.header(Kind::Goodbye);
        let _ = self.outbox.push(&self.me.control, goodbye, b"", false);
        self.outbox.drained(Duration::from_secs(2)).await;
        self.stop();
    }

    pub(crate) fn stats(&self) -> ClusterStats {
        let fill = self.outbox.stats();
        ClusterStats {
            outbox_len: fill.len,
            outbox_bytes: fill.bytes,
            outbox_refused: fill.refused,
            bus_refused: fill.bus_refused,
            duplicates: self.counters.duplicates.load(Ordering::Relaxed),
            gaps: self.counters.gaps.load(Ordering::Relaxed),
            duplicate_node_seen: self.counters.twins.load(Ordering::Relaxed),
            history_reads: self.counters.history_reads.load(Ordering::Relaxed),
            bus_dropped: self.bus.dropped(),
            bus_reconnects: self.bus.reconnects(),
        }
    }

    /// Connections on every live node: this node's now, the others' from their last
    /// heartbeat.
    pub(crate) fn connection_count(&self) -> usize {
        let remote = usize::try_from(self.roster.remote_connections()).unwrap_or(usize::MAX);
        self.handle.connection_count().saturating_add(remote)
    }
}
