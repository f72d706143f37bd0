//! Topic history across the cluster: the room that puts what comes down from the bus in
//! offset order per topic, and the reads of the bus's history, coalesced.
//!
//! Offsets come from the bus (`Backplane::append`: on Redis, one script numbers,
//! records and publishes), so a topic with history has one order for every node and
//! publisher. Every node, the publishing one included, delivers a publication when it
//! comes back from the bus, through its cache (`Topics::apply`, topics/log.rs):
//!
//! - the next offset: delivered; one already had: dropped;
//! - a jump (pub/sub lost some: a subscriber connection killed or dropped by Redis for
//!   falling behind, a lossy bus): the missing ones are read from the bus's history and
//!   delivered first, so subscribers see no gap;
//! - another epoch (the bus lost the history: Redis came back empty): the cache starts
//!   over at the bus's position, and the topic's local subscribers get one gap notice
//!   `{"topic":T,"epoch":E2,"offset":K}` (K the newest of the new epoch then; the next
//!   publication is K + 1) and the `on_gap` hook runs: once per topic and node.
//!
//! When the bus is back after an outage, each topic this node follows is looked at
//! again (its position read, what it missed filled in), so an outage of this node's
//! subscriber link alone costs its subscribers nothing. A read that fails is tried
//! again every second while the bus is up.
//!
//! The receive loop delivers what is simply the next one itself (`Topics::apply` under
//! the topic's lock decides); anything else comes here. The room is one task, so a
//! topic's fills and resets happen one at a time and in the order they came; since a
//! publication is delivered only as the very next offset, a later one the receive loop
//! sees while the room fills a hole just comes here too, behind it. Resumes older than a node's cache read the bus through
//! [`Reads`]: concurrent readers of one topic and position share one read (a
//! reconnect storm after a node restart reads each position once), and what they read
//! goes into the cache for those who come after.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, watch, OnceCell};

use super::backplane::{Backplane, BackplaneError, HistoryRead};
use super::envelope::Me;
use super::gaps::Gaps;
use super::keys::TopicKeys;
use super::status::{ClusterState, Gap};
use super::sync::lock;
use crate::addr::ClusterError;
use crate::error::{Error, Result};
use crate::history::{HistoryConfig, Position};
use crate::relay::{Kept, Replay};
use crate::topics::{recorded_frame, Applied, Followed, Topics};
use crate::transport::Text;

/// What the room's inbox holds before the receive loop waits.
const INBOX: usize = 4096;

/// The most entries one read of the bus asks for.
const READ_MAX: u64 = 4096;

/// How often a failed look at a topic is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// How long a read's answer serves those who ask the same after it came: a resume
/// that decided to read the bus just before an earlier one put the same into the cache
/// gets that answer instead of reading again.
const READ_KEPT: Duration = Duration::from_secs(2);

/// What the room hears.
pub(super) enum Inbound {
    /// A publication the bus recorded that the receive loop could not deliver at once
    /// (not the next one, or of another epoch, or not followed): its notification and
    /// its data's size.
    Recorded {
        topic: String,
        epoch: String,
        offset: u64,
        frame: Text,
        bytes: usize,
    },
    /// A subscriber needs `topic`'s cache to follow the bus.
    Follow {
        topic: String,
        done: oneshot::Sender<Result<(), ClusterError>>,
    },
    /// This node no longer hears `topic` (the subscriptions task unsubscribed it).
    Unfollow(String),
    /// The bus is back: look at every followed topic again.
    BusUp,
    /// These topics' channels were interrupted while the bus stayed up (one shard of
    /// several): look at those followed again.
    Interrupted(Vec<String>),
    /// A resume found the bus ahead of `topic`'s cache: look at it again, if followed.
    Look(String),
}

