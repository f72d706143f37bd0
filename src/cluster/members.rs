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

mod view;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use futures_util::future::BoxFuture;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;

use super::backplane::{Backplane, BackplaneError};
use super::envelope::{Header, Kind, Me};
use super::member_store::{PartWrite, PresenceKey, PresenceRead, StoredPresence};
use super::outbox::Outbox;
use super::status::ClusterState;
use super::sync::lock;
use crate::addr::{ClusterError, PeerAddr};
use crate::error::{Error, Result};
use crate::presence::Member;
use crate::relay::MemberRelay;
use crate::topics::Topics;
use view::{Applied, Change, Said, View};

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
    /// Topics whose deltas did not fit in the queue.
    overflowed: Mutex<HashSet<Box<str>>>,
    /// Topics that lost their last local subscriber: their views may go.
    unfollowed: Mutex<HashSet<Box<str>>>,
    live: Live,
    state: watch::Receiver<ClusterState>,
}

enum Control {
    Follow(Box<str>, oneshot::Sender<()>),
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

/// The relay the topics hold; it reaches the room weakly.
pub(super) struct MembersRelay {
    members: Weak<Members>,
    node: String,
}

impl MembersRelay {
    pub fn new(members: &Arc<Members>) -> Self {
        MembersRelay {
            members: Arc::downgrade(members),
            node: members.me.id.clone(),
        }
    }
}

impl MemberRelay for MembersRelay {
    fn node(&self) -> &str {
        &self.node
    }

    fn changed(&self, topic: &str, id: u64) {
        if let Some(members) = self.members.upgrade() {
            let mut dirty = lock(&members.dirty);
            match dirty.get_mut(topic) {
                Some(ids) => {
                    ids.insert(id);
                }
                None => {
                    dirty.insert(topic.into(), HashSet::from([id]));
                }
            }
            drop(dirty);
            members.wake.notify_one();
        }
    }

    fn follow<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(members) = self.members.upgrade() else {
                return;
            };
            if members.views.get(topic).is_some_and(|v| v.is_loaded()) {
                return;
            }
            let (done, loaded) = oneshot::channel();
            if members
                .control
                .send(Control::Follow(topic.into(), done))
                .is_err()
                || !members.is_up()
            {
                return; // it loads when the bus is back
            }
            let _ = tokio::time::timeout(members.call_timeout, loaded).await;
        })
    }

    fn unfollow(&self, topic: &str) {
        if let Some(members) = self.members.upgrade() {
            lock(&members.unfollowed).insert(topic.into());
            members.wake.notify_one();
        }
    }

    fn members<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<Vec<Member>>> {
        Box::pin(async move {
            let Some(members) = self.members.upgrade().filter(|m| !m.is_stopped()) else {
                return Ok(Vec::new());
            };
            if let Some(view) = members.views.get(topic).filter(|v| v.is_loaded()) {
                return Ok(view.members());
            }
            let stored = members.read(topic, None, true).await?;
            let mut out = Vec::new();
            for part in stored.parts {
                if !members.is_live(&part.node, &part.incarnation) {
                    continue;
                }
                for (id, info) in part.members.into_iter().flatten() {
                    let Ok(text) = String::from_utf8(info.to_vec()) else {
                        continue;
                    };
                    if let Ok(info) = RawValue::from_string(text) {
                        let addr = PeerAddr {
                            node: part.node.clone(),
                            peer: id,
                        };
                        out.push(Member::new(addr, info));
                    }
                }
            }
            Ok(out)
        })
    }

    fn count<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<usize>> {
        Box::pin(async move {
            let Some(members) = self.members.upgrade().filter(|m| !m.is_stopped()) else {
                return Ok(0);
            };
            if let Some(view) = members.views.get(topic).filter(|v| v.is_loaded()) {
                return Ok(view.count());
            }
            let stored = members.read(topic, None, false).await?;
            Ok(stored
                .parts
                .iter()
                .filter(|p| members.is_live(&p.node, &p.incarnation))
                .map(|p| p.len)
                .sum())
        })
    }

    fn known(&self, topic: &str) -> usize {
        self.members
            .upgrade()
            .filter(|m| !m.is_stopped())
            .and_then(|m| m.views.get(topic).map(|v| v.count()))
            .unwrap_or(0)
    }
}

