//! One topic with history: publications take offsets in the order they are recorded,
//! and reach the live subscribers in that order, under the topic's lock; a subscriber
//! that resumes reads the history with back-pressure, then joins the live ones under
//! the same lock once nothing is left to read. Every publication thus reaches it once,
//! in offset order, with no window where a live one overtakes a replayed one, and
//! without a buffer of its own: what it has not read yet is in the history.
//!
//! A subscriber that falls out of the history while it catches up (publications went
//! faster than it reads, and the oldest it needs was trimmed) gets its
//! [`SlowPeer`](crate::SlowPeer) policy, as one whose queue overflows while live does:
//! closed with 1008 by default; with `SlowPeer::Drop` it skips to the oldest kept (the
//! jump in offsets shows it).
//!
//! In a cluster the history is the bus's, and the store is this node's cache of it.
//! Publications do not take their offset here: the bus gives it, and they come down to
//! [`TopicLog::apply`] in offset order (the cluster fills any hole from the bus first),
//! where they go into the cache and to the live subscribers under the same lock, as a
//! local publication does on one node. [`TopicLog::follow`] sets the cache from the
//! bus's position (a new epoch there: the live subscribers get the gap notice, in
//! order). A resume reads the cache; what is older than the cache it reads from the
//! bus (and keeps in the cache for the next one); a position newer than the cache (the
//! client saw it on another node, and it is still on its way here) waits for the cache
//! to get there.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::store::{MemoryStore, Store};
use crate::error::{Error, Result};
use crate::history::{HistoryConfig, HistoryError, Position, Subscribed};
use crate::message;
use crate::peer::Peer;
use crate::relay::{Relay, Replay};
use crate::transport::Text;
use rustc_hash::FxHashMap;

/// Publications a catching-up subscriber reads from the history per turn of the lock.
const REPLAY_BATCH: usize = 64;

/// The close reason of a subscriber that fell out of the history while catching up.
const FELL_BEHIND: &str = "fell behind the topic's history";

/// How long a resume from a position newer than this node's cache waits for the cache
/// to get there (the bus said it has it: it is on its way).
const AHEAD_WAIT: Duration = Duration::from_secs(5);

/// A notification's params on a topic with history: `{"offset":N,"data":PAYLOAD}`.
#[derive(Serialize)]
struct Envelope<'a> {
    offset: u64,
    data: &'a RawValue,
}

/// The notification of a publication at `offset` on `topic`, as every subscriber gets
/// it: `{"jsonrpc":"2.0","method":TOPIC,"params":{"offset":N,"data":DATA}}`.
pub(crate) fn frame(topic: &str, offset: u64, data: &RawValue) -> Result<Text> {
    Ok(Text::from(message::request(
        topic,
        &Envelope { offset, data },
        None,
    )?))
}

/// A topic's history, and its subscribers that have caught up with it.
pub(crate) struct TopicLog {
    state: Mutex<State>,
    /// Woken whenever the cache (in a cluster) moves: a resume ahead of it waits.
    moved: Notify,
}

/// What [`TopicLog::apply`] did with a publication from the bus.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Kept and queued for this many live subscribers.
    Delivered(usize),
    /// Already had it.
    Duplicate,
    /// The ones after `after` and before it are missing: fill them in first.
    Missing { after: u64 },
    /// Of another epoch than the cache's.
    OtherEpoch,
    /// The cache does not follow the bus (no subscriber asked it to, or the node
    /// stopped listening).
    NotFollowing,
}

/// What [`TopicLog::follow`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Followed {
    /// It did not follow: it does now, from the position.
    Started,
    /// It is there already.
    Same,
    /// Same epoch, further on: the ones after `after` are to be applied.
    Behind { after: u64 },
    /// The bus lost the history the cache had (another epoch, or offsets that went
    /// back): the cache starts over at the position, the live subscribers were sent
    /// the gap notice.
    Reset,
}

/// Where a resume reads next, decided under the lock.
enum Next {
    /// A batch of the cache is in hand.
    Batch,
    /// Nothing left: wait for room in the peer's queue.
    Room,
    /// Older than the cache: read the bus (after, before).
    Bus { before: u64 },
    /// Newer than the cache: wait for it.
    Ahead,
}

