//! Which topics keep history, and the [`Topics`] methods that use it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, TryLockError};
use std::time::Duration;

use tokio::time::Instant;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use serde::Serialize;

use super::log::{Applied, Bus, Followed, TopicLog};
use super::Topics;
use crate::error::{Error, Result};
use crate::history::{HistoryConfig, HistoryError, Position, Published, Subscribed};
use crate::peer::Peer;
use crate::transport::Text;

/// How many times a subscribe or publish looks a topic up again when the history it
/// found was retired meanwhile (it was idle: the next one found is new).
const LOOKUPS: usize = 4;

/// How often the histories are swept: publications past their `max_age` let go of
/// (a topic trims at each publication and read, but a quiet one has neither), and the
/// histories idle past their `max_idle` forgotten. Each sweep goes over every history:
/// at most this often on a publication or an unsubscribe, and on a timer.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The topics with history.
#[derive(Default)]
pub(super) struct Histories {
    logs: DashMap<Box<str>, Arc<TopicLog>>,
    /// The history every topic keeps unless it has its own (`keep_history_for_all`).
    for_all: RwLock<Option<HistoryConfig>>,
    /// Whether any topic may keep history: until one does, publishing and subscribing
    /// pay one load for it.
    used: AtomicBool,
    /// Numbers subscriptions, so a replay knows when its subscription was replaced.
    subscriptions: AtomicU64,
    /// When histories idle past their `max_idle` are next looked for.
    next_sweep: Mutex<Option<Instant>>,
    /// Whether the timer that sweeps every [`SWEEP_EVERY`] runs.
    sweeper: AtomicBool,
}

impl Histories {
    /// Trims every history to its `max_age` and forgets the histories made by
    /// `keep_history_for_all` that are idle past their `max_idle`, at most every
    /// [`SWEEP_EVERY`].
    fn sweep(&self) {
        let now = Instant::now();
        {
            // Another caller is looking: nothing to wait for.
            let mut next = match self.next_sweep.try_lock() {
                Ok(next) => next,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => return,
            };
            match *next {
                Some(due) if now < due => return,
                Some(_) => *next = Some(now + SWEEP_EVERY),
                None => {
                    *next = Some(now + SWEEP_EVERY);
                    return;
                }
            }
        }
        self.sweep_now(now);
    }

    fn sweep_now(&self, now: Instant) {
        self.logs.retain(|_, log| !log.sweep(now));
    }

    fn for_all(&self) -> Option<HistoryConfig> {
        self.for_all
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether `topic` keeps history, or would once used.
    fn kept(&self, topic: &str) -> bool {
        self.used.load(Ordering::Acquire)
            && (self.logs.contains_key(topic) || self.for_all().is_some())
    }
}

impl Topics {
    /// Starts the timer that sweeps the histories every [`SWEEP_EVERY`], once, if there is
    /// a runtime to run it (else the first publication on a topic with history starts
    /// it). It holds the topics weakly: it ends once they are dropped.
    fn start_sweeper(&self) {
        let history = &self.inner.history;
        if history.sweeper.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if history.sweeper.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval(SWEEP_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await; // the first tick is now
            loop {
                ticks.tick().await;
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                let now = Instant::now();
                {
                    let mut next = inner
                        .history
                        .next_sweep
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    *next = Some(now + SWEEP_EVERY);
                }
                inner.history.sweep_now(now);
            }
        });
    }