/// The history room's handle: its inbox, the bus, the coalesced reads, and the bound
/// on publications waiting to be recorded.
pub(super) struct History {
    inbox: mpsc::Sender<Inbound>,
    pub bus: Arc<dyn Backplane>,
    pub me: Arc<Me>,
    pub reads: Reads,
    recording: AtomicUsize,
    max_recording: usize,
    state: watch::Receiver<ClusterState>,
    /// The last topic recorded and its bus names: a burst on one topic names it once.
    last_keys: Mutex<Option<(String, Arc<TopicKeys>)>>,
}

/// A new epoch's name, for a bus that has none for a topic.
pub(super) fn new_epoch() -> String {
    // Made for every publication with history (the bus uses it only to start one):
    // twelve hex digits written out, not `format!`ed.
    let bits = fastrand::u64(..) >> 16;
    (0..12)
        .rev()
        .map(|i| char::from(b"0123456789abcdef"[((bits >> (4 * i)) & 0xf) as usize]))
        .collect()
}

/// A bus error as the cluster reports it: a bus without history is a configuration
/// error, anything else means the bus is not reachable now.
pub(super) fn bus_error(e: BackplaneError) -> Error {
    Error::Cluster(match e {
        BackplaneError::Unsupported(what) => ClusterError::Config(format!(
            "topics keep history but the backplane does not support {what}"
        )),
        other => ClusterError::Unavailable(other.to_string()),
    })
}

impl History {
    /// The handle and the room's inbox (for [`Room::run`]).
    pub fn new(
        bus: Arc<dyn Backplane>,
        me: Arc<Me>,
        counters: Arc<super::status::Counters>,
        max_recording: usize,
        state: watch::Receiver<ClusterState>,
    ) -> (History, mpsc::Receiver<Inbound>) {
        let (inbox, rx) = mpsc::channel(INBOX);
        let history = History {
            inbox,
            bus,
            me,
            reads: Reads {
                inflight: Mutex::new(HashMap::new()),
                counters,
            },
            recording: AtomicUsize::new(0),
            max_recording,
            state,
            last_keys: Mutex::new(None),
        };
        (history, rx)
    }

    /// Hands `what` to the room; waits for room in its inbox.
    pub async fn tell(&self, what: Inbound) {
        let _ = self.inbox.send(what).await;
    }

    /// Resolves once `topic`'s cache follows the bus.
    pub async fn follow(&self, topic: &str) -> Result<()> {
        let (done, answer) = oneshot::channel();
        let follow = Inbound::Follow {
            topic: topic.to_owned(),
            done,
        };
        if self.inbox.send(follow).await.is_err() {
            return Err(Error::Cluster(ClusterError::Stopped));
        }
        match answer.await {
            Ok(result) => result.map_err(Error::Cluster),
            Err(_) => Err(Error::Cluster(ClusterError::Stopped)),
        }
    }

    /// Records a publication on the bus: its position once the bus has it. Fails at once
    /// while the bus is down, or when too many wait already.
    pub async fn record(
        &self,
        topic: &str,
        data: &RawValue,
        bounds: &HistoryConfig,
    ) -> Result<Position> {
        match *self.state.borrow() {
            ClusterState::Up => {}
            ClusterState::Down => {
                return Err(Error::Cluster(ClusterError::Unavailable(
                    "the bus is down: not recorded".into(),
                )))
            }
            ClusterState::Stopped => return Err(Error::Cluster(ClusterError::Stopped)),
        }
        let waiting = self.recording.fetch_add(1, Ordering::AcqRel);
        let _release = Release(&self.recording);
        if waiting >= self.max_recording {
            return Err(Error::Cluster(ClusterError::Overloaded(format!(
                "{waiting} publications wait to be recorded already"
            ))));
        }
        let keys = self.keys(topic);
        let epoch = new_epoch();
        let append = super::backplane::Append::new(
            &keys,
            bounds,
            &epoch,
            &self.me.recorded_head,
            data.get().as_bytes(),
        );
        self.bus.append(append).await.map_err(bus_error)
    }