/// A cluster's bus, as a resume on a topic reaches it.
#[derive(Clone, Copy)]
pub(crate) struct Bus<'a> {
    pub(crate) relay: &'a dyn Relay,
    pub(crate) topic: &'a str,
}

struct State {
    store: Box<dyn Store>,
    /// Subscribers at the live edge: each publication is queued for them as recorded.
    live: FxHashMap<u64, Peer>,
    /// Subscribers reading the history, by peer id, with the subscription's number: a
    /// replay stops when its subscription is no longer the peer's current one.
    catching: FxHashMap<u64, u64>,
    /// Made for a topic by `keep_history_for_all` (not `keep_history`): removed again
    /// when nothing was ever published and no one is subscribed.
    implicit: bool,
    /// Removed from the topics' map: whoever finds it so looks the topic up again.
    retired: bool,
    /// The last publication recorded or applied, or the last subscriber gone (for
    /// `max_idle`).
    touched: Instant,
    /// In a cluster: the store is a cache following the bus (its epoch and newest
    /// offset are the bus's; what comes down is applied in order).
    follows: bool,
}

/// Where a subscription starts: what [`TopicLog::subscribe`] decided under the lock.
enum Start {
    /// Live from the answer's offset on.
    Live(Subscribed),
    /// Replay after this offset first.
    CatchUp { after: u64, epoch: String },
}

impl TopicLog {
    pub(crate) fn new(config: HistoryConfig, implicit: bool) -> Self {
        TopicLog {
            state: Mutex::new(State {
                store: Box::new(MemoryStore::new(config)),
                live: FxHashMap::default(),
                catching: FxHashMap::default(),
                implicit,
                retired: false,
                touched: Instant::now(),
                follows: false,
            }),
            moved: Notify::new(),
        }
    }

    /// The bounds.
    pub(crate) fn config(&self) -> HistoryConfig {
        self.state().store.config().clone()
    }

    /// How many subscribers are live.
    pub(crate) fn live_count(&self) -> usize {
        self.state().live.len()
    }

    /// Whether the cache follows the bus (in a cluster).
    pub(crate) fn follows(&self) -> bool {
        self.state().follows
    }

    /// A publication from the bus at `offset` of `epoch`, `frame` its notification and
    /// `bytes` its data's size: kept and queued for the live subscribers if it is the
    /// next one; else what is to be done first.
    pub(crate) fn apply(&self, epoch: &str, offset: u64, frame: &Text, bytes: usize) -> Applied {
        let mut state = self.state();
        if !state.follows {
            return Applied::NotFollowing;
        }
        if state.store.epoch() != epoch {
            return Applied::OtherEpoch;
        }
        let last = state.store.last();
        if offset <= last {
            return Applied::Duplicate;
        }
        if offset > last + 1 {
            return Applied::Missing { after: last };
        }
        let now = Instant::now();
        state.touched = now;
        // Over this node's `max_bytes` alone (configured smaller than the publisher's):
        // delivered, not kept; the cache moves on past it.
        if state.store.append(frame.clone(), bytes, now).is_err() {
            let epoch = state.store.epoch().to_owned();
            state.store.reset(epoch, offset);
        }
        let delivered = state
            .live
            .values()
            .filter(|peer| peer.push(frame.clone()))
            .count();
        drop(state);
        self.moved.notify_waiters();
        Applied::Delivered(delivered)
    }