/// What this node wrote of one topic.
#[derive(Default)]
struct Own {
    /// The version of the last write; 0 before the first.
    version: u64,
    members: HashMap<u64, Arc<RawValue>>,
}

/// A change of this node's part of a topic, sent once written.
struct Delta {
    prev: u64,
    v: u64,
    joins: Vec<(u64, Arc<RawValue>)>,
    leaves: Vec<u64>,
}

/// A delta as it goes on the topic's channel.
#[derive(Serialize)]
struct SaidOut<'a> {
    prev: u64,
    v: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    j: Vec<(u64, &'a RawValue)>,
    #[serde(skip_serializing_if = "<[u64]>::is_empty")]
    l: &'a [u64],
    #[serde(skip_serializing_if = "Option::is_none")]
    g: Option<&'a str>,
}

impl Delta {
    fn body(&self, generation: Option<&str>) -> Option<Vec<u8>> {
        let said = SaidOut {
            prev: self.prev,
            v: self.v,
            j: self.joins.iter().map(|(id, i)| (*id, i.as_ref())).collect(),
            l: &self.leaves,
            g: generation,
        };
        serde_json::to_vec(&said).ok()
    }
}

/// The task: the parts this node wrote, and the rooms it tells.
pub(super) struct Task {
    pub members: Arc<Members>,
    pub topics: Topics,
    pub outbox: Arc<Outbox>,
    pub interval: Duration,
    pub missed: u32,
    own: HashMap<Box<str>, Own>,
    /// Topics to write anew (a write failed, or the part expired).
    rewrite: HashSet<Box<str>>,
    /// Numbers every write of this incarnation: a part's version.
    counter: u64,
    /// Until then, nodes missing from the roster are not taken for dead (it is filling
    /// after a start or an outage), and their parts are accepted.
    settle_until: Option<Instant>,
    was_up: bool,
    stopped: bool,
    /// The roster as last seen, to tell who left it.
    seen_live: Arc<HashMap<String, String>>,
    /// Nodes (and incarnations) that left the roster, and when: their parts are not
    /// taken from the store while their keys may live (two windows).
    departed: HashMap<(String, String), Instant>,
}

impl Task {
    pub fn new(
        members: Arc<Members>,
        topics: Topics,
        outbox: Arc<Outbox>,
        interval: Duration,
        missed: u32,
    ) -> Self {
        let window = interval * missed;
        Task {
            members,
            topics,
            outbox,
            interval,
            missed,
            own: HashMap::new(),
            rewrite: HashSet::new(),
            counter: 0,
            settle_until: Some(Instant::now() + window),
            was_up: true,
            stopped: false,
            seen_live: Arc::default(),
            departed: HashMap::new(),
        }
    }

    /// Runs until `stop`.
    pub async fn run(mut self, mut inbox: Inbox, mut stop: watch::Receiver<bool>) {
        let members = self.members.clone();
        let mut state = members.state.clone();
        let mut live = members.live.clone();
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut ticks: u32 = 0;
        loop {
            tokio::select! {
                biased;
                () = stopped(&mut stop) => return,
                Some(control) = inbox.control.recv() => self.on_control(control).await,
                _ = members.wake.notified() => {
                    self.write_own().await;
                    self.unfollow();
                    self.read_overflowed().await;
                }
                Some(incoming) = inbox.incoming.recv() => self.on_incoming(incoming).await,
                Ok(()) = state.changed() => self.on_state().await,
                Ok(()) = live.changed() => self.on_roster(),
                _ = tick.tick() => {
                    ticks = ticks.wrapping_add(1);
                    self.on_tick(ticks.is_multiple_of(self.missed.max(1))).await;
                }
            }
        }
    }

