//! A running node: the receive loop, the outbox and its sender, heartbeats.
//!
//! Four tasks per node, each owning one job: `receive` reads the bus's events in order
//! (dedupe, gaps, dispatch), `send` drains the outbox into the bus in order, `beat`
//! announces this node and expires silent ones, and the subscriptions task keeps the
//! bus's topic channels in step with local subscribers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::time::Instant;

use super::calls::Calls;
use super::envelope::{self, Channels, Header, Kind};
use super::subscriptions::Subscriptions;
use super::{Backplane, BusEvent, ClusterError, ClusterState, ClusterStats, Gap, GapHook, Hook};
use crate::error::{Error, Result};
use crate::registry::ServerHandle;
use crate::topics::Topics;
use crate::transport::Text;
use tokio_tungstenite::tungstenite::Utf8Bytes;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

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
        }
    }
}

/// Envelopes sent at most per bus round trip.
const BATCH: usize = 64;

/// Heartbeat intervals after which a gone node's sequence numbers are forgotten.
const FORGET_AFTER: u32 = 100;

pub(crate) struct Node {
    pub bus: Box<dyn Backplane>,
    pub id: String,
    pub incarnation: String,
    pub channels: Channels,
    pub ch_all: String,
    pub ch_control: String,
    pub ch_self: String,
    pub handle: ServerHandle,
    pub topics: Topics,
    pub options: Options,
    pub state: watch::Sender<ClusterState>,
    pub nodes_watch: watch::Sender<Vec<String>>,
    pub subscriptions: Subscriptions,
    pub calls: Calls,
    pub remote_calls: Arc<Semaphore>,
    outbox: Mutex<Outbox>,
    outbox_wake: Notify,
    /// Ticks after each batch the bus accepted, for shutdown to wait on.
    sent: watch::Sender<()>,
    /// Per channel, per origin: the last sequence number seen.
    marks: Mutex<HashMap<String, HashMap<String, Mark>>>,
    /// Other live nodes, by name.
    nodes: Mutex<HashMap<String, Remote>>,
    /// Nodes gone, with their incarnation and when: their sequence numbers are
    /// forgotten [`FORGET_AFTER`] heartbeat intervals later.
    departed: Mutex<Vec<(String, String, Instant)>>,
    duplicates: AtomicU64,
    gaps: AtomicU64,
    twins: AtomicU64,
    stop: watch::Sender<bool>,
}

#[derive(Default)]
struct Outbox {
    items: VecDeque<Item>,
    bytes: usize,
    next_item: u64,
    dropped: u64,
    /// The last sequence number per channel this node sent on.
    sequences: HashMap<String, u64>,
}

struct Item {
    id: u64,
    channel: String,
    payload: Bytes,
}

struct Mark {
    incarnation: String,
    last: u64,
    /// After a bus outage the gap is already reported: the next number sets a new
    /// baseline (anything at or below the old one is still a duplicate).
    resync: bool,
}

struct Remote {
    incarnation: String,
    connections: u64,
    last_seen: Instant,
}

/// What the receive loop makes of a sequence number.
enum Seen {
    Fresh,
    Duplicate,
    Gap(u64),
}