    /// Makes the cache follow the bus, which is at `at`. Another epoch than the cache's
    /// (or offsets that went back, or `restart`: what the cache lacks is gone from the
    /// bus) while it followed: the history it had is lost here, the cache starts over
    /// at `at`, and `gap` (the gap notice, if any) is queued for the live subscribers,
    /// after everything they had. `seen` is the cache's position when `at` was asked
    /// for: a cache ahead of `at` that was not ahead then had publications delivered
    /// while the bus was read (the read is older than the cache), which is no loss.
    pub(crate) fn follow(
        &self,
        at: &Position,
        seen: Option<&Position>,
        gap: Option<&Text>,
        restart: bool,
    ) -> Followed {
        let mut state = self.state();
        let (epoch, last) = (state.store.epoch() == at.epoch, state.store.last());
        let read_while_delivering =
            seen.is_some_and(|seen| seen.epoch == at.epoch && seen.offset <= at.offset);
        let followed = if !state.follows {
            state.store.reset(at.epoch.clone(), at.offset);
            state.follows = true;
            Followed::Started
        } else if !restart
            && epoch
            && (last == at.offset || last > at.offset && read_while_delivering)
        {
            Followed::Same
        } else if !restart && epoch && last < at.offset {
            Followed::Behind { after: last }
        } else {
            // Offsets that start over (another epoch, or gone back) look like ones the
            // live subscribers had: without a gap notice to say they are new, those
            // subscribers are closed, as a replay the loss cut short is, and resume.
            let over = !epoch || last > at.offset;
            state.store.reset(at.epoch.clone(), at.offset);
            match gap {
                Some(gap) => {
                    for peer in state.live.values() {
                        peer.push(gap.clone());
                    }
                }
                None if over => {
                    for (_, peer) in state.live.drain() {
                        peer.ask_close(1013, HISTORY_RESET);
                    }
                }
                None => {}
            }
            Followed::Reset
        };
        drop(state);
        self.moved.notify_waiters();
        followed
    }

    /// The cache no longer follows the bus (this node stopped listening to the topic).
    pub(crate) fn unfollow(&self) {
        self.state().follows = false;
        self.moved.notify_waiters();
    }

    /// The state. No code panics while holding it, but a poisoned lock is still usable.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// New bounds (the history is trimmed to them at once); the topic is kept now even
    /// if it was made implicitly.
    pub(crate) fn configure(&self, config: HistoryConfig) {
        let mut state = self.state();
        state.store.configure(config, Instant::now());
        state.implicit = false;
    }

    /// Records a publication of `data` (a notification of `method`) and queues it for the
    /// live subscribers, returning its offset and how many it was queued for; `None` if
    /// this log was retired.
    pub(crate) fn publish(
        &self,
        topic: &str,
        method: &str,
        data: &RawValue,
    ) -> Result<Option<(u64, usize)>> {
        let now = Instant::now();
        let mut state = self.state();
        if state.retired {
            return Ok(None);
        }
        state.touched = now;
        let offset = state.store.last() + 1;
        let envelope = Envelope { offset, data };
        let frame = Text::from(message::request(method, &envelope, None)?);
        let bytes = data.get().len();
        state
            .store
            .append(frame.clone(), bytes, now)
            .map_err(|e| HistoryError::TooLarge {
                topic: topic.to_owned(),
                bytes,
                max_bytes: e.max_bytes,
            })?;
        // Under the lock: concurrent publishers reach every subscriber in one order.
        let delivered = state
            .live
            .values()
            .filter(|peer| peer.push(frame.clone()))
            .count();
        Ok(Some((offset, delivered)))
    }

    /// Adds `peer` to the live subscribers at once ("from now"); `None` if retired.
    pub(crate) fn subscribe_live(&self, peer: &Peer) -> Option<Subscribed> {
        let mut state = self.state();
        if state.retired {
            return None;
        }
        state.catching.remove(&peer.id());
        state.live.insert(peer.id(), peer.clone());
        Some(Subscribed {
            epoch: state.store.epoch().to_owned(),
            offset: state.store.last(),
            recovered: None,
        })
    }

