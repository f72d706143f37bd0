//! The outbox: envelopes waiting for the bus, bounded in bytes, sent in order by one
//! task in batches (one bus round trip each when the bus can pipeline).
//!
//! Every other room hands envelopes in through [`Outbox::push`] (it never waits, so a
//! broadcast stays a plain function call; a publish may wait for room with
//! [`Outbox::room`]); only the outbox's own task takes them out. An envelope leaves the
//! outbox only once the bus accepted it; a failed batch is sent again (after the bus is
//! back, or a short backoff), and receivers drop the copies of any part of it that had
//! gone through.
//!
//! **Full: the new one is refused, never an old one dropped.** What the outbox took is
//! sent (unless the node stops); a broadcast or topic message that does not fit is
//! refused, and its publisher is told ([`Refused::Full`]) and counted. Dropping the
//! oldest instead would keep the freshest, but the publisher of the dropped one was
//! already told Ok and could not be told otherwise. Calls, replies and heartbeats may
//! use up to twice the bound (they are small and few), so a node that publishes too
//! much still answers and announces itself.
//!
//! **A channel the bus cannot reach holds back only itself.** When the bus says which
//! messages of a batch it could not publish while it published the others
//! ([`BackplaneError::Partial`]: a Redis Cluster shard with no master), the others
//! leave the outbox and those channels are held back, each for its own backoff (20 ms
//! doubling to 1 s), their envelopes kept in order; everything else goes on meanwhile.
//! Together they take at most half the outbox's bound ([`Refused::Unreachable`] past
//! it, for a new broadcast or topic message on one of them), so a shard dead for long
//! leaves the other half to the channels the bus reaches: their publishers go on
//! unrefused while it lasts. What such channels took before the bus first failed on
//! them may be more (up to the whole bound); the excess is not counted against the
//! others, so the outbox then holds at most one and a half times its bound.
//!
//! After an outage, broadcasts and topic messages are held until every node known
//! before it has been heard from again (each one listens again before it announces
//! itself), at most one heartbeat window: flushed at once, they would reach only the
//! nodes whose link came back first. Calls, replies and heartbeats are never held. A
//! batch on its way when the bus went down is sent again with the flush, even if the
//! bus took it: the client may have kept it through the outage and sent it as soon as
//! it could reach the bus again, which is before the hold.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::backplane::{Backplane, BackplaneError};
use super::envelope::{self, Header, Kind};
use super::status::ClusterState;
use super::sync::lock;

/// Envelopes sent at most per bus round trip (packed, `packed`), and their bytes (an
/// envelope larger goes alone). 256 rather than 64: cross-node throughput 0.95x-1.02x
/// -> 1.31x of raw redis-rs on a quiet machine, 0.76x-0.93x -> 1.09x-1.19x on a loaded
/// one (alternated runs of `cargo bench --bench cluster -- --only throughput`). The
/// bus has no flow control either way: a subscriber that cannot keep up with a
/// burst gets its `SlowPeer` policy, as on one node.
const BATCH: usize = 256;
const BATCH_BYTES: usize = 4 * envelope::PACK_BYTES;

/// How long a channel's sequence number is kept unused: the outbox forgets a channel
/// idle for between one and two of these. A node that publishes on ever new topics
/// (one per user, say) or calls ever new nodes would otherwise keep a number for each
/// for as long as it runs. The next envelope on a forgotten channel is numbered above
/// every number the outbox has given and marked as a restart (the header's `r`), so
/// receivers keep dropping copies of what came before it and take it as a new baseline,
/// not a gap. What they cannot tell then: an envelope of the channel lost just before
/// it went idle (their gap report would have come with the next envelope).
pub(super) const SEQUENCE_IDLE: Duration = Duration::from_secs(600);