    /// Keeps history for `topic`, within `config`'s bounds: its publications get
    /// offsets, and a subscriber can resume from a [`Position`]
    /// ([`subscribe_from`](Self::subscribe_from)). Called again, it changes the bounds
    /// and keeps what is kept. Off by default.
    ///
    /// Publications on a topic with history are notifications whose params are
    /// `{"offset":N,"data":PAYLOAD}` (the payload as published). Configure it before
    /// publishing; subscribers already there get the new form from then on. In a
    /// cluster, configure the same on every node.
    ///
    /// ```
    /// use jsonrpc_peer::{HistoryConfig, Topics};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> jsonrpc_peer::Result<()> {
    /// let topics = Topics::new();
    /// topics.keep_history("chat", HistoryConfig::default().max_len(500));
    /// let first = topics.publish("chat", &["hello"]).await?;
    /// let second = topics.publish("chat", &["again"]).await?;
    /// assert_eq!((first.offset, second.offset), (Some(1), Some(2)));
    /// assert_eq!(topics.position("chat").map(|p| p.offset), Some(2));
    /// # Ok(()) }
    /// ```
    pub fn keep_history(&self, topic: &str, config: HistoryConfig) {
        let history = &self.inner.history;
        history.used.store(true, Ordering::Release);
        let created = match history.logs.entry(topic.into()) {
            Entry::Occupied(log) => {
                log.get().configure(config);
                None
            }
            Entry::Vacant(slot) => {
                Some(slot.insert(Arc::new(TopicLog::new(config, false))).clone())
            }
        };
        if let Some(log) = created {
            self.adopt_subscribers(topic, &log);
        }
        self.start_sweeper();
    }

    /// Keeps history for every topic that has none of its own
    /// ([`keep_history`](Self::keep_history)), each within `config`'s bounds, from its
    /// first publication or subscription on. Called again, it changes the bounds for
    /// topics that start keeping history after that.
    ///
    /// A topic's history lasts until it has had no subscriber and no publication for
    /// `config`'s [`max_idle`](HistoryConfig::max_idle) (a day by default; looked for
    /// once a minute); a topic that a client
    /// only subscribed to, on which nothing was published, is forgotten when its last
    /// subscriber leaves (so clients naming topics cannot make it grow).
    pub fn keep_history_for_all(&self, config: HistoryConfig) {
        let history = &self.inner.history;
        *history
            .for_all
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(config);
        history.used.store(true, Ordering::Release);
        self.start_sweeper();
    }

    /// Whether `topic` keeps history (or will, at its first use, with
    /// [`keep_history_for_all`](Self::keep_history_for_all)).
    pub fn keeps_history(&self, topic: &str) -> bool {
        self.inner.history.kept(topic)
    }

    /// The epoch and newest offset of `topic`'s history, if it keeps one now. In a
    /// cluster, this node's view of the bus's history: `None` while the node does not
    /// follow the topic (it follows while it has subscribers of it), and a publication
    /// recorded elsewhere counts once it has come down to this node.
    pub fn position(&self, topic: &str) -> Option<Position> {
        let log = self.log(topic, false)?;
        if self.inner.relay.get().is_some() && !log.follows() {
            return None;
        }
        Some(log.position())
    }