    fn settling(&self) -> bool {
        self.settle_until.is_some_and(|t| Instant::now() < t)
    }

    /// Whether a part of `node` counts: a live node's of its live incarnation; one
    /// the roster does not know yet (its first heartbeat may come after its first
    /// delta) unless it left the roster. Never this node's own.
    fn accept(&self, node: &str, incarnation: &str) -> bool {
        if node == self.members.me.id {
            return false;
        }
        match self.members.live.borrow().get(node) {
            Some(i) => i == incarnation,
            None => {
                self.settling()
                    || !self
                        .departed
                        .contains_key(&(node.to_owned(), incarnation.to_owned()))
            }
        }
    }

    fn tell(&self, topic: &str, changes: Vec<Change>) {
        for change in changes {
            let addr = PeerAddr {
                node: change.node,
                peer: change.id,
            };
            self.topics
                .presence_changed(change.join, topic, &addr, &change.info);
        }
    }

    async fn on_control(&mut self, control: Control) {
        match control {
            Control::Follow(topic, done) => {
                if self.topics.subscriber_count(&topic) > 0 {
                    let loaded = self.members.views.get(&topic).map(|v| v.is_loaded());
                    if loaded.is_none() {
                        self.members.views.insert(topic.clone(), View::default());
                    }
                    if loaded != Some(true) && self.members.is_up() {
                        self.load(&topic).await;
                    }
                }
                let _ = done.send(());
            }
            Control::Shutdown(done) => {
                self.write_own().await;
                let topics: Vec<Box<str>> = self.own.keys().cloned().collect();
                self.own.clear();
                self.rewrite.extend(topics);
                self.write_anew().await;
                self.stopped = true;
                self.members.views.clear();
                let _ = done.send(());
            }
        }
    }