    /// `topic`'s bus names: the last topic's again when it is the same.
    fn keys(&self, topic: &str) -> Arc<TopicKeys> {
        let mut last = lock(&self.last_keys);
        match &*last {
            Some((named, keys)) if named == topic => keys.clone(),
            _ => {
                let keys = Arc::new(self.me.channels.keys(topic));
                *last = Some((topic.to_owned(), keys.clone()));
                keys
            }
        }
    }

    /// `topic`'s position on the bus now (an epoch started if it has none).
    pub async fn position(&self, topic: &str, bounds: &HistoryConfig) -> Result<Position> {
        let keys = self.me.channels.keys(topic);
        let read = self
            .bus
            .history_position(&keys, bounds, &new_epoch())
            .await
            .map_err(bus_error)?;
        Ok(read.position())
    }
}

/// Gives back a place among the publications waiting to be recorded.
struct Release<'a>(&'a AtomicUsize);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One read of a topic's history: topic, epoch, after.
type ReadKey = (String, String, u64);
/// A read's answer, and when it came.
type Shared = Arc<
    OnceCell<(
        std::result::Result<Replay, ClusterError>,
        tokio::time::Instant,
    )>,
>;

/// Reads of the bus's history for resumes: one per topic and position, shared by every
/// resume that asks while it runs and for [`READ_KEPT`] after.
pub(super) struct Reads {
    inflight: Mutex<HashMap<ReadKey, Shared>>,
    counters: Arc<super::status::Counters>,
}

impl Reads {
    /// The publications of `topic` after `after` (all the bus has, up to [`READ_MAX`]),
    /// of `epoch`: every caller asking the same while one read is on its way, or for
    /// [`READ_KEPT`] after it came, gets that read's answer.
    pub async fn read(
        &self,
        history: &History,
        topic: &str,
        epoch: &str,
        after: u64,
        bounds: &HistoryConfig,
    ) -> Result<Replay> {
        let key = (topic.to_owned(), epoch.to_owned(), after);
        let cell = {
            let now = tokio::time::Instant::now();
            let mut inflight = lock(&self.inflight);
            // Running, or answered well and lately (a failed read is not kept). A read
            // that every caller gave up on (their futures dropped) holds no clone but
            // the map's and no answer: nobody runs it, and it goes.
            inflight.retain(|_, cell| match cell.get() {
                None => Arc::strong_count(cell) > 1,
                Some((answer, at)) => answer.is_ok() && now - *at < READ_KEPT,
            });
            inflight.entry(key).or_default().clone()
        };
        let (answer, _) = cell
            .get_or_init(|| async {
                let max = (bounds.max_len as u64).clamp(1, READ_MAX);
                let answer = self
                    .fetch(history, topic, bounds, after, max)
                    .await
                    .map(|read| replay(topic, epoch, after, read, &self.counters));
                (answer, tokio::time::Instant::now())
            })
            .await
            .clone();
        answer.map_err(Error::Cluster)
    }

    /// One read of the bus, counted.
    async fn fetch(
        &self,
        history: &History,
        topic: &str,
        bounds: &HistoryConfig,
        after: u64,
        max: u64,
    ) -> std::result::Result<HistoryRead, ClusterError> {
        self.counters.history_reads.fetch_add(1, Ordering::Relaxed);
        let keys = history.me.channels.keys(topic);
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        history
            .bus
            .read_history(&keys, bounds, after, max)
            .await
            .map_err(|e| match bus_error(e) {
                Error::Cluster(e) => e,
                other => ClusterError::Unavailable(other.to_string()),
            })
    }
}