    /// Subscribes `peer` to `topic`, a topic with history, from `from`: with a position,
    /// `peer` gets every publication after it, then the live ones, each once and in
    /// offset order. Resolves once the subscription is live.
    ///
    /// The answer says where live publications continue (`offset + 1`) and, given a
    /// position, whether everything after it was replayed (`recovered: true`) or nothing
    /// was, because the position is outside the history kept or of another epoch
    /// (`recovered: false`: the subscriber should fetch its state afresh). Subscribing
    /// again starts over from the position given; what was queued stays queued.
    ///
    /// The replay waits for room in `peer`'s outgoing queue, so a long one does not
    /// trip the slow-peer close; live publications meanwhile wait in the history. A
    /// subscriber that reads slower than publications come falls out of the history
    /// (its oldest unread one is trimmed) and gets its [`SlowPeer`](crate::SlowPeer)
    /// policy: closed with 1008 by default, its client then resumes from its last
    /// offset. In a cluster, a history lost (Redis back empty) after part of the replay
    /// was queued closes `peer` with 1013 once that part has gone out: an answer of
    /// `recovered: false` would say nothing was replayed. Its client resumes from the
    /// last it got, and hears `recovered: false` then.
    ///
    /// # Errors
    ///
    /// [`HistoryError::NotKept`] (as [`Error::History`]) if `topic` keeps no history;
    /// [`Error::Closed`] if the connection ends (or is closed for falling behind, or for
    /// the history's loss) during the replay. In a cluster, the errors of
    /// [`subscribe_ready`](Self::subscribe_ready). After an error (or with the future
    /// dropped before it is done) `peer` is not subscribed to `topic`, unless it was
    /// before the call: then it is live again, and the next publication continues what
    /// it was sent (a jump in offsets says what it missed).
    pub async fn subscribe_from(
        &self,
        peer: &Peer,
        topic: &str,
        from: Option<Position>,
    ) -> Result<Subscribed> {
        let relay = self.inner.relay.get();
        // Refused (or the call dropped) after this call added the peer to the topic: it
        // was told it is not subscribed, so it is not counted as a subscriber either.
        let mut joined = Joined {
            topics: self,
            peer,
            topic,
            added: false,
            replay: None,
        };
        for _ in 0..LOOKUPS {
            let Some(log) = self.log(topic, true) else {
                break;
            };
            joined.added |= self.join(peer, topic);
            if let Some(relay) = relay {
                // In a cluster: this node hears the topic, and its cache follows the bus.
                // Asked of the cluster even when the cache follows now: this node may have
                // left the channel and be back on it, its cache not told yet (what it
                // missed meanwhile then reaches no one).
                relay.ready(topic).await?;
                relay.follow(topic).await?;
            }
            let subscription = self
                .inner
                .history
                .subscriptions
                .fetch_add(1, Ordering::Relaxed);
            let bus = relay.map(|relay| Bus {
                relay: relay.as_ref(),
                topic,
            });
            joined.replay = Some((log.clone(), subscription));
            if let Some(subscribed) = log.subscribe(peer, from.clone(), subscription, bus).await {
                if peer.is_ending() {
                    // Its `on_close` ran before it was added: nothing else will remove
                    // it (and a history made for it alone goes, as on a leave).
                    self.leave_history(topic, peer.id(), !self.inner.topics.contains_key(topic));
                }
                if subscribed.is_ok() {
                    joined.added = false;
                    joined.replay = None;
                }
                return subscribed;
            }
            joined.replay = None;
        }
        Err(Error::History(HistoryError::NotKept {
            topic: topic.to_owned(),
        }))
    }

    /// For [`subscribe`](Self::subscribe): a peer just added to `topic` goes live on its
    /// history, if it keeps one.
    pub(super) fn subscribe_history(&self, peer: &Peer, topic: &str) {
        for _ in 0..LOOKUPS {
            let Some(log) = self.log(topic, true) else {
                return;
            };
            if log.subscribe_live(peer).is_some() {
                if peer.is_ending() {
                    // Its `on_close` ran before it was added: as on a leave (a history
                    // made for it alone goes).
                    self.leave_history(topic, peer.id(), !self.inner.topics.contains_key(topic));
                }
                return;
            }
        }
    }