/// The handle every room pushes into; the task in [`run`] drains it.
pub(super) struct Outbox {
    queue: Mutex<Queue>,
    wake: Notify,
    /// Ticks after each batch the bus accepted, for shutdown to wait on.
    sent: watch::Sender<()>,
    state: watch::Receiver<ClusterState>,
    limit: usize,
    /// How long a flush after an outage waits for the nodes live before it.
    window: Duration,
    /// Whether metrics were on when the outbox was made: its bytes are counted in the
    /// process-wide gauge then, going in and coming out, and not at all otherwise.
    metered: bool,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    bytes: usize,
    next_item: u64,
    refused: u64,
    /// Messages the bus refused for good, given up.
    bus_refused: u64,
    /// The last sequence number per channel this node sent on lately: see
    /// [`SEQUENCE_IDLE`].
    sequences: HashMap<String, Sequence>,
    /// The highest sequence number given on any channel: a channel numbered anew
    /// starts above it, so above anything it had before it was forgotten.
    high: u64,
    /// When the unused sequence numbers are next forgotten.
    next_sweep: Option<Instant>,
    /// While set, only urgent envelopes go out.
    hold: Option<Hold>,
    /// Channels the bus could not reach of late (see the module's doc).
    blocked: HashMap<String, Blocked>,
    /// The bytes of `blocked`'s envelopes: the sum of their [`Blocked::bytes`].
    blocked_bytes: usize,
}

/// A channel held back after the bus could not publish on it.
struct Blocked {
    /// Its envelopes wait until then.
    until: Instant,
    /// The wait the last time, doubled the next (from 20 ms to 1 s).
    backoff: Duration,
    /// Its envelopes' bytes in the outbox.
    bytes: usize,
}

struct Sequence {
    last: u64,
    /// Used since the last sweep.
    used: bool,
}

struct Hold {
    waiting: HashSet<String>,
    until: Instant,
}

struct Item {
    id: u64,
    channel: String,
    payload: Bytes,
    /// Calls, replies and heartbeats: never held after an outage.
    urgent: bool,
    /// A topic message or presence change: it may pass other topics' in a pack.
    passable: bool,
}

/// What [`Outbox::stats`] counts: envelopes waiting, their bytes, envelopes refused,
/// messages the bus refused.
pub(super) struct Fill {
    pub len: usize,
    pub bytes: usize,
    pub refused: u64,
    pub bus_refused: u64,
}

/// Why [`Outbox::push`] did not take an envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The bus is down and the envelope is not one to keep for later.
    Down,
    /// The node is stopped.
    Stopped,
    /// No room: the outbox holds its bound.
    Full,
    /// The envelope's channel is held back, the bus unable to reach it for now, and
    /// the channels held back fill their share of the outbox (half its bound).
    Unreachable,
}

impl Outbox {
    pub fn new(limit: usize, window: Duration, state: watch::Receiver<ClusterState>) -> Self {
        Outbox {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            sent: watch::Sender::new(()),
            state,
            limit,
            window,
            metered: crate::metrics::on(),
        }
    }

    /// Moves the process-wide gauge of outbox bytes by `delta`, if this outbox counts.
    fn meter(&self, delta: i64) {
        if self.metered {
            crate::metrics::cluster_outbox_bytes(delta);
        }
    }