/// What a read of the bus means to a resume after `after` in `epoch`. An entry that is
/// not JSON (no node wrote it) is skipped, logged and counted as a gap (as `fill`
/// skips it for the live subscribers): the resume gets the publications around it,
/// and the jump in offsets shows the one it could not have.
fn replay(
    topic: &str,
    epoch: &str,
    after: u64,
    read: HistoryRead,
    counters: &super::status::Counters,
) -> Replay {
    if read.epoch != epoch {
        return Replay::Epoch;
    }
    if after.saturating_add(1) < read.first {
        return Replay::Gone;
    }
    let through = read.entries.last().map_or(after, |entry| entry.offset);
    let kept: Vec<Kept> = read
        .entries
        .into_iter()
        .filter_map(|entry| {
            let Some((frame, bytes)) = frame_of(topic, entry.offset, &entry.data) else {
                tracing::warn!(
                    topic,
                    offset = entry.offset,
                    "a recorded publication that is not JSON; skipped in a replay"
                );
                counters.gaps.fetch_add(1, Ordering::Relaxed);
                crate::metrics::cluster_gap();
                return None;
            };
            Some(Kept {
                offset: entry.offset,
                frame,
                bytes,
                age: entry.age,
            })
        })
        .collect();
    Replay::Kept {
        kept: kept.into(),
        through,
    }
}

/// The notification of a recorded publication, and its data's size; `None` when the
/// data is not JSON (not written by a node of this cluster).
pub(super) fn frame_of(topic: &str, offset: u64, data: &Bytes) -> Option<(Text, usize)> {
    let raw: &RawValue = serde_json::from_slice(data).ok()?;
    let frame = recorded_frame(topic, offset, raw).ok()?;
    Some((frame, data.len()))
}

/// How a fill ended.
enum Filled {
    /// Everything asked for was delivered.
    Done,
    /// Not all could be read (looked at again later).
    Failed,
    /// The bus's epoch is not the one filled any more.
    Epoch,
}

/// The history room: one task, see the module's doc.
pub(super) struct Room {
    pub topics: Topics,
    pub history: Arc<History>,
    pub gaps: Arc<Gaps>,
    pub state: watch::Receiver<ClusterState>,
    /// Topics whose last look at the bus failed: looked at again every [`RETRY`].
    pub retry: HashSet<String>,
}