    /// Subscribes `peer` from `from` (see [`Topics::subscribe_from`](crate::Topics::subscribe_from)):
    /// replays what it missed with back-pressure, then makes it live. `subscription`
    /// numbers this subscription (a later one of the same peer stops this replay).
    /// `None` if the log was retired before anything happened.
    pub(crate) async fn subscribe(
        &self,
        peer: &Peer,
        from: Option<Position>,
        subscription: u64,
        bus: Option<Bus<'_>>,
    ) -> Option<Result<Subscribed>> {
        let id = peer.id();
        let start = {
            let mut state = self.state();
            if state.retired {
                return None;
            }
            let now = Instant::now();
            let epoch = state.store.epoch().to_owned();
            let last = state.store.last();
            let live = |recovered| {
                Start::Live(Subscribed {
                    epoch: epoch.clone(),
                    offset: last,
                    recovered,
                })
            };
            // In a cluster, a position outside the cache may still be on the bus (older)
            // or on its way here (newer): the catch-up asks the bus.
            let cached = |state: &mut State, offset| {
                state.store.continues(offset, now) || (bus.is_some() && state.follows)
            };
            let start = match from {
                None => live(None),
                Some(from) if from.epoch != epoch || !cached(&mut state, from.offset) => {
                    live(Some(false))
                }
                Some(from) if from.offset == last => live(Some(true)),
                Some(from) => Start::CatchUp {
                    after: from.offset,
                    epoch: epoch.clone(),
                },
            };
            match &start {
                Start::Live(_) => {
                    state.catching.remove(&id);
                    state.live.insert(id, peer.clone());
                }
                Start::CatchUp { .. } => {
                    state.live.remove(&id);
                    state.catching.insert(id, subscription);
                }
            }
            start
        };
        Some(match start {
            Start::Live(subscribed) => Ok(subscribed),
            Start::CatchUp { after, epoch } => {
                let replayed = self.catch_up(peer, after, epoch, subscription, bus).await;
                if replayed.is_err() {
                    self.end_catch_up(id, subscription);
                }
                replayed
            }
        })
    }