    /// Queues one envelope for the bus, or says why not (then nothing is queued): the
    /// bus is down and `keep_when_down` is false, the node is stopped, or there is no
    /// room for it.
    pub fn push(
        &self,
        channel: &str,
        mut header: Header<'_>,
        body: &[u8],
        keep_when_down: bool,
    ) -> Result<(), Refused> {
        match *self.state.borrow() {
            ClusterState::Up => {}
            ClusterState::Down if keep_when_down => {}
            ClusterState::Down => return Err(Refused::Down),
            ClusterState::Stopped => return Err(Refused::Stopped),
        }
        // Presence rides on topic channels: held with their messages, it keeps their
        // sequence numbers in order.
        let passable = matches!(header.k, Kind::Topic | Kind::Presence);
        let urgent = !matches!(header.k, Kind::Broadcast | Kind::Topic | Kind::Presence);
        let bound = if urgent {
            self.limit.saturating_mul(2)
        } else {
            self.limit
        };
        let mut queue = lock(&self.queue);
        // What the channels held back took beyond their share before the bus said it
        // could not reach them is not counted: the others keep their half.
        let counted = queue.bytes - queue.blocked_bytes.saturating_sub(self.limit / 2);
        // The header's size is known only once it has its number; its number only once
        // it is taken. A header is under 200 bytes; the check is exact below.
        if counted + body.len() > bound {
            crate::metrics::cluster_outbox_dropped();
            return Err(Refused::Full);
        }
        let (seq, restart) = match queue.sequences.get(channel) {
            Some(sequence) => (sequence.last + 1, false),
            None => (queue.high + 1, true),
        };
        header.s = seq;
        header.r = restart;
        let payload = envelope::write(&header, body);
        if counted + payload.len() > bound {
            crate::metrics::cluster_outbox_dropped();
            return Err(Refused::Full);
        }
        if !queue.blocked.is_empty() {
            let share = queue.blocked_bytes + payload.len() > self.limit / 2;
            if let Some(blocked) = queue.blocked.get_mut(channel) {
                if share && !urgent {
                    crate::metrics::cluster_outbox_dropped();
                    return Err(Refused::Unreachable);
                }
                blocked.bytes += payload.len();
                queue.blocked_bytes += payload.len();
            }
        }
        let sequence = Sequence {
            last: seq,
            used: true,
        };
        match queue.sequences.get_mut(channel) {
            Some(entry) => *entry = sequence,
            None => {
                queue.sequences.insert(channel.to_owned(), sequence);
            }
        }
        queue.high = queue.high.max(seq);
        queue.bytes += payload.len();
        self.meter(payload.len() as i64);
        let id = queue.next_item;
        queue.next_item += 1;
        queue.items.push_back(Item {
            id,
            channel: channel.to_owned(),
            payload,
            urgent,
            passable,
        });
        drop(queue);
        self.wake.notify_one();
        Ok(())
    }

    /// Resolves when the outbox has sent something since `since` was taken (room may
    /// have been made), or the state changed. For a publisher waiting for room.
    pub async fn room(&self, since: &mut watch::Receiver<()>) {
        let mut state = self.state.clone();
        state.borrow_and_update();
        tokio::select! {
            _ = since.changed() => {}
            _ = state.changed() => {}
        }
    }

    /// Counts a broadcast or publish that failed for want of room.
    pub fn count_refused(&self) {
        lock(&self.queue).refused += 1;
    }

    /// A receiver of the outbox's "sent" ticks, for [`room`](Self::room).
    pub fn sent_ticks(&self) -> watch::Receiver<()> {
        self.sent.subscribe()
    }

    /// Whether the bus is up (a full outbox then drains).
    pub fn bus_up(&self) -> bool {
        *self.state.borrow() == ClusterState::Up
    }

    /// The bus is back: hold the flush until the nodes in `waiting` (live before the
    /// outage) are heard from, or the heartbeat window has passed.
    pub fn hold(&self, waiting: HashSet<String>) {
        if !waiting.is_empty() {
            lock(&self.queue).hold = Some(Hold {
                waiting,
                until: Instant::now() + self.window,
            });
        }
        self.wake.notify_one();
    }

    /// `node` was heard from, told by the receive loop in the bus's order: a heartbeat
    /// (it listens again) or a goodbye (it is not coming back). The hold stops waiting
    /// for it.
    pub fn heard_from(&self, node: &str) {
        let mut queue = lock(&self.queue);
        if let Some(hold) = &mut queue.hold {
            hold.waiting.remove(node);
            if hold.waiting.is_empty() {
                queue.hold = None;
                drop(queue);
                self.wake.notify_one();
            }
        }
    }

    pub fn stats(&self) -> Fill {
        let queue = lock(&self.queue);
        Fill {
            len: queue.items.len(),
            bytes: queue.bytes,
            refused: queue.refused,
            bus_refused: queue.bus_refused,
        }
    }

    /// Waits until the outbox is empty, for at most `limit`; whether it is.
    pub async fn drained(&self, limit: Duration) -> bool {
        let mut sent = self.sent.subscribe();
        let empty = sent.wait_for(|_| lock(&self.queue).items.is_empty());
        let emptied = matches!(tokio::time::timeout(limit, empty).await, Ok(Ok(_)));
        emptied
    }

