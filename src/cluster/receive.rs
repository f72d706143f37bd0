//! The receive loop: reads the bus's events in order and hands each to its room.
//!
//! It owns what only the order of events decides: the sequence numbers seen (duplicates
//! dropped, gaps reported), whether the bus is up (the state it alone moves between
//! `Up` and `Down`), and which nodes were live when the bus went down. Broadcasts,
//! topic messages and notifies go down to this node's peers; calls and replies to
//! [`Calls`]; heartbeats and goodbyes to the nodes task, as messages.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use super::backplane::BusEvent;
use super::calls::Calls;
use super::envelope::{self, Header, Kind, Me};
use super::gaps::Gaps;
use super::history::{self, History, Inbound};
use super::members::Members;
use super::nodes::Heard;
use super::outbox::Outbox;
use super::sequence::{Forget, Marks, Seen};
use super::status::{ClusterState, Counters, Gap};
use super::subscriptions::Subscriptions;
use crate::addr::ClusterError;
use crate::registry::ServerHandle;
use crate::topics::{Applied, Topics};
use crate::transport::Text;

/// The receive loop's state and the rooms it hands events to.
pub(super) struct Receive {
    pub me: Arc<Me>,
    pub handle: ServerHandle,
    pub topics: Topics,
    /// It alone moves the state between `Up` and `Down`.
    pub state: watch::Sender<ClusterState>,
    /// The live nodes, as the nodes task publishes them.
    pub live: watch::Receiver<Vec<String>>,
    pub nodes: mpsc::Sender<Heard>,
    pub calls: Arc<Calls>,
    pub outbox: Arc<Outbox>,
    pub subscriptions: Arc<Subscriptions>,
    pub history: Arc<History>,
    /// Presence: deltas and gaps on topic channels.
    pub members: Arc<Members>,
    pub counters: Arc<Counters>,
    pub gaps: Arc<Gaps>,
    pub marks: Marks,
    /// The other nodes live when the bus went down, awaited by the flush when it is back.
    pub before_outage: HashSet<String>,
}