impl Node {
    pub(crate) async fn start(
        bus: Box<dyn Backplane>,
        id: String,
        handle: ServerHandle,
        topics: Topics,
        options: Options,
    ) -> Result<Arc<Node>> {
        let unavailable =
            |e: super::BackplaneError| Error::Cluster(ClusterError::Unavailable(e.to_string()));
        let events = bus
            .events()
            .ok_or_else(|| super::config("the backplane's events were already taken".into()))?;
        let channels = Channels::new(&options.prefix);
        let node = Arc::new(Node {
            ch_all: channels.all(),
            ch_control: channels.control(),
            ch_self: channels.node(&id),
            channels,
            bus,
            incarnation: format!("{:012x}", fastrand::u64(..) >> 16),
            nodes_watch: watch::Sender::new(vec![id.clone()]),
            id,
            handle,
            topics,
            state: watch::Sender::new(ClusterState::Up),
            subscriptions: Subscriptions::default(),
            calls: Calls::default(),
            remote_calls: Arc::new(Semaphore::new(options.max_remote_calls)),
            options,
            outbox: Mutex::new(Outbox::default()),
            outbox_wake: Notify::new(),
            sent: watch::Sender::new(()),
            marks: Mutex::new(HashMap::new()),
            nodes: Mutex::new(HashMap::new()),
            departed: Mutex::new(Vec::new()),
            duplicates: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            twins: AtomicU64::new(0),
            stop: watch::Sender::new(false),
        });
        for channel in [&node.ch_all, &node.ch_control, &node.ch_self] {
            node.bus.subscribe(channel).await.map_err(unavailable)?;
        }
        let hook = Hook(Arc::downgrade(&node));
        if !node.handle.attach(hook.clone()) {
            return Err(super::config(
                "this ServerHandle already has a cluster".into(),
            ));
        }
        if !node.topics.attach(hook) {
            return Err(super::config("these Topics already have a cluster".into()));
        }
        tokio::spawn(receive(node.clone(), events));
        tokio::spawn(send(node.clone()));
        tokio::spawn(beat(node.clone()));
        tokio::spawn(super::subscriptions::run(node.clone()));
        node.heartbeat(true);
        Ok(node)
    }

    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
        self.state.send_replace(ClusterState::Stopped);
        self.calls.fail_all(&ClusterError::Stopped);
    }

    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub(crate) fn is_up(&self) -> bool {
        *self.state.borrow() == ClusterState::Up
    }

    pub(crate) async fn shutdown(&self) {
        if *self.stop.borrow() {
            return;
        }
        self.enqueue(
            &self.ch_control,
            Header::new(Kind::Goodbye, &self.id, &self.incarnation),
            b"",
            false,
        );
        let mut sent = self.sent.subscribe();
        let drained = sent.wait_for(|_| lock(&self.outbox).items.is_empty());
        let _ = tokio::time::timeout(Duration::from_secs(2), drained).await;
        self.stop();
    }

    /// Queues one envelope for the bus. Returns false (and queues nothing) when the bus
    /// is down and `keep_when_down` is false, or the node is stopped.
    pub(crate) fn enqueue(
        &self,
        channel: &str,
        mut header: Header<'_>,
        body: &[u8],
        keep_when_down: bool,
    ) -> bool {
        match *self.state.borrow() {
            ClusterState::Up => {}
            ClusterState::Down if keep_when_down => {}
            _ => return false,
        }
        let mut outbox = lock(&self.outbox);
        let seq = match outbox.sequences.get_mut(channel) {
            Some(seq) => seq,
            None => outbox.sequences.entry(channel.to_owned()).or_insert(0),
        };
        *seq += 1;
        header.s = *seq;
        let payload = envelope::write(&header, body);
        let limit = self.options.outbox_limit;
        // Oldest first: the freshest state is what subscribers want; receivers see the
        // hole as a gap.
        while outbox.bytes + payload.len() > limit {
            match outbox.items.pop_front() {
                Some(old) => {
                    outbox.bytes -= old.payload.len();
                    outbox.dropped += 1;
                }
                None => break,
            }
        }
        if payload.len() > limit {
            outbox.dropped += 1;
            return true;
        }
        outbox.bytes += payload.len();
        let id = outbox.next_item;
        outbox.next_item += 1;
        outbox.items.push_back(Item {
            id,
            channel: channel.to_owned(),
            payload,
        });
        drop(outbox);
        self.outbox_wake.notify_one();
        true
    }

    pub(crate) fn send_broadcast(&self, frame: &str) {
        let header = Header::new(Kind::Broadcast, &self.id, &self.incarnation);
        self.enqueue(&self.ch_all, header, frame.as_bytes(), true);
    }

    pub(crate) fn send_topic(&self, topic: &str, frame: &str) {
        let header = Header::new(Kind::Topic, &self.id, &self.incarnation);
        self.enqueue(&self.channels.topic(topic), header, frame.as_bytes(), true);
    }

    fn heartbeat(&self, hello: bool) {
        let mut header = Header::new(Kind::Heartbeat, &self.id, &self.incarnation);
        header.n = Some(self.handle.connection_count() as u64);
        header.hello = hello;
        self.enqueue(&self.ch_control, header, b"", false);
    }

    pub(crate) fn connection_count(&self) -> usize {
        let remote: u64 = lock(&self.nodes).values().map(|r| r.connections).sum();
        self.handle.connection_count() + usize::try_from(remote).unwrap_or(usize::MAX)
    }

    /// Whether `node` is live (this node included).
    pub(crate) fn is_live(&self, node: &str) -> bool {
        node == self.id || lock(&self.nodes).contains_key(node)
    }

    pub(crate) fn stats(&self) -> ClusterStats {
        let outbox = lock(&self.outbox);
        ClusterStats {
            outbox_len: outbox.items.len(),
            outbox_bytes: outbox.bytes,
            outbox_dropped: outbox.dropped,
            duplicates: self.duplicates.load(Ordering::Relaxed),
            gaps: self.gaps.load(Ordering::Relaxed),
            duplicate_node_seen: self.twins.load(Ordering::Relaxed),
        }
    }

    pub(crate) async fn ready(self: &Arc<Self>, topic: &str) -> Result<()> {
        if !self.is_up() {
            self.subscriptions.changed(topic);
            return Err(Error::Cluster(ClusterError::Unavailable(
                "the bus is down".into(),
            )));
        }
        let waiter = self.subscriptions.wait(topic);
        match tokio::time::timeout(self.options.call_timeout, waiter).await {
            Ok(Ok(result)) => result.map_err(Error::Cluster),
            Ok(Err(_)) => Err(Error::Cluster(ClusterError::Stopped)),
            Err(_) => Err(Error::Timeout(self.options.call_timeout)),
        }
    }

    /// Forgets the sequence numbers of a channel this node no longer listens to, so a
    /// later subscription starts a new baseline rather than seeing a false gap.
    pub(crate) fn forget_channel(&self, channel: &str) {
        lock(&self.marks).remove(channel);
    }

    pub(crate) fn report_gap(&self, gap: Gap) {
        self.gaps.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(node = %self.id, ?gap, "gap");
        if let Some(hook) = &self.options.on_gap {
            hook(&gap);
        }
        if let (Some(method), Some(topic)) = (&self.options.gap_method, &gap.topic) {
            let params = serde_json::json!({ "topic": topic });
            if let Ok(frame) = crate::message::request(method, &params, None) {
                self.topics.deliver(topic, Text::from(frame));
            }
        }
    }

    fn check_sequence(&self, channel: &str, origin: &str, incarnation: &str, s: u64) -> Seen {
        let mut marks = lock(&self.marks);
        let per_origin = match marks.get_mut(channel) {
            Some(m) => m,
            None => marks.entry(channel.to_owned()).or_default(),
        };
        let fresh = || Mark {
            incarnation: incarnation.to_owned(),
            last: s,
            resync: false,
        };
        match per_origin.get_mut(origin) {
            Some(mark) if mark.incarnation == incarnation => {
                if s <= mark.last {
                    return Seen::Duplicate;
                }
                let missed = s - mark.last - 1;
                mark.last = s;
                if std::mem::take(&mut mark.resync) || missed == 0 {
                    Seen::Fresh
                } else {
                    Seen::Gap(missed)
                }
            }
            // A restarted origin: a new baseline.
            Some(mark) => {
                *mark = fresh();
                Seen::Fresh
            }
            None => {
                per_origin.insert(origin.to_owned(), fresh());
                Seen::Fresh
            }
        }
    }

    fn on_message(self: &Arc<Self>, channel: &str, payload: Bytes) {
        let Some((header, body)) = envelope::read(&payload) else {
            tracing::debug!(node = %self.id, channel, "not an envelope; ignored");
            return;
        };
        if header.o == self.id {
            if header.i == self.incarnation {
                return; // our own publish, already delivered here
            }
            if header.k == Kind::Heartbeat {
                self.twins.fetch_add(1, Ordering::Relaxed);
                tracing::error!(node = %self.id, other = %header.i, "another node uses this node's name: calls to it reach both");
                return;
            }
        }
        match self.check_sequence(channel, &header.o, &header.i, header.s) {
            Seen::Duplicate => {
                self.duplicates.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Seen::Gap(missed) => {
                let topic = match header.k {
                    Kind::Topic => self.channels.topic_of(channel).map(str::to_owned),
                    _ => None,
                };
                if header.k == Kind::Broadcast || topic.is_some() {
                    self.report_gap(Gap {
                        topic,
                        origin: Some(header.o.to_string()),
                        missed: Some(missed),
                    });
                }
            }
            Seen::Fresh => {}
        }
        let text = || Utf8Bytes::try_from(body.clone()).ok().map(Text::from);
        match header.k {
            Kind::Broadcast => {
                if let Some(frame) = text() {
                    self.handle.push_all(&frame);
                }
            }
            Kind::Topic => {
                if let (Some(topic), Some(frame)) = (self.channels.topic_of(channel), text()) {
                    self.topics.deliver(topic, frame);
                }
            }
            Kind::Notify => {
                let peer = header.p.and_then(|p| self.handle.peer(p));
                if let (Some(peer), Some(frame)) = (peer, text()) {
                    peer.push(frame);
                }
            }
            Kind::Call => super::calls::serve(self, &header, body),
            Kind::Reply => self.calls.answer(&header, body),
            Kind::Heartbeat => self.on_heartbeat(&header),
            Kind::Goodbye => self.forget_node(&header.o, "said goodbye"),
        }
    }

    fn on_heartbeat(&self, header: &Header<'_>) {
        let restarted = {
            let mut nodes = lock(&self.nodes);
            let now = Instant::now();
            let connections = header.n.unwrap_or(0);
            match nodes.get_mut(&*header.o) {
                Some(r) if r.incarnation == header.i => {
                    r.last_seen = now;
                    r.connections = connections;
                    false
                }
                other => {
                    let restarted = other.is_some();
                    nodes.insert(
                        header.o.to_string(),
                        Remote {
                            incarnation: header.i.to_string(),
                            connections,
                            last_seen: now,
                        },
                    );
                    self.publish_nodes(&nodes);
                    restarted
                }
            }
        };
        if restarted {
            // Calls to its earlier run will never be answered.
            self.calls
                .fail_node(&header.o, &ClusterError::NodeDown(header.o.to_string()));
        }
        if header.hello {
            self.heartbeat(false);
        }
    }

    fn forget_node(&self, node: &str, why: &str) {
        let removed = {
            let mut nodes = lock(&self.nodes);
            let removed = nodes.remove(node);
            if removed.is_some() {
                self.publish_nodes(&nodes);
            }
            removed
        };
        if let Some(remote) = removed {
            tracing::info!(node = %self.id, other = node, why, "node left the cluster");
            self.calls
                .fail_node(node, &ClusterError::NodeDown(node.to_owned()));
            // A silent node may be cut off rather than gone: its sequence numbers stay
            // a while, so that copies it re-sends when it is back are still dropped.
            lock(&self.departed).push((node.to_owned(), remote.incarnation, Instant::now()));
        }
    }

    fn forget_departed(&self, now: Instant, after: Duration) {
        let old: Vec<(String, String, Instant)> = {
            let mut departed = lock(&self.departed);
            let (old, keep) = departed
                .drain(..)
                .partition(|(_, _, when)| now.duration_since(*when) > after);
            *departed = keep;
            old
        };
        if old.is_empty() {
            return;
        }
        let mut marks = lock(&self.marks);
        for per_origin in marks.values_mut() {
            for (node, incarnation, _) in &old {
                per_origin.remove_if_incarnation(node, incarnation);
            }
        }
        marks.retain(|_, per_origin| !per_origin.is_empty());
    }

    fn publish_nodes(&self, nodes: &HashMap<String, Remote>) {
        let mut names: Vec<String> = nodes.keys().cloned().collect();
        names.push(self.id.clone());
        names.sort();
        self.nodes_watch.send_replace(names);
    }

    fn on_down(&self) {
        if self.state.send_if_modified(|s| {
            let was_up = *s == ClusterState::Up;
            if was_up {
                *s = ClusterState::Down;
            }
            was_up
        }) {
            tracing::warn!(node = %self.id, "bus down: local delivery only");
            self.calls
                .fail_all(&ClusterError::Unavailable("the bus went down".into()));
        }
    }

    fn on_up(&self) {
        let was_down = self.state.send_if_modified(|s| {
            let was_down = *s == ClusterState::Down;
            if was_down {
                *s = ClusterState::Up;
            }
            was_down
        });
        if !was_down {
            return;
        }
        tracing::info!(node = %self.id, "bus back");
        for per_origin in lock(&self.marks).values_mut() {
            for mark in per_origin.values_mut() {
                mark.resync = true;
            }
        }
        // Whatever was published elsewhere while we were away is lost to us.
        self.report_gap(Gap {
            topic: None,
            origin: None,
            missed: None,
        });
        for topic in self.topics.topic_names() {
            self.report_gap(Gap {
                topic: Some(topic),
                origin: None,
                missed: None,
            });
        }
        self.subscriptions.all_changed(self.topics.topic_names());
        self.outbox_wake.notify_one();
        self.heartbeat(true);
    }
}