    /// The next batch (held envelopes and blocked channels left out); when the
    /// outbox should look again for what was left out (a hold's end, a channel's
    /// backoff); and whether the batch is the front of the queue (nothing left out
    /// before its last).
    fn next_batch(&self) -> (Vec<Sending>, Option<Instant>, bool) {
        let mut queue = lock(&self.queue);
        let now = Instant::now();
        if queue.hold.as_ref().is_some_and(|h| now >= h.until) {
            queue.hold = None;
        }
        let held = queue.hold.as_ref().map(|h| h.until);
        let blocked_until = queue
            .blocked
            .values()
            .map(|b| b.until)
            .filter(|until| *until > now)
            .min();
        let mut bytes = 0;
        let mut skipped = false;
        let batch = queue
            .items
            .iter()
            .filter(|i| {
                let blocked = blocked_until.is_some()
                    && queue.blocked.get(&i.channel).is_some_and(|b| b.until > now);
                let goes = (held.is_none() || i.urgent) && !blocked;
                skipped |= !goes;
                goes
            })
            .take(BATCH)
            .take_while(|i| {
                let first = bytes == 0;
                bytes += i.payload.len();
                first || bytes <= BATCH_BYTES
            })
            .map(|i| Sending {
                id: i.id,
                channel: i.channel.clone(),
                payload: i.payload.clone(),
                passable: i.passable,
            })
            .collect();
        let wake = match (held, blocked_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (batch, wake, !skipped)
    }

    /// The bus accepted a batch: it leaves the outbox. `ids` is empty when the batch
    /// was the front (through `last`), else it names what was sent around envelopes
    /// left out (held after an outage, or on a channel held back).
    fn sent(&self, last: u64, ids: &HashSet<u64>) {
        {
            let mut guard = lock(&self.queue);
            guard.sweep(Instant::now());
            let queue = &mut *guard;
            let mut freed = 0;
            let blocked = &mut queue.blocked;
            let blocked_bytes = &mut queue.blocked_bytes;
            let mut went = |item: &Item| {
                freed += item.payload.len();
                // The bus took one of its envelopes: the channel goes again, and what
                // it still holds counts like anyone's.
                if !blocked.is_empty() {
                    if let Some(channel) = blocked.remove(&item.channel) {
                        *blocked_bytes -= channel.bytes;
                    }
                }
            };
            if ids.is_empty() {
                while queue.items.front().is_some_and(|i| i.id <= last) {
                    if let Some(item) = queue.items.pop_front() {
                        went(&item);
                    }
                }
            } else {
                queue.items.retain(|i| {
                    let sent = ids.contains(&i.id);
                    if sent {
                        went(i);
                    }
                    !sent
                });
            }
            queue.bytes -= freed;
            self.meter(-(freed as i64));
        }
        // Not under the queue's lock: `drained` takes it inside the watch's.
        self.sent.send_replace(());
    }

    /// The bus published a batch but for the messages on `failed`: the rest of `batch`
    /// leaves the outbox, and each of those channels waits out its backoff.
    fn partly_sent(&self, batch: &[u64], failed: &HashSet<&str>) {
        let batch: HashSet<u64> = batch.iter().copied().collect();
        let sent: HashSet<u64> = lock(&self.queue)
            .items
            .iter()
            .filter(|i| batch.contains(&i.id) && !failed.contains(i.channel.as_str()))
            .map(|i| i.id)
            .collect();
        if !sent.is_empty() {
            self.sent(0, &sent);
        }
        let now = Instant::now();
        let mut guard = lock(&self.queue);
        let queue = &mut *guard;
        for channel in failed {
            let blocked = match queue.blocked.entry((*channel).to_owned()) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => {
                    let bytes = queue
                        .items
                        .iter()
                        .filter(|i| i.channel == *channel)
                        .map(|i| i.payload.len())
                        .sum();
                    queue.blocked_bytes += bytes;
                    entry.insert(Blocked {
                        until: now,
                        backoff: Duration::ZERO,
                        bytes,
                    })
                }
            };
            blocked.backoff =
                (blocked.backoff * 2).clamp(Duration::from_millis(20), Duration::from_secs(1));
            blocked.until = now + blocked.backoff;
        }
    }
}

impl Drop for Outbox {
    /// What a node's outbox still held at its end (a node stopped while its bus was
    /// down) never goes out: it leaves the process-wide count.
    fn drop(&mut self) {
        let bytes = lock(&self.queue).bytes;
        if bytes > 0 {
            self.meter(-(bytes as i64));
        }
    }
}

