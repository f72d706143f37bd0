//! The cluster's side of the seam ([`crate::relay`]): what this node's registry and
//! topics hand on goes to the other nodes through here.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use super::envelope::{Kind, Me};
use super::outbox::Outbox;
use super::status::ClusterState;
use super::subscriptions::Subscriptions;
use crate::addr::ClusterError;
use crate::error::{Error, Result};
use crate::relay::Relay;

/// Attached to the node's [`ServerHandle`](crate::ServerHandle) and
/// [`Topics`](crate::Topics). It holds the rooms it reaches weakly: the registry and
/// topics never keep a stopped node alive.
pub(super) struct ClusterRelay {
    me: Arc<Me>,
    outbox: Weak<Outbox>,
    subscriptions: Weak<Subscriptions>,
    state: watch::Receiver<ClusterState>,
    /// How long [`ready`](Relay::ready) waits for the bus.
    timeout: Duration,
}

impl ClusterRelay {
    pub fn new(
        me: Arc<Me>,
        outbox: &Arc<Outbox>,
        subscriptions: &Arc<Subscriptions>,
        state: watch::Receiver<ClusterState>,
        timeout: Duration,
    ) -> Self {
        ClusterRelay {
            me,
            outbox: Arc::downgrade(outbox),
            subscriptions: Arc::downgrade(subscriptions),
            state,
            timeout,
        }
    }
}

impl Relay for ClusterRelay {
    fn broadcast(&self, frame: &str) {
        if let Some(outbox) = self.outbox.upgrade() {
            let header = self.me.header(Kind::Broadcast);
            outbox.push(&self.me.broadcast, header, frame.as_bytes(), true);
        }
    }

    fn publish(&self, topic: &str, frame: &str) {
        if let Some(outbox) = self.outbox.upgrade() {
            let channel = self.me.channels.topic(topic);
            let header = self.me.header(Kind::Topic);
            outbox.push(&channel, header, frame.as_bytes(), true);
        }
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
}