impl Receive {
    /// Runs until `stop` (or until the bus's events end): bus events from `events`,
    /// marks to forget from the other tasks on `forget`.
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<BusEvent>,
        mut forget: mpsc::UnboundedReceiver<Forget>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            // A forget sent before a subscription was issued again is read before any
            // message on that subscription.
            let event = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                Some(what) = forget.recv() => {
                    self.marks.forget(what);
                    continue;
                }
                event = events.recv() => event,
            };
            match event {
                Some(BusEvent::Message { channel, payload }) => {
                    for envelope in envelope::unpack(payload) {
                        self.on_message(&channel, envelope).await;
                        // One unit of the task's budget per envelope, as when each came
                        // alone: the runtime lets the peers' tasks drain their queues
                        // every so many, whether they came packed or not (a pack of
                        // hundreds delivered without a pause would overflow a
                        // subscriber's outgoing queue).
                        tokio::task::consume_budget().await;
                    }
                }
                Some(BusEvent::Down) => self.on_down(),
                Some(BusEvent::Up) => self.on_up().await,
                Some(BusEvent::Interrupted { channels }) => self.on_interrupted(&channels).await,
                // What came before on the channel is left over from an earlier
                // subscription: what comes after starts the marks afresh, so messages
                // published while this node was not subscribed are not taken for a gap.
                Some(BusEvent::Subscribed { channel }) => {
                    self.marks.forget(Forget::Channel(channel));
                }
                None => {
                    tracing::error!("the backplane's events ended");
                    self.on_down();
                    break;
                }
            }
        }
    }

    async fn on_message(&mut self, channel: &str, payload: Bytes) {
        let Some((header, body)) = envelope::read(&payload) else {
            tracing::debug!(channel, "not an envelope; ignored");
            return;
        };
        if header.k == Kind::Recorded {
            // Ordered by its offset, this node's own too (its subscribers get its
            // publications through the bus, in the one order): the next one is
            // delivered here, anything else goes to the history room.
            let topic = self.me.channels.topic_of(channel);
            if let (Some(topic), Some(epoch), Some(offset)) = (topic, &header.ep, header.off) {
                match header.n {
                    // A run: several recorded at once, at `offset` and after.
                    Some(_) => {
                        let mut next = Some(offset);
                        for data in envelope::run(body) {
                            let Some(offset) = next else {
                                tracing::debug!(
                                    topic,
                                    "a recorded run past the last offset; dropped"
                                );
                                break;
                            };
                            next = offset.checked_add(1);
                            self.on_recorded(topic, epoch, offset, &data).await;
                            tokio::task::consume_budget().await;
                        }
                    }
                    None => self.on_recorded(topic, epoch, offset, &body).await,
                }
            }
            return;
        }
        if header.k == Kind::Topic {
            // No one here wants it (left over from before this node left the channel, or
            // come while it still listens to a topic its last subscriber left): it must
            // not set a mark, and the mark it passes by goes, or the next subscriber
            // would take the number it skipped for a gap.
            let topic = self.me.channels.topic_of(channel);
            if topic.is_some_and(|topic| self.topics.subscriber_count(topic) == 0) {
                self.marks.forget(Forget::Channel(channel.to_owned()));
                return;
            }
        }
        if !self.is_new(channel, &header) {
            return;
        }
        let text = || Text::from_utf8(body.clone());
        let heard = match header.k {
            Kind::Broadcast => {
                if let Some(frame) = text() {
                    self.handle.push_all(&frame);
                }
                return;
            }
            Kind::Topic => {
                if let (Some(topic), Some(frame)) = (self.me.channels.topic_of(channel), text()) {
                    self.topics.deliver(topic, frame);
                }
                return;
            }
            Kind::Presence => {
                if let Some(topic) = self.me.channels.topic_of(channel) {
                    self.members.said(topic, &header, body);
                }
                return;
            }
            Kind::Notify => {
                let peer = header.p.and_then(|p| self.handle.peer(p));
                if let (Some(peer), Some(frame)) = (peer, text()) {
                    peer.push(frame);
                }
                return;
            }
            Kind::Call => return self.calls.serve(&header, body),
            Kind::Reply => return self.calls.answer(&header, body),
            Kind::Heartbeat => Heard::Heartbeat {
                node: header.o.to_string(),
                incarnation: header.i.to_string(),
                connections: header.n.unwrap_or(0),
                hello: header.hello,
            },
            Kind::Goodbye => Heard::Goodbye {
                node: header.o.to_string(),
                incarnation: header.i.to_string(),
            },
            Kind::Recorded => return,
        };
        // The outbox's hold after an outage ends once every node it waits for is heard
        // from again. Told here, in the bus's order, not by the nodes task: a
        // heartbeat heard before the outage and handed on when the bus was back would
        // end the hold for a node still cut off, and the held broadcasts would miss it.
        // (A goodbye ends the wait for its node too: it is not coming back.)
        self.outbox.heard_from(&header.o);
        let _ = self.nodes.send(heard).await;
    }

    /// A publication the bus recorded at `offset` of `epoch`.
    async fn on_recorded(&mut self, topic: &str, epoch: &str, offset: u64, data: &Bytes) {
        let Some((frame, bytes)) = history::frame_of(topic, offset, data) else {
            tracing::debug!(topic, offset, "a recorded publication that is not JSON");
            return;
        };
        match self.topics.apply(topic, epoch, offset, &frame, bytes) {
            Applied::Delivered(_) | Applied::Duplicate => {}
            _ => {
                let recorded = Inbound::Recorded {
                    topic: topic.to_owned(),
                    epoch: epoch.to_owned(),
                    offset,
                    frame,
                    bytes,
                };
                self.history.tell(recorded).await;
            }
        }
    }

    /// Whether an envelope is one to act on: not this node's own, not one seen before.
    /// A jump in its sequence numbers is reported as a gap (and it is still new).
    fn is_new(&mut self, channel: &str, header: &Header<'_>) -> bool {
        if header.o == self.me.id {
            if header.i == self.me.incarnation {
                return false; // our own publish, already delivered here
            }
            if header.k == Kind::Heartbeat {
                self.counters.twins.fetch_add(1, Ordering::Relaxed);
                tracing::error!(other = %header.i, "another node uses this node's name: calls to it reach both");
                return false;
            }
        }
        match self
            .marks
            .check(channel, &header.o, &header.i, header.s, header.r)
        {
            Seen::Duplicate => {
                self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            Seen::Gap(missed) => {
                let topic = match header.k {
                    Kind::Topic | Kind::Presence => {
                        self.me.channels.topic_of(channel).map(str::to_owned)
                    }
                    _ => None,
                };
                if let Some(topic) = &topic {
                    self.members.gap(topic, &header.o);
                }
                // A topic with history numbers its publications on the bus, not here:
                // what its channel lost was presence (read again just above), not a
                // publication (as on a bus outage, its subscribers are not told).
                let recorded = topic
                    .as_deref()
                    .is_some_and(|t| self.topics.keeps_history(t));
                if header.k == Kind::Broadcast || (topic.is_some() && !recorded) {
                    self.gaps.report(Gap {
                        topic,
                        origin: Some(header.o.to_string()),
                        missed: Some(missed),
                        position: None,
                    });
                }
            }
            Seen::Fresh => {}
        }
        true
    }

    fn on_down(&mut self) {
        let went_down = self.state.send_if_modified(|s| {
            let was_up = *s == ClusterState::Up;
            if was_up {
                *s = ClusterState::Down;
            }
            was_up
        });
        if went_down {
            crate::metrics::cluster_bus(false);
            tracing::warn!("bus down: local delivery only");
            self.before_outage = self
                .live
                .borrow()
                .iter()
                .filter(|n| **n != self.me.id)
                .cloned()
                .collect();
            self.calls
                .fail_all(&ClusterError::Unavailable("the bus went down".into()));
        }
    }

    async fn on_up(&mut self) {
        // The hold goes in before the state says Up: the outbox task wakes on that
        // change, and a flush that saw Up without the hold would go out at once.
        if *self.state.borrow() == ClusterState::Down {
            self.outbox.hold(std::mem::take(&mut self.before_outage));
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
        crate::metrics::cluster_bus(true);
        tracing::info!("bus back");
        self.marks.resync();
        // Whatever was published elsewhere while we were away is lost to us; topics
        // with history are filled in from the bus instead (the history room).
        self.gaps.report(Gap {
            topic: None,
            origin: None,
            missed: None,
            position: None,
        });
        for topic in self.topics.topic_names() {
            if self.topics.keeps_history(&topic) {
                continue;
            }
            self.gaps.report(Gap {
                topic: Some(topic),
                origin: None,
                missed: None,
                position: None,
            });
        }
        self.history.tell(Inbound::BusUp).await;
        self.members.bus_back();
        self.subscriptions.all_changed(self.topics.topic_names());
        let _ = self.nodes.send(Heard::BusBack).await;
    }

    /// Some channels lost messages while the bus stayed up (one server of several went
    /// away, a slot moved): a gap for each of their topics without history that has
    /// local subscribers, and one for broadcasts, not for the rest; topics with history
    /// are filled in from the bus instead (the history room looks at them again). Calls
    /// waiting on answers to this node fail, as their answers may be lost; heartbeats
    /// simply resume.
    async fn on_interrupted(&mut self, channels: &[String]) {
        tracing::info!(?channels, "bus channels interrupted and subscribed again");
        let mut broadcast = false;
        let (mut topics, mut recorded) = (Vec::new(), Vec::new());
        for channel in channels {
            // Reported here once: the next number from each origin sets a new baseline.
            self.marks.resync_channel(channel);
            if self.me.channels.is_broadcast(channel) {
                broadcast = true;
            } else if let Some(topic) = self.me.channels.topic_of(channel) {
                if self.topics.keeps_history(topic) {
                    recorded.push(topic.to_owned());
                } else {
                    topics.push(topic.to_owned());
                }
            } else if *channel == self.me.own {
                self.calls.fail_all(&ClusterError::Unavailable(
                    "this node's channel was interrupted: answers may be lost".into(),
                ));
            }
        }
        if broadcast {
            self.gaps.report(Gap {
                topic: None,
                origin: None,
                missed: None,
                position: None,
            });
        }
        for topic in topics.iter().chain(&recorded) {
            if !recorded.contains(topic) && self.topics.subscriber_count(topic) > 0 {
                self.gaps.report(Gap {
                    topic: Some(topic.clone()),
                    origin: None,
                    missed: None,
                    position: None,
                });
            }
            // Presence deltas on it may be lost too: its view is read again.
            self.members.interrupted(topic);
            // The bus may have failed to issue it meanwhile: look again.
            self.subscriptions.changed(topic);
        }
        if !recorded.is_empty() {
            self.history.tell(Inbound::Interrupted(recorded)).await;
        }
    }
}