impl Room {
    pub async fn run(
        mut self,
        mut inbox: mpsc::Receiver<Inbound>,
        mut stop: watch::Receiver<bool>,
    ) {
        // One timer for the whole loop: a sleep made anew each turn would be put off by
        // every message that comes sooner.
        let mut again = tokio::time::interval(RETRY);
        again.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        again.reset();
        loop {
            let retrying = !self.retry.is_empty();
            // Chosen here, acted on below: nothing held by the select lives across the
            // awaits of the work.
            let what = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                what = inbox.recv() => match what {
                    Some(what) => Some(what),
                    None => return,
                },
                _ = again.tick(), if retrying => None,
            };
            match what {
                Some(what) => self.on(what).await,
                None => {
                    let up = *self.state.borrow() == ClusterState::Up;
                    if up {
                        for topic in std::mem::take(&mut self.retry) {
                            self.look(&topic).await;
                        }
                    }
                }
            }
        }
    }

    async fn on(&mut self, what: Inbound) {
        match what {
            Inbound::Recorded {
                topic,
                epoch,
                offset,
                frame,
                bytes,
            } => self.recorded(&topic, &epoch, offset, &frame, bytes).await,
            Inbound::Follow { topic, done } => {
                // Those that asked while the first was looking: it follows now.
                if self.topics.history_follows(&topic) == Some(true) {
                    let _ = done.send(Ok(()));
                    return;
                }
                let looked = match self.look(&topic).await {
                    Some(_) => Ok(()),
                    // Its subscribers left while it looked, and no history was made for
                    // no one: nothing to follow. A subscribe still waiting finds its
                    // history gone and makes a new one, which it asks to follow.
                    None if self.topics.history_follows(&topic).is_none() => Ok(()),
                    None => Err(ClusterError::Unavailable(format!(
                        "could not read topic {topic:?}'s history position from the bus"
                    ))),
                };
                let _ = done.send(looked);
            }
            Inbound::Unfollow(topic) => {
                self.retry.remove(&topic);
                self.topics.unfollow(&topic);
            }
            Inbound::BusUp => {
                for topic in self.topics.followed() {
                    self.look(&topic).await;
                }
            }
            Inbound::Interrupted(topics) => {
                let followed = self.topics.followed();
                for topic in topics.iter().filter(|t| followed.contains(t)) {
                    self.look(topic).await;
                }
            }
            Inbound::Look(topic) => {
                if self.topics.history_follows(&topic) == Some(true) {
                    self.look(&topic).await;
                }
            }
        }
    }

    /// A publication from the bus: delivered in order, after any hole is filled.
    async fn recorded(
        &mut self,
        topic: &str,
        epoch: &str,
        offset: u64,
        frame: &Text,
        bytes: usize,
    ) {
        // At most: look at the topic, fill a hole, deliver.
        for _ in 0..3 {
            match self.topics.apply(topic, epoch, offset, frame, bytes) {
                Applied::Delivered(_) | Applied::Duplicate => return,
                Applied::NotFollowing => {
                    // No one here wants it: a subscriber that comes asks the cache to
                    // follow, from the bus's position, which has this one.
                    if self.topics.subscriber_count(topic) == 0 {
                        return;
                    }
                    // Subscribers that did not ask (`Topics::subscribe`, or there before
                    // the topic kept history) were here when it came: the cache starts
                    // right before it and catches up with the bus, so they get it.
                    let before = Position {
                        epoch: epoch.to_owned(),
                        offset: offset.saturating_sub(1),
                    };
                    self.topics.follow_at(topic, &before, None, None, false);
                    if self.look(topic).await.is_none() {
                        return;
                    }
                }
                Applied::OtherEpoch => {
                    // The bus's epoch changed (or this is a late one of an older epoch).
                    match self.look(topic).await {
                        Some(at) if at.epoch == epoch => {}
                        _ => return,
                    }
                }
                Applied::Missing { after } => match self.fill(topic, epoch, after, offset).await {
                    Filled::Done => {}
                    Filled::Failed => return,
                    Filled::Epoch => {
                        if self.look(topic).await.is_none() {
                            return;
                        }
                    }
                },
            }
        }
    }

    /// Reads `topic`'s position on the bus and makes the cache follow it: filled in up
    /// to it, or started over (a gap) when the history it had is lost. `None` when the
    /// bus could not be read (tried again later) or the topic keeps no history.
    async fn look(&mut self, topic: &str) -> Option<Position> {
        let bounds = self.topics.history_bounds(topic)?;
        // Again only if the epoch changed while filling in.
        for _ in 0..3 {
            // The cache before the read: the receive loop may deliver while it runs.
            let seen = self.topics.position(topic);
            let at = match self.history.position(topic, &bounds).await {
                Ok(at) => at,
                Err(e) => {
                    tracing::debug!(topic, error = %e, "history position not read; again later");
                    self.retry.insert(topic.to_owned());
                    return None;
                }
            };
            self.retry.remove(topic);
            let notice = self.gaps.history_notice(topic, &at);
            match self
                .topics
                .follow_at(topic, &at, seen.as_ref(), notice.as_ref(), false)?
            {
                Followed::Started | Followed::Same => {}
                Followed::Behind { after } => {
                    match self.fill(topic, &at.epoch, after, at.offset + 1).await {
                        Filled::Done => {}
                        Filled::Failed => return None,
                        Filled::Epoch => continue,
                    }
                }
                Followed::Reset => self.report(topic, &at),
            }
            return Some(at);
        }
        self.retry.insert(topic.to_owned());
        None
    }

    /// Delivers the publications of `epoch` after `after` and before `before` from the
    /// bus's history.
    async fn fill(&mut self, topic: &str, epoch: &str, mut after: u64, before: u64) -> Filled {
        let Some(bounds) = self.topics.history_bounds(topic) else {
            return Filled::Failed;
        };
        let reads = &self.history.reads;
        while after + 1 < before {
            let max = (before - after - 1).min(READ_MAX);
            let read = match reads.fetch(&self.history, topic, &bounds, after, max).await {
                Ok(read) => read,
                Err(e) => {
                    tracing::debug!(topic, error = %e, "history not read; again later");
                    self.retry.insert(topic.to_owned());
                    return Filled::Failed;
                }
            };
            if read.epoch != epoch {
                return Filled::Epoch;
            }
            if after + 1 < read.first {
                // Trimmed before this node read it (it was cut off for longer than the
                // history keeps): lost here. Its subscribers are told, as for a lost
                // history, and the cache goes on from the oldest kept.
                after = self.skip_to(topic, epoch, read.first - 1);
                continue;
            }
            if read.entries.is_empty() {
                return Filled::Done;
            }
            for entry in &read.entries {
                let Some((frame, bytes)) = frame_of(topic, entry.offset, &entry.data) else {
                    // Not ours (not JSON): dropped with a log; the cache goes on past it
                    // and its subscribers are told, as for a publication trimmed unread.
                    tracing::warn!(
                        topic,
                        offset = entry.offset,
                        "a recorded publication that is not JSON; skipped"
                    );
                    after = self.skip_to(topic, epoch, entry.offset);
                    continue;
                };
                match self.topics.apply(topic, epoch, entry.offset, &frame, bytes) {
                    Applied::Delivered(_) | Applied::Duplicate => after = entry.offset,
                    _ => return Filled::Failed,
                }
                // As the receive loop does per envelope: the peers' tasks drain their
                // queues every so many (thousands read back after an outage and
                // delivered without a pause would overflow a subscriber's queue).
                tokio::task::consume_budget().await;
            }
        }
        Filled::Done
    }

    /// What the cache cannot have up to `offset` is lost here: its subscribers are told
    /// (a gap), and the cache goes on after it. Returns `offset`.
    fn skip_to(&self, topic: &str, epoch: &str, offset: u64) -> u64 {
        let at = Position {
            epoch: epoch.to_owned(),
            offset,
        };
        let notice = self.gaps.history_notice(topic, &at);
        self.topics
            .follow_at(topic, &at, None, notice.as_ref(), true);
        self.report(topic, &at);
        offset
    }

    fn report(&self, topic: &str, at: &Position) {
        self.gaps.count(&Gap {
            topic: Some(topic.to_owned()),
            origin: None,
            missed: None,
            position: Some(at.clone()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures_util::future::BoxFuture;

    /// A bus whose history reads never answer.
    struct Stalled;

    impl Backplane for Stalled {
        fn publish(&self, _: &str, _: Bytes) -> BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async { Ok(()) })
        }
        fn subscribe(&self, _: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async { Ok(()) })
        }
        fn unsubscribe(&self, _: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async { Ok(()) })
        }
        fn events(&self) -> Option<mpsc::Receiver<super::super::backplane::BusEvent>> {
            None
        }
        fn read_history<'a>(
            &'a self,
            _: &'a TopicKeys,
            _: &'a HistoryConfig,
            _: u64,
            _: usize,
        ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_every_caller_gave_up_on_leaves_no_entry_behind() {
        let (_state, state) = watch::channel(ClusterState::Up);
        let me = Arc::new(Me::new("a".into(), "p", 1));
        let (history, _inbox) = History::new(Arc::new(Stalled), me, Arc::default(), 10, state);
        let bounds = HistoryConfig::default();
        for after in 0..100 {
            let read = history.reads.read(&history, "t", "e", after, &bounds);
            let given_up = tokio::time::timeout(Duration::from_millis(10), read).await;
            assert!(given_up.is_err(), "the bus never answers");
        }
        // Each read clears what no one runs any more before it adds its own.
        assert_eq!(lock(&history.reads.inflight).len(), 1);
    }

    #[test]
    fn a_new_epoch_is_twelve_hex_digits_and_new_each_time() {
        let epochs: std::collections::HashSet<String> =
            (0..100).map(|_| super::new_epoch()).collect();
        assert_eq!(epochs.len(), 100);
        for epoch in &epochs {
            assert_eq!(epoch.len(), 12, "{epoch}");
            assert!(epoch
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
    }
}
