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

use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde_json::value::RawValue;
use tokio::time::Instant;

use super::store::{MemoryStore, Store};
use crate::error::{Error, Result};
use crate::history::{HistoryConfig, HistoryError, Position, Subscribed};
use crate::message;
use crate::peer::Peer;
use crate::transport::Text;
use rustc_hash::FxHashMap;

/// Publications a catching-up subscriber reads from the history per turn of the lock.
const REPLAY_BATCH: usize = 64;

/// The close reason of a subscriber that fell out of the history while catching up.
const FELL_BEHIND: &str = "fell behind the topic's history";

/// A notification's params on a topic with history: `{"offset":N,"data":PAYLOAD}`.
#[derive(Serialize)]
struct Envelope<'a> {
    offset: u64,
    data: &'a RawValue,
}

/// A topic's history, and its subscribers that have caught up with it.
pub(crate) struct TopicLog {
    state: Mutex<State>,
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
            }),
        }
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
            let start = match from {
                None => live(None),
                Some(from) if from.epoch != epoch || !state.store.continues(from.offset, now) => {
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
                let replayed = self.catch_up(peer, after, epoch, subscription).await;
                if replayed.is_err() {
                    self.end_catch_up(id, subscription);
                }
                replayed
            }
        })
    }

    /// Queues the history after `after` for `peer`, waiting for room, until nothing is
    /// left to read; then, under the lock, makes it live.
    async fn catch_up(
        &self,
        peer: &Peer,
        mut after: u64,
        epoch: String,
        subscription: u64,
    ) -> Result<Subscribed> {
        let id = peer.id();
        let mut batch = Vec::with_capacity(REPLAY_BATCH);
        loop {
            {
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
                    // The history itself was lost meanwhile (a store kept elsewhere came
                    // back empty): live from its newest, and the answer says so.
                    state.catching.remove(&id);
                    state.live.insert(id, peer.clone());
                    return Ok(Subscribed {
                        epoch: state.store.epoch().to_owned(),
                        offset: state.store.last(),
                        recovered: Some(false),
                    });
                }
                let now = Instant::now();
                if !state.store.read_after(after, REPLAY_BATCH, now, &mut batch) {
                    // The oldest it needs is gone: it read slower than publications came.
                    // (Asking for the close under the lock is fine: it only sets a flag.)
                    if peer.fell_behind(FELL_BEHIND) {
                        state.catching.remove(&id);
                        return Err(Error::Closed(crate::CloseReason::Local {
                            code: 1008,
                            reason: FELL_BEHIND.into(),
                        }));
                    }
                    // SlowPeer::Drop: on from the oldest kept; the offsets show the jump.
                    after = state.store.first(now).saturating_sub(1);
                    continue;
                }
                if batch.is_empty() {
                    // Nothing left to read. Live once the queue has room for what comes
                    // next: a replay that just filled it must not turn into the
                    // slow-peer close at the first live publication.
                    if peer.queue_half_empty() {
                        state.catching.remove(&id);
                        state.live.insert(id, peer.clone());
                        return Ok(Subscribed {
                            epoch,
                            offset: after,
                            recovered: Some(true),
                        });
                    }
                }
            }
            if batch.is_empty() {
                peer.wait_queue_half_empty().await?;
                continue;
            }
            for (offset, frame) in batch.drain(..) {
                peer.push_waiting(frame).await?;
                crate::metrics::topic_replayed();
                after = offset;
            }
        }
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
        state.live.remove(&id);
        state.catching.remove(&id);
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

    /// The epoch and newest offset.
    pub(crate) fn position(&self) -> Position {
        let state = self.state();
        Position {
            epoch: state.store.epoch().to_owned(),
            offset: state.store.last(),
        }
    }
}
