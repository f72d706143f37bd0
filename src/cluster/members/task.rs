//! The members task: the loop, the state of the bus and of the roster, and the views of
//! the other nodes' members (loads, deltas, holes, checks). This node's own parts are
//! `own.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::own::Own;
use super::view::{Applied, Change, Said, View};
use super::{stopped, Control, Inbox, Incoming, Members};
use crate::addr::PeerAddr;
use crate::cluster::outbox::Outbox;
use crate::cluster::status::ClusterState;
use crate::cluster::sync::lock;
use crate::topics::Topics;

/// The task: the parts this node wrote, and the rooms it tells.
pub(crate) struct Task {
    pub(super) members: Arc<Members>,
    pub(super) topics: Topics,
    pub(super) outbox: Arc<Outbox>,
    pub(super) interval: Duration,
    pub(super) missed: u32,
    pub(super) own: HashMap<Box<str>, Own>,
    /// Topics to write anew (a write failed, or the part expired).
    pub(super) rewrite: HashSet<Box<str>>,
    /// Numbers every write of this incarnation: a part's version.
    pub(super) counter: u64,
    /// Until then, nodes missing from the roster are not taken for dead (it is filling
    /// after a start or an outage), and their parts are accepted.
    pub(super) settle_until: Option<Instant>,
    pub(super) was_up: bool,
    pub(super) stopped: bool,
    /// The roster as last seen, to tell who left it.
    pub(super) seen_live: Arc<HashMap<String, String>>,
    /// Nodes (and incarnations) that left the roster, and when: their parts are not
    /// taken from the store while their keys may live (two windows).
    pub(super) departed: HashMap<(String, String), Instant>,
    /// Parts in the views of nodes not in the roster at the last check of the views: at
    /// the next check, those still not in it go (see `drop_unrostered`).
    pub(super) unrostered: HashSet<(String, String)>,
}

impl Task {
    pub fn new(
        members: Arc<Members>,
        topics: Topics,
        outbox: Arc<Outbox>,
        interval: Duration,
        missed: u32,
    ) -> Self {
        let window = crate::deadline::times(interval, missed);
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
            unrostered: HashSet::new(),
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
                Ok(()) = state.changed() => self.on_state(),
                Ok(()) = live.changed() => self.on_roster(),
                _ = tick.tick() => {
                    ticks = ticks.wrapping_add(1);
                    self.on_tick(ticks.is_multiple_of(self.missed.max(1))).await;
                }
            }
        }
    }

    /// Whether a part of `node` counts: a live node's of its live incarnation; one
    /// the roster does not know yet (its first heartbeat may come after its first
    /// delta, or the roster is filling after a start or an outage) unless it left the
    /// roster while this node was up: its part may still be in the store for a window,
    /// and taking it again would bring its members back (and leave them twice). Never
    /// this node's own.
    fn accept(&self, node: &str, incarnation: &str) -> bool {
        if node == self.members.me.id {
            return false;
        }
        match self.members.live.borrow().get(node) {
            Some(i) => i == incarnation,
            None => !self
                .departed
                .contains_key(&(node.to_owned(), incarnation.to_owned())),
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
            Control::BusBack => self.on_bus_back().await,
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
                // Another incarnation's, or a node that left the roster while this one
                // was up (a delta read late must not bring its members back).
                let stale = !self.accept(&node, &incarnation);
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

    /// While the bus is down (or the node stopped) departures from the roster do not
    /// count; the way back is [`on_bus_back`](Self::on_bus_back), told by the receive
    /// loop (this `watch` may skip an outage shorter than the task's turn).
    fn on_state(&mut self) {
        if *self.members.state.borrow() != ClusterState::Up {
            self.was_up = false;
        }
    }

    /// The bus is back after an outage: this node's parts are written again and every
    /// followed view is read again.
    async fn on_bus_back(&mut self) {
        if !self.members.is_up() {
            // Down again already: the next time it is back, the receive loop tells again.
            self.was_up = false;
            return;
        }
        // Roster changes made while the bus was down that this task has not looked at
        // yet (it was busy, and the control that says the bus is back goes first) are
        // this node's own silence too: taken as seen now, so `on_roster` does not count
        // them as departures once `was_up` is set (it dropped a live node's members, and
        // watchers heard them leave and join again). The settle decides, as for every
        // node not heard again (`drop_departed` at its end).
        self.seen_live = self.members.live.borrow().clone();
        self.was_up = true;
        // Departures seen just before the outage was noticed may have been this node's
        // own silence: the settle decides, as for every node it has not heard again
        // (`drop_departed` at its end).
        self.departed.clear();
        self.settle_until = Some(crate::deadline::after(crate::deadline::times(
            self.interval,
            self.missed,
        )));
        self.write_own().await;
        let topics: Vec<Box<str>> = self.own.keys().cloned().collect();
        self.rewrite.extend(topics);
        self.write_anew().await;
        let followed: Vec<Box<str>> = self.members.views.iter().map(|v| v.key().clone()).collect();
        for topic in followed {
            self.load(&topic).await;
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
        // While this node is cut off the roster empties because it hears no one: that
        // says nothing of the others, so only departures seen while up count.
        if !self.was_up {
            return;
        }
        let now = Instant::now();
        for gone in &departed {
            self.departed.insert(gone.clone(), now);
        }
        if !departed.is_empty() {
            self.drop_parts(|node, incarnation| {
                departed.contains(&(node.to_owned(), incarnation.to_owned()))
            });
        }
    }

    /// Parts of nodes that have not been in the roster for a whole heartbeat window
    /// leave: a part read after its node died (a delta this node read late, past the
    /// time `departed` remembers it) would otherwise stay for good when the store has
    /// no record of the topic left to tell it gone. A node that is new to the roster
    /// heartbeats within a window, so it is not taken for one.
    fn drop_unrostered(&mut self) {
        let live = self.members.live.borrow().clone();
        let mut out = HashSet::new();
        for view in self.members.views.iter() {
            for (node, incarnation) in view.nodes() {
                if live.get(node).map(String::as_str) != Some(incarnation) {
                    out.insert((node.to_owned(), incarnation.to_owned()));
                }
            }
        }
        let gone: HashSet<(String, String)> = out.intersection(&self.unrostered).cloned().collect();
        out.retain(|part| !gone.contains(part));
        self.unrostered = out;
        if !gone.is_empty() {
            self.drop_parts(|node, incarnation| {
                gone.contains(&(node.to_owned(), incarnation.to_owned()))
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
        let keep = crate::deadline::times(crate::deadline::times(self.interval, self.missed), 2);
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

    /// Compares each view with the store's versions; reads again those that differ, and
    /// drops the views of topics without local subscribers.
    async fn check_views(&mut self) {
        if self.settle_until.is_none() && self.was_up {
            self.drop_unrostered();
        } else {
            self.unrostered.clear();
        }
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
}
