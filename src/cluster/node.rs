//! A running node: its state, its start and stop, and the receive loop.
//!
//! Four tasks per node, each owning one job: `receive` reads the bus's events in order
//! (dedupe, gaps, dispatch), `send` (outbox.rs) drains the outbox into the bus in
//! order, `beat` (presence.rs)
//! announces this node and expires silent ones, and the subscriptions task keeps the
//! bus's topic channels in step with local subscribers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::time::Instant;

use super::calls::Calls;
use super::envelope::{self, Channels, Header, Kind};
use super::outbox::Outbox;
use super::presence::Remote;
use super::relay::ClusterRelay;
use super::sequence::{Mark, Seen};
use super::subscriptions::Subscriptions;
use super::{Backplane, BusEvent, ClusterError, ClusterState, ClusterStats, Gap, GapHook};
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
    pub(super) outbox: Mutex<Outbox>,
    pub(super) outbox_wake: Notify,
    /// Ticks after each batch the bus accepted, for shutdown to wait on.
    pub(super) sent: watch::Sender<()>,
    /// Per channel, per origin: the last sequence number seen.
    pub(super) marks: Mutex<HashMap<String, HashMap<String, Mark>>>,
    /// Other live nodes, by name.
    pub(super) nodes: Mutex<HashMap<String, Remote>>,
    /// Nodes gone, with their incarnation and when: their sequence numbers are
    /// forgotten [`FORGET_AFTER`] heartbeat intervals later.
    pub(super) departed: Mutex<Vec<(String, String, Instant)>>,
    pub(super) duplicates: AtomicU64,
    pub(super) gaps: AtomicU64,
    pub(super) twins: AtomicU64,
    stop: watch::Sender<bool>,
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
        let relay = Arc::new(ClusterRelay(Arc::downgrade(&node)));
        if !node.handle.attach(relay.clone()) {
            return Err(super::config(
                "this ServerHandle already has a cluster".into(),
            ));
        }
        if !node.topics.attach(relay) {
            return Err(super::config("these Topics already have a cluster".into()));
        }
        tokio::spawn(receive(node.clone(), events));
        tokio::spawn(super::outbox::send(node.clone()));
        tokio::spawn(super::presence::beat(node.clone()));
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

    pub(crate) fn send_broadcast(&self, frame: &str) {
        let header = Header::new(Kind::Broadcast, &self.id, &self.incarnation);
        self.enqueue(&self.ch_all, header, frame.as_bytes(), true);
    }

    pub(crate) fn send_topic(&self, topic: &str, frame: &str) {
        let header = Header::new(Kind::Topic, &self.id, &self.incarnation);
        self.enqueue(&self.channels.topic(topic), header, frame.as_bytes(), true);
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
        match *self.state.borrow() {
            ClusterState::Up => {}
            // Local delivery only, as without a cluster.
            ClusterState::Stopped => return Ok(()),
            ClusterState::Down => {
                self.subscriptions.changed(topic);
                return Err(Error::Cluster(ClusterError::Unavailable(
                    "the bus is down".into(),
                )));
            }
        }
        let waiter = self.subscriptions.wait(topic);
        match tokio::time::timeout(self.options.call_timeout, waiter).await {
            Ok(Ok(result)) => result.map_err(Error::Cluster),
            Ok(Err(_)) => Err(Error::Cluster(ClusterError::Stopped)),
            Err(_) => Err(Error::timeout(None, self.options.call_timeout)),
        }
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

    fn on_down(&self) {
        if self.state.send_if_modified(|s| {
            let was_up = *s == ClusterState::Up;
            if was_up {
                *s = ClusterState::Down;
            }
            was_up
        }) {
            tracing::warn!(node = %self.id, "bus down: local delivery only");
            let live: std::collections::HashSet<String> = self
                .nodes_watch
                .borrow()
                .iter()
                .filter(|n| **n != self.id)
                .cloned()
                .collect();
            lock(&self.outbox).before_outage = live;
            self.calls
                .fail_all(&ClusterError::Unavailable("the bus went down".into()));
        }
    }

    fn on_up(&self) {
        // The hold goes in before the state says Up: the outbox task wakes on that
        // change, and a flush that saw Up without the hold would go out at once.
        if *self.state.borrow() == ClusterState::Down {
            self.hold_flush();
        }
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
        self.resync_all();
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