    /// For [`publish`](Self::publish): records the publication and queues it for the
    /// live subscribers, if `topic` keeps history; `None` if it does not. In a cluster
    /// the bus records it and delivers it (here too, in offset order).
    pub(super) async fn publish_recorded<P: Serialize + ?Sized>(
        &self,
        topic: &str,
        method: &str,
        params: &P,
    ) -> Result<Option<Published>> {
        if !self.inner.history.used.load(Ordering::Acquire) {
            return Ok(None);
        }
        self.start_sweeper();
        let mut data = None;
        for _ in 0..LOOKUPS {
            let Some(log) = self.log(topic, true) else {
                return Ok(None);
            };
            let data = match &data {
                Some(data) => data,
                None => data.insert(serde_json::value::to_raw_value(params)?),
            };
            if let Some(relay) = self.inner.relay.get() {
                if method != topic {
                    // Every node makes the notification from the topic and the data the
                    // bus recorded: the method is the topic's name.
                    return Err(Error::History(HistoryError::OtherName {
                        topic: topic.to_owned(),
                        method: method.to_owned(),
                    }));
                }
                let bounds = log.config();
                let bytes = data.get().len();
                if bytes > bounds.max_bytes {
                    return Err(Error::History(HistoryError::TooLarge {
                        topic: topic.to_owned(),
                        bytes,
                        max_bytes: bounds.max_bytes,
                    }));
                }
                self.inner.history.sweep();
                return match relay.record(topic, data, &bounds).await {
                    Ok(at) => Ok(Some(Published {
                        delivered: log.live_count(),
                        offset: Some(at.offset),
                    })),
                    Err(e) => {
                        self.inner.refused.fetch_add(1, Ordering::Relaxed);
                        Err(e)
                    }
                };
            }
            if let Some((offset, delivered)) = log.publish(topic, method, data)? {
                self.inner.history.sweep();
                return Ok(Some(Published {
                    delivered,
                    offset: Some(offset),
                }));
            }
        }
        // Retired each time it was found: only an idle log is, so this does not happen.
        Err(Error::History(HistoryError::NotKept {
            topic: topic.to_owned(),
        }))
    }

    /// For the cluster: a publication on `topic` that came down from the bus at
    /// `offset` of `epoch` (`frame` its notification, `bytes` its data's size).
    pub(crate) fn apply(
        &self,
        topic: &str,
        epoch: &str,
        offset: u64,
        frame: &Text,
        bytes: usize,
    ) -> Applied {
        match self.log(topic, false) {
            Some(log) => log.apply(epoch, offset, frame, bytes),
            None => Applied::NotFollowing,
        }
    }

    /// For the cluster: `topic`'s cache follows the bus, which is at `at` (`gap`, the
    /// notice for the live subscribers should the history be lost; `restart`: it is,
    /// start over at `at`); `None` if the topic keeps no history, or has no subscriber
    /// here and no history yet.
    pub(crate) fn follow_at(
        &self,
        topic: &str,
        at: &Position,
        seen: Option<&Position>,
        gap: Option<&Text>,
        restart: bool,
    ) -> Option<Followed> {
        // A history is made here only for a topic with subscribers: the look at the bus
        // that calls this may end after the last one left (its subscribe given up), and
        // no one would leave a history made then, kept for `max_idle` (clients naming
        // topics would make them add up). One made as the last left goes again.
        let log = self.log(topic, self.inner.topics.contains_key(topic))?;
        let followed = log.follow(at, seen, gap, restart);
        if !self.inner.topics.contains_key(topic) {
            self.inner
                .history
                .logs
                .remove_if(topic, |_, log| log.retire_if_idle());
        }
        Some(followed)
    }

    /// For the cluster: this node no longer hears `topic` on the bus.
    pub(crate) fn unfollow(&self, topic: &str) {
        if let Some(log) = self.log(topic, false) {
            log.unfollow();
        }
    }

    /// Whether `topic`'s cache follows the bus; `None` without history.
    pub(crate) fn history_follows(&self, topic: &str) -> Option<bool> {
        self.log(topic, false).map(|log| log.follows())
    }

    /// For the cluster: the topics whose cache follows the bus.
    pub(crate) fn followed(&self) -> Vec<String> {
        self.inner
            .history
            .logs
            .iter()
            .filter(|e| e.value().follows())
            .map(|e| e.key().to_string())
            .collect()
    }

    /// `topic`'s history bounds, if it keeps (or would keep) history.
    pub(crate) fn history_bounds(&self, topic: &str) -> Option<HistoryConfig> {
        match self.log(topic, false) {
            Some(log) => Some(log.config()),
            None if self.inner.history.used.load(Ordering::Acquire) => self.inner.history.for_all(),
            None => None,
        }
    }