impl Queue {
    /// Every [`SEQUENCE_IDLE`], forgets the channels not used since the last time.
    fn sweep(&mut self, now: Instant) {
        match self.next_sweep {
            Some(due) if now < due => {}
            Some(_) => {
                self.sequences
                    .retain(|_, sequence| std::mem::take(&mut sequence.used));
                if self.sequences.len() < self.sequences.capacity() / 4 {
                    self.sequences.shrink_to_fit();
                }
                self.next_sweep = Some(now + SEQUENCE_IDLE);
            }
            None => self.next_sweep = Some(now + SEQUENCE_IDLE),
        }
    }
}

/// One envelope of a batch being sent.
struct Sending {
    id: u64,
    channel: String,
    payload: Bytes,
    /// See [`Item::passable`].
    passable: bool,
}

/// A batch as bus messages, envelopes of one channel packed together
/// (`envelope::pack`, up to `PACK_BYTES` a pack); an envelope alone goes as it is.
///
/// Only topic messages and presence changes pass one another, across topics (only
/// each topic's order is promised, and on a Redis Cluster topics live on different
/// shards anyway): a burst that goes round many topics still packs. Everything else
/// is a fence that nothing passes either way: a broadcast after a publish goes after
/// it (broadcasts in a row pack together), and so do calls, replies, notifies and
/// heartbeats, so a goodbye still goes after what was sent before it.
fn packed(batch: Vec<Sending>) -> Vec<(String, Bytes)> {
    let mut messages = Vec::new();
    // Since the last fence: each channel's envelopes, in the order channels first came.
    let mut runs: Vec<Run> = Vec::new();
    let mut by_channel: HashMap<String, usize> = HashMap::new();
    for item in batch {
        let joins = match by_channel.get(&item.channel) {
            // A fence joins only the run it would follow anyway, the last one.
            Some(&at) if item.passable || at + 1 == runs.len() => {
                runs[at].bytes + item.payload.len() <= envelope::PACK_BYTES
            }
            _ => false,
        };
        if joins {
            let run = &mut runs[by_channel[&item.channel]];
            run.bytes += item.payload.len();
            run.envelopes.push(item.payload);
            continue;
        }
        if !item.passable {
            flush(&mut runs, &mut by_channel, &mut messages);
        }
        // A channel's first run since the fence, or its next once one is full.
        by_channel.insert(item.channel.clone(), runs.len());
        runs.push(Run {
            channel: item.channel,
            bytes: item.payload.len(),
            envelopes: vec![item.payload],
        });
    }
    flush(&mut runs, &mut by_channel, &mut messages);
    messages
}

/// One channel's envelopes to go as one message.
struct Run {
    channel: String,
    envelopes: Vec<Bytes>,
    bytes: usize,
}

fn flush(
    runs: &mut Vec<Run>,
    by_channel: &mut HashMap<String, usize>,
    out: &mut Vec<(String, Bytes)>,
) {
    by_channel.clear();
    for mut run in runs.drain(..) {
        let message = match run.envelopes.len() {
            1 => run.envelopes.swap_remove(0),
            _ => envelope::pack(&run.envelopes),
        };
        out.push((run.channel, message));
    }
}