trait RemoveIfIncarnation {
    fn remove_if_incarnation(&mut self, origin: &str, incarnation: &str);
}

impl RemoveIfIncarnation for HashMap<String, Mark> {
    fn remove_if_incarnation(&mut self, origin: &str, incarnation: &str) {
        if self
            .get(origin)
            .is_some_and(|m| m.incarnation == incarnation)
        {
            self.remove(origin);
        }
    }
}

async fn receive(node: Arc<Node>, mut events: mpsc::Receiver<BusEvent>) {
    let mut stop = node.stopping();
    loop {
        let event = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            event = events.recv() => event,
        };
        match event {
            Some(BusEvent::Message { channel, payload }) => node.on_message(&channel, payload),
            Some(BusEvent::Down) => node.on_down(),
            Some(BusEvent::Up) => node.on_up(),
            None => {
                tracing::error!(node = %node.id, "the backplane's events ended");
                node.on_down();
                break;
            }
        }
    }
}

async fn send(node: Arc<Node>) {
    let mut stop = node.stopping();
    let mut state = node.state.subscribe();
    let mut retry = Duration::from_millis(20);
    loop {
        let batch: Vec<(u64, String, Bytes)> = {
            let outbox = lock(&node.outbox);
            outbox
                .items
                .iter()
                .take(BATCH)
                .map(|i| (i.id, i.channel.clone(), i.payload.clone()))
                .collect()
        };
        let Some(&(last, _, _)) = batch.last() else {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = node.outbox_wake.notified() => continue,
            }
        };
        if !node.is_up() {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = state.wait_for(|s| *s != ClusterState::Down) => continue,
            }
        }
        let messages = batch.into_iter().map(|(_, c, p)| (c, p)).collect();
        match node.bus.publish_many(messages).await {
            Ok(()) => {
                retry = Duration::from_millis(20);
                let mut outbox = lock(&node.outbox);
                // Items the overflow dropped meanwhile are already gone from the front.
                while outbox.items.front().is_some_and(|i| i.id <= last) {
                    if let Some(item) = outbox.items.pop_front() {
                        outbox.bytes -= item.payload.len();
                    }
                }
                drop(outbox);
                node.sent.send_replace(());
            }
            Err(e) => {
                tracing::debug!(node = %node.id, error = %e, "publish failed; will retry");
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = state.changed() => {}
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(Duration::from_secs(1));
            }
        }
    }
}

async fn beat(node: Arc<Node>) {
    let mut stop = node.stopping();
    let interval = node.options.heartbeat;
    let window = interval * node.options.missed;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        node.heartbeat(false);
        let now = Instant::now();
        let silent: Vec<String> = lock(&node.nodes)
            .iter()
            .filter(|(_, r)| now.duration_since(r.last_seen) > window)
            .map(|(name, _)| name.clone())
            .collect();
        for name in silent {
            node.forget_node(&name, "silent for the heartbeat window");
        }
        node.forget_departed(now, interval * FORGET_AFTER);
    }
}