    /// For unsubscribing: `id` leaves `topic`'s history; and, when `topic` has no
    /// subscribers left, a history made for it only because a client subscribed goes.
    pub(super) fn leave_history(&self, topic: &str, id: u64, topic_empty: bool) {
        let history = &self.inner.history;
        if !history.used.load(Ordering::Acquire) {
            return;
        }
        if let Some(log) = self.log(topic, false) {
            log.remove(id);
        }
        if topic_empty {
            history.logs.remove_if(topic, |_, log| log.retire_if_idle());
        }
        history.sweep();
    }

    /// `topic`'s history; made now if `create` and every topic keeps history.
    fn log(&self, topic: &str, create: bool) -> Option<Arc<TopicLog>> {
        let history = &self.inner.history;
        if !history.used.load(Ordering::Acquire) {
            return None;
        }
        if let Some(log) = history.logs.get(topic) {
            return Some(log.clone());
        }
        if !create {
            return None;
        }
        let config = history.for_all()?;
        let (log, created) = match history.logs.entry(topic.into()) {
            Entry::Occupied(log) => (log.get().clone(), false),
            Entry::Vacant(slot) => (
                slot.insert(Arc::new(TopicLog::new(config, true))).clone(),
                true,
            ),
        };
        if created {
            self.adopt_subscribers(topic, &log);
        }
        Some(log)
    }

    /// A history made for a topic that already has subscribers: they go live on it.
    fn adopt_subscribers(&self, topic: &str, log: &TopicLog) {
        let peers: Vec<Peer> = self
            .inner
            .topics
            .get(topic)
            .map(|subscribers| subscribers.peers())
            .unwrap_or_default();
        for peer in peers {
            log.subscribe_live(&peer);
            // It may have left between the snapshot and now.
            let still = self
                .inner
                .by_peer
                .get(&peer.id())
                .is_some_and(|topics| topics.contains(topic));
            if !still || peer.is_ending() {
                log.remove(peer.id());
            }
        }
    }
}

/// [`Topics::subscribe_from`]'s undo, for an error answer or the call's future dropped
/// mid-way: a replay cut short is forgotten, a peer subscribed before the call is live
/// again, and one this call `added` is taken off `topic`.
struct Joined<'a> {
    topics: &'a Topics,
    peer: &'a Peer,
    topic: &'a str,
    added: bool,
    /// The replay under way (its log and subscription number), until it ends well.
    replay: Option<(Arc<TopicLog>, u64)>,
}

impl Drop for Joined<'_> {
    fn drop(&mut self) {
        if let Some((log, subscription)) = self.replay.take() {
            if !log.cut_short(self.peer, subscription, !self.added) {
                return; // live again, or a later subscription of the peer goes on
            }
        }
        if self.added {
            self.topics.unsubscribe(self.peer, self.topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a topic's history holds in memory now, without trimming it first.
    fn held(topics: &Topics, topic: &str) -> usize {
        topics.log(topic, false).map_or(0, |log| log.held())
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_topic_lets_go_of_publications_past_max_age() {
        let max_age = Duration::from_secs(10);
        let topics = Topics::new();
        topics.keep_history("quiet", HistoryConfig::default().max_age(max_age));
        for i in 0..3 {
            topics.publish("quiet", &[i]).await.unwrap();
        }
        assert_eq!(held(&topics, "quiet"), 3);
        // Then nothing: no publication, no subscriber, no read, on any topic. (Paused
        // time: the sleep moves the clock, every timer due meanwhile fires in order.)
        tokio::time::sleep(max_age + 2 * SWEEP_EVERY).await;
        assert_eq!(
            held(&topics, "quiet"),
            0,
            "publications past max_age are still held in memory"
        );
        // Its position is kept: a resume from it continues.
        assert_eq!(topics.position("quiet").map(|p| p.offset), Some(3));
    }
}
