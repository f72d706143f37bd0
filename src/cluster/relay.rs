//! The cluster's side of the seam ([`crate::relay`]): what this node's registry and
//! topics hand on goes to the other nodes through here.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use tokio::sync::watch;

use super::envelope::{Kind, Me};
use super::history::{History, Inbound};
use super::outbox::{Outbox, Refused};
use super::status::ClusterState;
use super::subscriptions::Subscriptions;
use crate::addr::ClusterError;
use crate::error::{Error, Result};
use crate::history::{HistoryConfig, Position};
use crate::relay::{Relay, Replay};

/// Attached to the node's [`ServerHandle`](crate::ServerHandle) and
/// [`Topics`](crate::Topics). It holds the rooms it reaches weakly: the registry and
/// topics never keep a stopped node alive.
pub(super) struct ClusterRelay {
    me: Arc<Me>,
    outbox: Weak<Outbox>,
    subscriptions: Weak<Subscriptions>,
    history: Weak<History>,
    state: watch::Receiver<ClusterState>,
    /// How long [`ready`](Relay::ready) waits for the bus.
    timeout: Duration,
}

impl ClusterRelay {
    pub fn new(
        me: Arc<Me>,
        outbox: &Arc<Outbox>,
        subscriptions: &Arc<Subscriptions>,
        history: &Arc<History>,
        state: watch::Receiver<ClusterState>,
        timeout: Duration,
    ) -> Self {
        ClusterRelay {
            me,
            outbox: Arc::downgrade(outbox),
            subscriptions: Arc::downgrade(subscriptions),
            history: Arc::downgrade(history),
            state,
            timeout,
        }
    }
}

/// What a broadcast or publish the outbox refused fails with; `None` when it is fine
/// to go on locally (the node is stopped: local delivery only, as without a cluster).
fn refused(outbox: &Outbox, why: Refused) -> Option<Error> {
    let down = !outbox.bus_up();
    if matches!(why, Refused::Full | Refused::Unreachable) {
        outbox.count_refused();
    }
    let why = match why {
        Refused::Stopped => return None,
        Refused::Down => "the bus is down".to_owned(),
        Refused::Unreachable => {
            return Some(Error::Cluster(ClusterError::Unavailable(
                "the bus cannot reach this channel for now, and what waits for it fills its share of the outbox".to_owned(),
            )))
        }
        Refused::Full if down => "the outbox is full and the bus is down".to_owned(),
        Refused::Full => "the outbox is full: the bus takes less than is published".to_owned(),
    };
    Some(Error::Cluster(ClusterError::Overloaded(why)))
}

impl Relay for ClusterRelay {
    fn broadcast(&self, frame: &str) -> Result<()> {
        let Some(outbox) = self.outbox.upgrade() else {
            return Ok(());
        };
        let header = self.me.header(Kind::Broadcast);
        match outbox.push(&self.me.broadcast, header, frame.as_bytes(), true) {
            Ok(()) => Ok(()),
            Err(why) => refused(&outbox, why).map_or(Ok(()), Err),
        }
    }

    fn publish<'a>(&'a self, topic: &'a str, frame: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let Some(outbox) = self.outbox.upgrade() else {
                return Ok(());
            };
            let channel = self.me.channels.topic(topic);
            // Set once the outbox was full: the end of the wait for room, and its
            // "sent" ticks, taken before trying again so a batch sent in between
            // still wakes us.
            let mut waiting: Option<(tokio::time::Instant, watch::Receiver<()>)> = None;
            loop {
                let header = self.me.header(Kind::Topic);
                let why = match outbox.push(&channel, header, frame.as_bytes(), true) {
                    Ok(()) => return Ok(()),
                    Err(why) => why,
                };
                // Full while the bus is up: it drains, so wait for room (bounded).
                if why == Refused::Full && outbox.bus_up() {
                    let Some((deadline, sent)) = &mut waiting else {
                        let deadline = crate::deadline::after(self.timeout);
                        waiting = Some((deadline, outbox.sent_ticks()));
                        continue;
                    };
                    let room = outbox.room(sent);
                    if tokio::time::timeout_at(*deadline, room).await.is_ok() {
                        continue;
                    }
                }
                return refused(&outbox, why).map_or(Ok(()), Err);
            }
        })
    }

    fn changed(&self, topic: &str) {
        if let Some(subscriptions) = self.subscriptions.upgrade() {
            subscriptions.changed(topic);
        }
    }

    fn ready<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let Some(subscriptions) = self.subscriptions.upgrade() else {
                return Ok(());
            };
            let state = *self.state.borrow();
            match state {
                ClusterState::Up => {}
                // Local delivery only, as without a cluster.
                ClusterState::Stopped => return Ok(()),
                ClusterState::Down => {
                    subscriptions.changed(topic);
                    return Err(Error::Cluster(ClusterError::Unavailable(
                        "the bus is down".into(),
                    )));
                }
            }
            let waiter = subscriptions.wait(topic);
            match tokio::time::timeout(self.timeout, waiter).await {
                Ok(Ok(result)) => result.map_err(Error::Cluster),
                Ok(Err(_)) => Err(Error::Cluster(ClusterError::Stopped)),
                Err(_) => Err(Error::timeout(None, self.timeout)),
            }
        })
    }

    fn record<'a>(
        &'a self,
        topic: &'a str,
        data: &'a RawValue,
        bounds: &'a HistoryConfig,
    ) -> BoxFuture<'a, Result<Position>> {
        Box::pin(async move { self.history()?.record(topic, data, bounds).await })
    }

    fn follow<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            // Stopped: local delivery only, as `ready` says; the cache stays as it is
            // (its room is gone).
            if *self.state.borrow() == ClusterState::Stopped {
                return Ok(());
            }
            self.history()?.follow(topic).await
        })
    }

    fn read_history<'a>(
        &'a self,
        topic: &'a str,
        epoch: &'a str,
        after: u64,
        bounds: &'a HistoryConfig,
    ) -> BoxFuture<'a, Result<Replay>> {
        Box::pin(async move {
            let history = self.history()?;
            history
                .reads
                .read(&history, topic, epoch, after, bounds)
                .await
        })
    }

    fn history_position<'a>(
        &'a self,
        topic: &'a str,
        bounds: &'a HistoryConfig,
    ) -> BoxFuture<'a, Result<Position>> {
        Box::pin(async move { self.history()?.position(topic, bounds).await })
    }

    fn look<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Ok(history) = self.history() {
                history.tell(Inbound::Look(topic.to_owned())).await;
            }
        })
    }
}

impl ClusterRelay {
    /// The history room, while the node runs.
    fn history(&self) -> Result<Arc<History>> {
        self.history
            .upgrade()
            .ok_or(Error::Cluster(ClusterError::Stopped))
    }
}