    /// Queues the history after `after` for `peer`, waiting for room, until nothing is
    /// left to read; then, under the lock, makes it live. In a cluster (`bus`), what
    /// is older than the cache is read from the bus, and a position newer than the
    /// cache waits for the cache to get there.
    async fn catch_up(
        &self,
        peer: &Peer,
        mut after: u64,
        epoch: String,
        subscription: u64,
        bus: Option<Bus<'_>>,
    ) -> Result<Subscribed> {
        let id = peer.id();
        let mut batch = Vec::with_capacity(REPLAY_BATCH);
        // Nothing queued yet: a position the bus no longer has is `recovered: false`.
        let mut replayed = false;
        let mut ahead_checked = false;
        loop {
            // Registered before the cache is looked at: a move in between still wakes.
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            let next = {
                let mut state = self.state();
                if state.catching.get(&id) != Some(&subscription) {
                    // Unsubscribed (or subscribed again) meanwhile: what was queued is
                    // what this subscription got.
                    return Ok(Subscribed {
                        epoch,
                        offset: after,
                        recovered: Some(true),
                    });
                }
                if state.store.epoch() != epoch {
                    if replayed {
                        // Part of the lost epoch is queued already, and `recovered:
                        // false` says nothing was: close, and the client resumes from
                        // what it has.
                        state.catching.remove(&id);
                        return Err(history_lost(peer));
                    }
                    // The history itself was lost meanwhile (a store kept elsewhere came
                    // back empty): live from its newest, and the answer says so.
                    return Ok(Self::go_live(&mut state, peer, Some(false)));
                }
                let now = Instant::now();
                if state.store.read_after(after, REPLAY_BATCH, now, &mut batch) {
                    if batch.is_empty() {
                        // Nothing left to read. Live once the queue has room for what
                        // comes next: a replay that just filled it must not turn into
                        // the slow-peer close at the first live publication.
                        if peer.queue_half_empty() {
                            state.catching.remove(&id);
                            state.live.insert(id, peer.clone());
                            return Ok(Subscribed {
                                epoch,
                                offset: after,
                                recovered: Some(true),
                            });
                        }
                        Next::Room
                    } else {
                        Next::Batch
                    }
                } else if bus.is_some() && state.follows && after < state.store.last() {
                    Next::Bus {
                        before: state.store.first(now),
                    }
                } else if bus.is_some() && state.follows {
                    Next::Ahead
                } else {
                    // The oldest it needs is gone: it read slower than publications came.
                    // (Asking for the close under the lock is fine: it only sets a flag.)
                    if peer.fell_behind(FELL_BEHIND) {
                        state.catching.remove(&id);
                        return Err(fell_behind());
                    }
                    // SlowPeer::Drop: on from the oldest kept; the offsets show the jump.
                    after = state.store.first(now).saturating_sub(1);
                    continue;
                }
            };
            match (next, bus) {
                (Next::Batch, _) => {
                    for (offset, frame) in batch.drain(..) {
                        peer.push_waiting(frame).await?;
                        crate::metrics::topic_replayed();
                        after = offset;
                    }
                    replayed = true;
                }
                (Next::Room, _) => peer.wait_queue_half_empty().await?,
                (Next::Bus { before }, Some(bus)) => {
                    let config = self.config();
                    let read = bus
                        .relay
                        .read_history(bus.topic, &epoch, after, &config)
                        .await?;
                    let (kept, through) = match read {
                        // From `after + 1` on (the bus said so, or it was gone), with the
                        // entries that are no publication left out.
                        Replay::Kept { kept, through } if through > after => (kept, through),
                        Replay::Kept { .. } | Replay::Gone if replayed => {
                            // Trimmed on the bus while it read: it fell behind.
                            if peer.fell_behind(FELL_BEHIND) {
                                self.end_catch_up(id, subscription);
                                return Err(fell_behind());
                            }
                            after = before.saturating_sub(1);
                            continue;
                        }
                        // The history was lost after part of it was queued: as above.
                        Replay::Epoch if replayed => {
                            self.end_catch_up(id, subscription);
                            return Err(history_lost(peer));
                        }
                        // Not on the bus any more, or its history was lost: nothing is
                        // replayed, and the subscription goes live.
                        Replay::Kept { .. } | Replay::Gone | Replay::Epoch => {
                            return Ok(self.live_now(peer, subscription, Some(false)));
                        }
                    };
                    {
                        let mut state = self.state();
                        if state.store.epoch() == epoch {
                            state.store.prepend(&kept, Instant::now());
                        }
                    }
                    for one in kept.iter() {
                        peer.push_waiting(one.frame.clone()).await?;
                        crate::metrics::topic_replayed();
                    }
                    after = through;
                    replayed = true;
                }
                (Next::Ahead, Some(bus)) => {
                    if !ahead_checked {
                        // A position the bus has not given (or another epoch's) is not
                        // one to wait for.
                        let config = self.config();
                        let at = bus.relay.history_position(bus.topic, &config).await?;
                        if at.epoch != epoch && replayed {
                            self.end_catch_up(id, subscription);
                            return Err(history_lost(peer));
                        }
                        if at.epoch != epoch || at.offset < after {
                            return Ok(self.live_now(peer, subscription, Some(false)));
                        }
                        ahead_checked = true;
                        // The bus has it. On its way here, or lost by this node's link:
                        // then only the next publication would bring it.
                        bus.relay.look(bus.topic).await;
                    }
                    if tokio::time::timeout(AHEAD_WAIT, moved).await.is_err() {
                        self.end_catch_up(id, subscription);
                        return Err(Error::timeout(None, AHEAD_WAIT));
                    }
                }
                // Bus and Ahead come only with a bus.
                (Next::Bus { .. } | Next::Ahead, None) => {}
            }
        }
    }

    /// Makes `peer` live now (unless a later subscription replaced this one), with the
    /// cache's position as the answer.
    fn live_now(&self, peer: &Peer, subscription: u64, recovered: Option<bool>) -> Subscribed {
        let mut state = self.state();
        if state.catching.get(&peer.id()) != Some(&subscription) {
            return Subscribed {
                epoch: state.store.epoch().to_owned(),
                offset: state.store.last(),
                recovered,
            };
        }
        Self::go_live(&mut state, peer, recovered)
    }

    fn go_live(state: &mut State, peer: &Peer, recovered: Option<bool>) -> Subscribed {
        state.catching.remove(&peer.id());
        state.live.insert(peer.id(), peer.clone());
        Subscribed {
            epoch: state.store.epoch().to_owned(),
            offset: state.store.last(),
            recovered,
        }
    }

