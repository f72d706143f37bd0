//! The outbox: envelopes waiting for the bus, bounded in bytes, sent in order by one
//! task in batches (one bus round trip each when the bus can pipeline).
//!
//! An envelope leaves the outbox only once the bus accepted it; a failed batch is sent
//! again (after the bus is back, or a short backoff), and receivers drop the copies
//! of any part of it that had gone through.
//!
//! After an outage, broadcasts and topic messages are held until every node known
//! before it has been heard from again (each one listens again before it announces
//! itself), at most one heartbeat window: flushed at once, they would reach only the
//! nodes whose link came back first. Calls, replies and heartbeats are never held.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::envelope::{self, Header, Kind};
use super::node::{lock, Node};
use super::ClusterState;

/// Envelopes sent at most per bus round trip.
const BATCH: usize = 64;

#[derive(Default)]
pub(super) struct Outbox {
    pub(super) items: VecDeque<Item>,
    pub(super) bytes: usize,
    pub(super) next_item: u64,
    pub(super) dropped: u64,
    /// The last sequence number per channel this node sent on: one entry (a channel
    /// name and a number) per channel published to in this incarnation. Forgetting one
    /// would restart its numbers and make receivers drop what follows as duplicates.
    pub(super) sequences: HashMap<String, u64>,
    /// The nodes live when the bus went down, awaited when it is back.
    pub(super) before_outage: HashSet<String>,
    /// While set, only urgent envelopes go out.
    hold: Option<Hold>,
}

struct Hold {
    waiting: HashSet<String>,
    until: Instant,
}

pub(super) struct Item {
    pub(super) id: u64,
    pub(super) channel: String,
    pub(super) payload: Bytes,
    /// Calls, replies and heartbeats: never held after an outage.
    urgent: bool,
}

impl Node {
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
        let urgent = !matches!(header.k, Kind::Broadcast | Kind::Topic);
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
            urgent,
        });
        drop(outbox);
        self.outbox_wake.notify_one();
        true
    }

    /// The bus is back: hold the flush until the nodes live before the outage are heard
    /// from, or the heartbeat window has passed.
    pub(super) fn hold_flush(&self) {
        let window = self.options.heartbeat * self.options.missed;
        let mut outbox = lock(&self.outbox);
        let waiting = std::mem::take(&mut outbox.before_outage);
        if !waiting.is_empty() {
            outbox.hold = Some(Hold {
                waiting,
                until: Instant::now() + window,
            });
        }
    }

    /// `node` announced itself: it listens again.
    pub(super) fn heard_from(&self, node: &str) {
        let mut outbox = lock(&self.outbox);
        if let Some(hold) = &mut outbox.hold {
            hold.waiting.remove(node);
            if hold.waiting.is_empty() {
                outbox.hold = None;
                drop(outbox);
                self.outbox_wake.notify_one();
            }
        }
    }
}

pub(super) async fn send(node: Arc<Node>) {
    let mut stop = node.stopping();
    let mut state = node.state.subscribe();
    let mut retry = Duration::from_millis(20);
    loop {
        let (batch, held): (Vec<(u64, String, Bytes)>, Option<Instant>) = {
            let mut outbox = lock(&node.outbox);
            if outbox
                .hold
                .as_ref()
                .is_some_and(|h| Instant::now() >= h.until)
            {
                outbox.hold = None;
            }
            let held = outbox.hold.as_ref().map(|h| h.until);
            let batch = outbox
                .items
                .iter()
                .filter(|i| held.is_none() || i.urgent)
                .take(BATCH)
                .map(|i| (i.id, i.channel.clone(), i.payload.clone()))
                .collect();
            (batch, held)
        };
        let Some(&(last, _, _)) = batch.last() else {
            let until = held.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = node.outbox_wake.notified() => continue,
                _ = tokio::time::sleep_until(until) => continue,
            }
        };
        let ids: HashSet<u64> = match held {
            Some(_) => batch.iter().map(|(id, _, _)| *id).collect(),
            None => HashSet::new(),
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
                if ids.is_empty() {
                    // The batch was the front (the overflow may have dropped some of it).
                    while outbox.items.front().is_some_and(|i| i.id <= last) {
                        if let Some(item) = outbox.items.pop_front() {
                            outbox.bytes -= item.payload.len();
                        }
                    }
                } else {
                    let mut freed = 0;
                    outbox.items.retain(|i| {
                        let sent = ids.contains(&i.id);
                        if sent {
                            freed += i.payload.len();
                        }
                        !sent
                    });
                    outbox.bytes -= freed;
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