/// The outbox's task: sends what it holds, in order, while the node runs.
pub(super) async fn run(
    outbox: Arc<Outbox>,
    bus: Arc<dyn Backplane>,
    mut stop: watch::Receiver<bool>,
) {
    let mut state = outbox.state.clone();
    let mut retry = Duration::from_millis(20);
    loop {
        // The state first, then the batch. After an outage the hold is in place before
        // the state says Up (`on_up` in receive.rs), so a batch taken once Up is seen
        // leaves the held envelopes out. Taken the other way round, a batch made just
        // before the hold went out whole if the state turned Up in between: the
        // flush reached only the nodes whose link came back first.
        if *state.borrow_and_update() != ClusterState::Up {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = state.wait_for(|s| *s != ClusterState::Down) => continue,
            }
        }
        let (batch, wake, front) = outbox.next_batch();
        let Some(last) = batch.last().map(|s| s.id) else {
            let until = wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = outbox.wake.notified() => continue,
                _ = tokio::time::sleep_until(until) => continue,
            }
        };
        let ids: Vec<u64> = batch.iter().map(|s| s.id).collect();
        let messages = packed(batch);
        // Kept for the rare batch the bus refuses part of (a few `String`s a batch).
        let again = messages.clone();
        let result = match bus.publish_many(messages).await {
            Err(BackplaneError::Refused(_)) => {
                one_by_one(&outbox, bus.as_ref(), again.clone()).await
            }
            result => result,
        };
        // The bus went down while the batch was on its way: the client may have held it
        // and sent it once the bus was back (redis-rs waits for its own redial), before
        // the hold, to the nodes that listened again first. It stays, and goes again
        // with the flush: the nodes that had it drop the copies.
        let went = matches!(result, Ok(()) | Err(BackplaneError::Partial { .. }));
        if went && state.has_changed().unwrap_or(false) {
            tracing::debug!("the bus went down while a batch was sent; it goes again");
            continue;
        }
        match result {
            Ok(()) => {
                retry = Duration::from_millis(20);
                let ids: HashSet<u64> = match front {
                    true => HashSet::new(),
                    false => ids.into_iter().collect(),
                };
                outbox.sent(last, &ids);
            }
            Err(BackplaneError::Partial { failed, why }) => {
                let channels: HashSet<&str> = failed
                    .iter()
                    .filter_map(|&k| again.get(k))
                    .map(|(channel, _)| channel.as_str())
                    .collect();
                tracing::debug!(error = %why, ?channels, "publish failed on some channels; they wait");
                retry = Duration::from_millis(20);
                outbox.partly_sent(&ids, &channels);
            }
            Err(e) => {
                tracing::debug!(error = %e, "publish failed; will retry");
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

/// Sends a batch part of which the bus refused for good (a Redis ACL that does not
/// allow a channel) one message at a time: each refused one is given up, counted and
/// said; sent again it would be refused again, and everything behind it (heartbeats
/// too) would wait. Any other error stops it: the batch is sent again later (receivers
/// drop what they already have).
async fn one_by_one(
    outbox: &Outbox,
    bus: &dyn Backplane,
    messages: Vec<(String, Bytes)>,
) -> Result<(), BackplaneError> {
    for (channel, payload) in messages {
        match bus.publish(&channel, payload).await {
            Ok(()) => {}
            Err(BackplaneError::Refused(why)) => {
                tracing::error!(%channel, error = %why, "the bus refused a message for good; given up");
                lock(&outbox.queue).bus_refused += 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bus whose first `publish_many` waits for `release`; it records how many
    /// envelopes each call carried.
    #[derive(Default)]
    struct Gated {
        calls: Mutex<Vec<usize>>,
        gate: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
        called: Notify,
    }

    impl Backplane for Gated {
        fn publish(
            &self,
            _channel: &str,
            _payload: Bytes,
        ) -> super::super::backplane::BoxFuture<'_, Result<(), BackplaneError>> {
            unreachable!("the outbox publishes in batches")
        }

        fn publish_many(
            &self,
            messages: Vec<(String, Bytes)>,
        ) -> super::super::backplane::BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async move {
                let gate = lock(&self.gate).take();
                lock(&self.calls).push(messages.len());
                self.called.notify_one();
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                Ok(())
            })
        }

        fn subscribe(
            &self,
            _channel: &str,
        ) -> super::super::backplane::BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async { Ok(()) })
        }

        fn unsubscribe(
            &self,
            _channel: &str,
        ) -> super::super::backplane::BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async { Ok(()) })
        }

        fn events(&self) -> Option<tokio::sync::mpsc::Receiver<super::super::backplane::BusEvent>> {
            None
        }
    }

    /// redis-rs keeps a command through its own redial: a batch sent as the bus went
    /// down is taken once the bus is back, before the flush's hold, by the nodes that
    /// listen again first only. So it goes again with the flush.
    #[tokio::test]
    async fn a_batch_on_its_way_as_the_bus_goes_down_goes_again_with_the_held_flush() {
        async fn within<F: std::future::Future>(f: F) -> F::Output {
            tokio::time::timeout(Duration::from_secs(10), f)
                .await
                .expect("a step took longer than 10 s")
        }
        let (state_tx, state) = watch::channel(ClusterState::Up);
        let outbox = Arc::new(Outbox::new(1 << 20, Duration::from_secs(60), state));
        let bus = Arc::new(Gated::default());
        let (release, gate) = tokio::sync::oneshot::channel();
        *lock(&bus.gate) = Some(gate);
        let (_stop, stop) = watch::channel(false);
        tokio::spawn(run(outbox.clone(), bus.clone(), stop));
        let header = Header::new(Kind::Topic, "a", "inc");
        outbox.push("t", header, b"{}", false).unwrap();
        within(bus.called.notified()).await;
        // Down and back while it is on its way, as the receive loop does it: the hold
        // goes in before the state says Up.
        state_tx.send_replace(ClusterState::Down);
        outbox.hold(HashSet::from(["b".to_owned()]));
        state_tx.send_replace(ClusterState::Up);
        release.send(()).unwrap();
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*lock(&bus.calls), [1], "sent again before the hold ended");
        assert_eq!(
            outbox.stats().len,
            1,
            "the batch the bus took while it was down"
        );
        outbox.heard_from("b");
        within(bus.called.notified()).await;
        assert_eq!(*lock(&bus.calls), [1, 1]);
        within(async {
            while outbox.stats().len > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await;
    }

    /// Pushes a topic envelope on `channel`; its header's number and restart flag.
    fn numbered(outbox: &Outbox, channel: &str) -> (u64, bool) {
        let header = Header::new(Kind::Topic, "a", "inc");
        outbox.push(channel, header, b"{}", false).unwrap();
        let queue = lock(&outbox.queue);
        let payload = &queue.items.back().unwrap().payload;
        let (header, _) = envelope::read(payload).unwrap();
        (header.s, header.r)
    }

    #[test]
    fn an_idle_channel_is_forgotten_and_numbered_anew_above_all_before() {
        use super::super::sequence::{Marks, Seen};

        let (_state, rx) = watch::channel(ClusterState::Up);
        let outbox = Outbox::new(1 << 20, Duration::from_secs(1), rx);
        let mut marks = Marks::default();
        let mut receive =
            |channel: &str, (s, r): (u64, bool)| match marks.check(channel, "a", "inc", s, r) {
                Seen::Fresh => s,
                Seen::Duplicate => panic!("{channel}#{s} dropped as a duplicate"),
                Seen::Gap(n) => panic!("{channel}#{s} taken for a gap of {n}"),
            };
        let t0 = Instant::now();
        assert_eq!(numbered(&outbox, "x"), (1, true));
        assert_eq!(receive("x", (1, true)), 1);
        assert_eq!(receive("x", numbered(&outbox, "x")), 2);
        assert_eq!(numbered(&outbox, "y"), (3, true));
        lock(&outbox.queue).sweep(t0);
        lock(&outbox.queue).sweep(t0 + SEQUENCE_IDLE);
        assert_eq!(lock(&outbox.queue).sequences.len(), 2, "both used since");
        assert_eq!(numbered(&outbox, "y"), (4, false));
        lock(&outbox.queue).sweep(t0 + SEQUENCE_IDLE * 2);
        let kept: Vec<String> = lock(&outbox.queue).sequences.keys().cloned().collect();
        assert_eq!(kept, ["y"], "x idle for a whole period");
        // x again: above every number given, and a baseline for its receivers (who
        // still hold their mark of x#2), not a gap; what follows goes on from it.
        assert_eq!(numbered(&outbox, "x"), (5, true));
        assert_eq!(receive("x", (5, true)), 5);
        assert_eq!(receive("x", numbered(&outbox, "x")), 6);
        // Copies of what came before stay duplicates.
        assert!(matches!(
            marks.check("x", "a", "inc", 2, false),
            Seen::Duplicate
        ));
        // A real jump is still a gap.
        assert!(matches!(
            marks.check("x", "a", "inc", 9, false),
            Seen::Gap(2)
        ));
    }

    /// A channel that filled the whole bound before the bus first failed on it: the
    /// other channels still get half the bound, it gets nothing more until it goes
    /// again, and then what it holds counts like anyone's.
    #[test]
    fn channels_held_back_take_half_the_bound_and_no_more_from_the_others() {
        let (_state, rx) = watch::channel(ClusterState::Up);
        let outbox = Outbox::new(10_000, Duration::from_secs(1), rx);
        let push = |channel: &str| {
            let header = Header::new(Kind::Topic, "a", "inc");
            outbox.push(channel, header, &[b' '; 100], true)
        };
        let mut x = 0;
        while push("x").is_ok() {
            x += 1;
        }
        assert!(x > 40, "{x} pushed");
        assert_eq!(push("y"), Err(Refused::Full), "nothing held back yet");
        let (batch, _, _) = outbox.next_batch();
        let ids: Vec<u64> = batch.iter().map(|s| s.id).collect();
        outbox.partly_sent(&ids, &HashSet::from(["x"]));
        assert_eq!(push("x"), Err(Refused::Unreachable));
        let mut y = 0;
        while push("y").is_ok() {
            y += 1;
        }
        let held = outbox.stats().bytes;
        assert!((x / 2 - 2..=x / 2).contains(&y), "{y} pushed beside {x}");
        assert!(
            held <= 15_000,
            "{held} bytes held: at most one and a half bounds"
        );
        // One of x's goes: x is reachable again, and everything counts.
        let front = lock(&outbox.queue).items.front().map(|i| i.id).unwrap();
        outbox.sent(front, &HashSet::new());
        assert_eq!(lock(&outbox.queue).blocked_bytes, 0);
        assert_eq!(push("y"), Err(Refused::Full));
    }

    fn sending(id: u64, channel: &str, passable: bool) -> Sending {
        Sending {
            id,
            channel: channel.to_owned(),
            payload: Bytes::from(format!("{{\"envelope\":{id}}}")),
            passable,
        }
    }

    /// What each message carries: its channel and its envelopes' ids.
    fn shape(messages: Vec<(String, Bytes)>) -> Vec<(String, Vec<u64>)> {
        messages
            .into_iter()
            .map(|(channel, message)| {
                let ids = envelope::unpack(message)
                    .map(|e| {
                        let v: serde_json::Value = serde_json::from_slice(&e).unwrap();
                        v["envelope"].as_u64().unwrap()
                    })
                    .collect();
                (channel, ids)
            })
            .collect()
    }

    #[test]
    fn channels_pack_apart_and_nothing_passes_a_fence() {
        let batch = vec![
            sending(1, "t:a", true),
            sending(2, "t:b", true),
            sending(3, "t:a", true),
            sending(4, "ctl", false),
            sending(5, "t:b", true),
            sending(6, "t:a", true),
            sending(7, "t:b", true),
            sending(8, "all", false),
            sending(9, "all", false),
            sending(10, "t:a", true),
            sending(11, "all", false),
            sending(12, "t:a", true),
        ];
        let got = shape(packed(batch));
        let want: Vec<(String, Vec<u64>)> = vec![
            ("t:a".into(), vec![1, 3]),
            ("t:b".into(), vec![2]),
            ("ctl".into(), vec![4]),
            ("t:b".into(), vec![5, 7]),
            ("t:a".into(), vec![6]),
            // Broadcasts in a row pack; a topic message after one stays after it, and
            // the next broadcast after that.
            ("all".into(), vec![8, 9]),
            ("t:a".into(), vec![10]),
            ("all".into(), vec![11]),
            ("t:a".into(), vec![12]),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_full_pack_is_followed_by_the_next_in_order() {
        let big = envelope::PACK_BYTES / 3;
        let batch: Vec<Sending> = (0..7)
            .map(|id| Sending {
                payload: Bytes::from(format!(
                    "{{\"envelope\":{id},\"x\":\"{}\"}}",
                    "x".repeat(big)
                )),
                ..sending(id, "t:a", true)
            })
            .collect();
        let got = shape(packed(batch));
        let ids: Vec<Vec<u64>> = got.into_iter().map(|(_, ids)| ids).collect();
        assert_eq!(ids, [vec![0, 1], vec![2, 3], vec![4, 5], vec![6]]);
    }
}