    /// A subscription whose call failed or was dropped before it was live: its catch-up
    /// is forgotten (unless a later subscription replaced it), and a peer subscribed
    /// before the call (`was_subscribed`) is live again, unless its connection is
    /// ending. Returns whether the peer is then neither live nor catching up here.
    pub(crate) fn cut_short(&self, peer: &Peer, subscription: u64, was_subscribed: bool) -> bool {
        let id = peer.id();
        let mut state = self.state();
        if state.catching.get(&id) == Some(&subscription) {
            state.catching.remove(&id);
        }
        if state.live.contains_key(&id) || state.catching.contains_key(&id) {
            return false;
        }
        if was_subscribed && !peer.is_ending() && !state.retired {
            state.live.insert(id, peer.clone());
            return false;
        }
        true
    }

    /// Forgets a failed catch-up, unless a later subscription replaced it.
    fn end_catch_up(&self, id: u64, subscription: u64) {
        let mut state = self.state();
        if state.catching.get(&id) == Some(&subscription) {
            state.catching.remove(&id);
        }
    }

    /// Removes the subscriber `id` (live or catching up).
    pub(crate) fn remove(&self, id: u64) {
        let mut state = self.state();
        let was_in = state.live.remove(&id).is_some() | state.catching.remove(&id).is_some();
        if was_in {
            state.touched = Instant::now();
        }
    }

    /// Trims what is past the bounds by `now` (a quiet topic's publications past
    /// `max_age`), then retires the log if it is stale ([`retire_if_stale`](Self::retire_if_stale)).
    pub(crate) fn sweep(&self, now: Instant) -> bool {
        self.state().store.first(now);
        self.retire_if_stale(now)
    }

    /// Retires the log if it was made implicitly and has had no subscriber and no
    /// publication for its `max_idle` by `now` (in a cluster: and does not follow the
    /// bus, which a node does while it has subscribers).
    pub(crate) fn retire_if_stale(&self, now: Instant) -> bool {
        let mut state = self.state();
        let stale = state.implicit
            && !state.follows
            && state.live.is_empty()
            && state.catching.is_empty()
            && now.saturating_duration_since(state.touched) >= state.store.config().max_idle;
        if stale {
            state.retired = true;
        }
        stale
    }

    /// Retires the log if it was made implicitly, nothing was published on it and no
    /// one is subscribed: it holds nothing that a subscriber could miss.
    pub(crate) fn retire_if_idle(&self) -> bool {
        let mut state = self.state();
        let idle = state.implicit
            && state.store.last() == 0
            && state.live.is_empty()
            && state.catching.is_empty();
        if idle {
            state.retired = true;
        }
        idle
    }

    /// How many publications the store holds now, not trimmed first.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.state().store.held()
    }

    /// The epoch and newest offset (in a cluster, of this node's cache of the bus's).
    pub(crate) fn position(&self) -> Position {
        let state = self.state();
        Position {
            epoch: state.store.epoch().to_owned(),
            offset: state.store.last(),
        }
    }
}

/// Why a subscriber is closed when the history is lost during its replay.
const HISTORY_LOST: &str = "the topic's history was lost during the replay";

/// Why a live subscriber is closed when the history is lost and no gap notice tells it.
const HISTORY_RESET: &str = "the topic's history was lost";

/// Closes a subscriber whose replay the loss of the history cut short, with 1013 (try
/// again later) once what was queued has gone out: reconnected, it resumes from the
/// last publication it got, and its subscribe is answered `recovered: false`.
fn history_lost(peer: &Peer) -> Error {
    peer.ask_close(1013, HISTORY_LOST);
    Error::Closed(crate::CloseReason::Local {
        code: 1013,
        reason: HISTORY_LOST.into(),
    })
}

/// The error of a subscriber closed for falling behind the history.
fn fell_behind() -> Error {
    Error::Closed(crate::CloseReason::Local {
        code: 1008,
        reason: FELL_BEHIND.into(),
    })
}