    /// Reads `topic` whole and brings its view to it.
    async fn load(&mut self, topic: &str) {
        let stored = match self.members.read(topic, None, true).await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::debug!(topic, error = %e, "presence not read; again later");
                return;
            }
        };
        let mut out = Vec::new();
        if let Some(mut view) = self.members.views.get_mut(topic) {
            view.load(&stored, |n, i| self.accept(n, i), &mut out);
        }
        self.tell(topic, out);
    }

    /// Reads `node`'s part of `topic` and brings the view to it; then applies `then`, a
    /// delta that found a hole, if the store was behind it.
    async fn read_part(&mut self, topic: &str, node: &str, then: Option<(String, Said)>) {
        let read = self.members.read(topic, Some(node), true).await;
        let mut out = Vec::new();
        if let Some(mut view) = self.members.views.get_mut(topic) {
            match read {
                Ok(stored) => {
                    let part = stored
                        .parts
                        .iter()
                        .find(|p| p.node == node && self.accept(&p.node, &p.incarnation));
                    let behind = then
                        .as_ref()
                        .is_some_and(|(_, said)| part.is_none_or(|p| p.version < said.v));
                    if part.is_some() || then.is_none() {
                        view.replace_read(node, part, &stored, &mut out);
                    }
                    if let (true, Some((incarnation, said))) = (behind, &then) {
                        view.force(node, incarnation, said, &mut out);
                    }
                }
                Err(e) => {
                    tracing::debug!(topic, node, error = %e, "presence part not read");
                    if let Some((incarnation, said)) = &then {
                        view.force(node, incarnation, said, &mut out);
                    }
                }
            }
        }
        self.tell(topic, out);
    }

    async fn on_incoming(&mut self, incoming: Incoming) {
        match incoming {
            Incoming::Gap { topic, node } => {
                if self
                    .members
                    .views
                    .get(&topic)
                    .is_some_and(|v| v.is_loaded())
                {
                    self.read_part(&topic, &node, None).await;
                }
            }
            Incoming::Said {
                topic,
                node,
                incarnation,
                body,
            } => {
                let Ok(said) = serde_json::from_slice::<Said>(&body) else {
                    tracing::debug!(%topic, %node, "not a presence delta; ignored");
                    return;
                };
                let stale = self
                    .members
                    .live
                    .borrow()
                    .get(&node)
                    .is_some_and(|i| *i != incarnation);
                if stale
                    || !self
                        .members
                        .views
                        .get(&topic)
                        .is_some_and(|v| v.is_loaded())
                {
                    return;
                }
                if said.sync.is_some() {
                    return self.read_part(&topic, &node, None).await;
                }
                let mut out = Vec::new();
                let applied = self
                    .members
                    .views
                    .get_mut(&topic)
                    .map(|mut view| view.apply(&node, &incarnation, &said, &mut out));
                self.tell(&topic, out);
                if applied == Some(Applied::Read) {
                    self.read_part(&topic, &node, Some((incarnation, said)))
                        .await;
                }
            }
        }
    }

    /// Views of topics left without local subscribers go (this node no longer hears
    /// their changes); the truth is the subscribers now, whatever came in between.
    fn unfollow(&mut self) {
        let topics: Vec<Box<str>> = lock(&self.members.unfollowed).drain().collect();
        for topic in topics {
            if self.topics.subscriber_count(&topic) == 0 {
                self.members.views.remove(&topic);
            }
        }
    }

    /// Topics whose deltas were lost to a full queue: read whole.
    async fn read_overflowed(&mut self) {
        let topics: Vec<Box<str>> = lock(&self.members.overflowed).drain().collect();
        for topic in topics {
            if self.members.views.contains_key(&topic) {
                self.load(&topic).await;
            }
        }
    }

    async fn on_state(&mut self) {
        let state = *self.members.state.borrow();
        match state {
            ClusterState::Up if !self.was_up => {
                self.was_up = true;
                self.settle_until = Some(Instant::now() + self.interval * self.missed);
                self.write_own().await;
                let topics: Vec<Box<str>> = self.own.keys().cloned().collect();
                self.rewrite.extend(topics);
                self.write_anew().await;
                let followed: Vec<Box<str>> =
                    self.members.views.iter().map(|v| v.key().clone()).collect();
                for topic in followed {
                    self.load(&topic).await;
                }
            }
            ClusterState::Up => {}
            _ => self.was_up = false,
        }
    }

    /// Nodes that left the roster (or came back as another incarnation) since it was
    /// last seen: their members leave, unless this node is cut off (the roster empties
    /// because it hears no one; what really went is found after the outage).
    fn on_roster(&mut self) {
        let live = self.members.live.borrow().clone();
        let departed: HashSet<(String, String)> = self
            .seen_live
            .iter()
            .filter(|(node, incarnation)| live.get(*node) != Some(*incarnation))
            .map(|(n, i)| (n.clone(), i.clone()))
            .collect();
        self.seen_live = live;
        let now = Instant::now();
        for gone in &departed {
            self.departed.insert(gone.clone(), now);
        }
        if self.was_up && !departed.is_empty() {
            self.drop_parts(|node, incarnation| {
                departed.contains(&(node.to_owned(), incarnation.to_owned()))
            });
        }
    }

    /// Members of nodes that are not live (or live as another incarnation) leave.
    fn drop_departed(&mut self) {
        let live = self.members.live.borrow().clone();
        self.drop_parts(|node, incarnation| live.get(node).is_none_or(|i| i != incarnation));
    }

    /// The members of the parts `gone` says leave, in every view.
    fn drop_parts(&mut self, gone: impl Fn(&str, &str) -> bool) {
        let mut told = Vec::new();
        for mut view in self.members.views.iter_mut() {
            let nodes: Vec<String> = view
                .nodes()
                .filter(|(node, incarnation)| gone(node, incarnation))
                .map(|(node, _)| node.to_owned())
                .collect();
            let mut out = Vec::new();
            for node in nodes {
                view.remove(&node, &mut out);
            }
            if !out.is_empty() {
                told.push((view.key().clone(), out));
            }
        }
        for (topic, out) in told {
            self.tell(&topic, out);
        }
    }

    async fn on_tick(&mut self, window: bool) {
        let keep = self.interval * self.missed * 2;
        self.departed.retain(|_, when| when.elapsed() < keep);
        if self.settle_until.is_some_and(|t| Instant::now() >= t) {
            self.settle_until = None;
            if self.was_up {
                self.drop_departed();
            }
        }
        if !self.members.is_up() || self.stopped {
            return;
        }
        self.refresh().await;
        if window {
            self.check_views().await;
        }
    }

    /// Extends the life of this node's parts; writes anew those the store lost.
    async fn refresh(&mut self) {
        let topics: Vec<Box<str>> = self.own.keys().cloned().collect();
        for chunk in topics.chunks(BATCH) {
            let keys = chunk.iter().map(|t| self.members.key(t)).collect();
            let refreshed = self
                .members
                .bus
                .presence_refresh(keys, &self.members.me.id, self.members.ttl)
                .await;
            match refreshed {
                Ok(found) => {
                    for (topic, there) in chunk.iter().zip(found) {
                        if !there {
                            self.rewrite.insert(topic.clone());
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "presence not refreshed");
                    return;
                }
            }
        }
        self.write_anew().await;
    }

    /// Compares each view with the store's versions; reads again those that differ, and
    /// drops the views of topics without local subscribers.
    async fn check_views(&mut self) {
        let topics: Vec<Box<str>> = self.members.views.iter().map(|v| v.key().clone()).collect();
        for topic in topics {
            if self.topics.subscriber_count(&topic) == 0 {
                self.members.views.remove(&topic);
                continue;
            }
            let loaded = self.members.views.get(&topic).map(|v| v.is_loaded());
            if loaded == Some(true) {
                let Ok(stored) = self.members.read(&topic, None, false).await else {
                    return;
                };
                let same = self
                    .members
                    .views
                    .get(&topic)
                    .is_some_and(|v| v.matches(&stored, |n, i| self.accept(n, i)));
                if same {
                    continue;
                }
            }
            self.load(&topic).await;
        }
    }

    /// Writes what changed among this node's members, then tells the other nodes.
    async fn write_own(&mut self) {
        let by_topic = std::mem::take(&mut *lock(&self.members.dirty));
        if by_topic.is_empty() || self.stopped {
            return;
        }
        let mut writes = Vec::new();
        let mut deltas = Vec::new();
        for (topic, ids) in by_topic {
            if let Some((write, delta)) = self.diff(&topic, ids) {
                writes.push((topic.clone(), write));
                deltas.push((topic, delta));
            }
            if writes.len() >= BATCH {
                self.write_then_tell(std::mem::take(&mut writes), std::mem::take(&mut deltas))
                    .await;
            }
        }
        self.write_then_tell(writes, deltas).await;
    }

    /// Writes, then sends the deltas (with the generation their write answered, when
    /// it went through): a node that reads the store on a delta finds it written.
    async fn write_then_tell(
        &mut self,
        writes: Vec<(Box<str>, PartWrite)>,
        deltas: Vec<(Box<str>, Delta)>,
    ) {
        let generations = self.store(writes).await;
        for (i, (topic, delta)) in deltas.into_iter().enumerate() {
            let generation = generations
                .as_ref()
                .and_then(|g| g.get(i))
                .map(String::as_str);
            if let Some(body) = delta.body(generation) {
                self.send(&topic, &body);
            }
        }
    }

    /// What changed of `topic` among `ids`, as a write and a delta; the truth is the
    /// topics' members now, whatever order the changes were reported in.
    fn diff(&mut self, topic: &str, ids: HashSet<u64>) -> Option<(PartWrite, Delta)> {
        let own = self.own.entry(topic.into()).or_default();
        let mut joins: Vec<(u64, Arc<RawValue>)> = Vec::new();
        let mut leaves: Vec<u64> = Vec::new();
        let mut removed: Vec<u64> = Vec::new();
        for id in ids {
            match (self.topics.local_member(topic, id), own.members.get(&id)) {
                (Some(info), None) => {
                    own.members.insert(id, info.clone());
                    joins.push((id, info));
                }
                (Some(info), Some(was)) if !Arc::ptr_eq(&info, was) => {
                    // Left and joined again, with other info.
                    own.members.insert(id, info.clone());
                    leaves.push(id);
                    joins.push((id, info));
                }
                (None, Some(_)) => {
                    own.members.remove(&id);
                    leaves.push(id);
                    removed.push(id);
                }
                _ => {}
            }
        }
        if joins.is_empty() && leaves.is_empty() {
            if own.version == 0 {
                self.own.remove(topic);
            }
            return None;
        }
        let prev = own.version;
        self.counter += 1;
        own.version = self.counter;
        let members = &self.members;
        let mut write = PartWrite::new(
            members.key(topic),
            &members.me.id,
            &members.me.incarnation,
            self.counter,
            members.ttl,
        );
        write.replace = prev == 0;
        write.set = joins
            .iter()
            .map(|(id, info)| (*id, Bytes::copy_from_slice(info.get().as_bytes())))
            .collect();
        write.remove = removed;
        if own.members.is_empty() {
            self.own.remove(topic);
        }
        let delta = Delta {
            prev,
            v: self.counter,
            joins,
            leaves,
        };
        Some((write, delta))
    }

    /// Sends writes to the store; a topic whose write fails is written anew later.
    /// The generation of each topic's record, when they were written.
    async fn store(&mut self, writes: Vec<(Box<str>, PartWrite)>) -> Option<Vec<String>> {
        if writes.is_empty() {
            return Some(Vec::new());
        }
        let (topics, writes): (Vec<Box<str>>, Vec<PartWrite>) = writes.into_iter().unzip();
        if self.members.is_up() {
            match self.members.bus.presence_write(writes).await {
                Ok(generations) => return Some(generations),
                Err(e) => tracing::debug!(error = %e, "presence not written; again later"),
            }
        }
        self.rewrite.extend(topics);
        None
    }

    fn send(&self, topic: &str, body: &[u8]) {
        let channel = self.members.me.channels.topic(topic);
        let header = self.members.me.header(Kind::Presence);
        self.outbox.push(&channel, header, body, true);
    }

    /// Writes every part marked for it anew (a part with no members is deleted), and
    /// tells the other nodes to read it.
    async fn write_anew(&mut self) {
        if self.rewrite.is_empty() || !self.members.is_up() {
            return;
        }
        let topics: Vec<Box<str>> = self.rewrite.drain().collect();
        for chunk in topics.chunks(BATCH) {
            let mut writes = Vec::new();
            let mut said = Vec::new();
            for topic in chunk {
                let members = &self.members;
                let (version, set) = match self.own.get(topic) {
                    Some(own) => (
                        own.version,
                        own.members
                            .iter()
                            .map(|(id, info)| (*id, Bytes::copy_from_slice(info.get().as_bytes())))
                            .collect(),
                    ),
                    None => (0, Vec::new()),
                };
                let mut write = PartWrite::new(
                    members.key(topic),
                    &members.me.id,
                    &members.me.incarnation,
                    version,
                    members.ttl,
                );
                write.replace = true;
                write.set = set;
                writes.push((topic.clone(), write));
                if version > 0 {
                    said.push((
                        topic.clone(),
                        format!(r#"{{"sync":{version}}}"#).into_bytes(),
                    ));
                }
            }
            if self.store(writes).await.is_some() {
                for (topic, body) in said {
                    self.send(&topic, &body);
                }
            }
        }
    }
}
