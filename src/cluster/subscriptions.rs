//! Which topic channels this node listens to on the bus: exactly those with local
//! subscribers.
//!
//! Local subscribe and unsubscribe only mark a topic dirty; one task compares what the
//! bus has with what the topics have *now* and issues the difference, one operation at
//! a time. Reading the truth at that moment (rather than replaying events) makes a
//! quick subscribe-unsubscribe-subscribe come out right whatever the interleaving.
//! The set (what the bus has, who waits for what) is the task's; the relay and the
//! receive loop reach it only through [`Subscriptions`]' methods.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::backplane::Backplane;
use super::envelope::Me;
use super::history::{History, Inbound};
use super::sequence::Forget;
use super::sync::lock;
use crate::addr::ClusterError;
use crate::topics::Topics;

type Waiter = oneshot::Sender<Result<(), ClusterError>>;

#[derive(Default)]
pub(super) struct Subscriptions {
    inner: Mutex<Inner>,
    wake: Notify,
}

#[derive(Default)]
struct Inner {
    /// What the bus has, per topic; absent means not subscribed.
    have: HashMap<String, Have>,
    waiters: HashMap<String, Vec<Waiter>>,
    dirty: VecDeque<String>,
    queued: HashSet<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Have {
    Yes,
    /// An operation failed: issue it again.
    Unknown,
}

impl Inner {
    fn mark(&mut self, topic: &str) {
        if self.queued.insert(topic.to_owned()) {
            self.dirty.push_back(topic.to_owned());
        }
    }
}

impl Subscriptions {
    /// `topic`'s local subscribers may have gone from none to some or back.
    pub fn changed(&self, topic: &str) {
        lock(&self.inner).mark(topic);
        self.wake.notify_one();
    }

    /// After the bus is back: look at every topic again.
    pub fn all_changed(&self, local: Vec<String>) {
        let mut inner = lock(&self.inner);
        let known: Vec<String> = inner.have.keys().cloned().collect();
        for topic in known.iter().chain(&local) {
            inner.mark(topic);
        }
        drop(inner);
        self.wake.notify_one();
    }

    /// Resolves once the bus has `topic` (at once if it has).
    pub fn wait(&self, topic: &str) -> oneshot::Receiver<Result<(), ClusterError>> {
        let (tx, rx) = oneshot::channel();
        let mut inner = lock(&self.inner);
        if inner.have.get(topic) == Some(&Have::Yes) && !inner.queued.contains(topic) {
            let _ = tx.send(Ok(()));
            return rx;
        }
        inner.waiters.entry(topic.to_owned()).or_default().push(tx);
        inner.mark(topic);
        drop(inner);
        self.wake.notify_one();
        rx
    }

    fn next(&self) -> Option<(String, Option<Have>)> {
        let mut inner = lock(&self.inner);
        let topic = inner.dirty.pop_front()?;
        inner.queued.remove(&topic);
        let have = inner.have.get(&topic).copied();
        Some((topic, have))
    }

    fn settle(&self, topic: &str, have: Option<Have>, result: Result<(), ClusterError>) {
        let mut inner = lock(&self.inner);
        match have {
            Some(h) => inner.have.insert(topic.to_owned(), h),
            None => inner.have.remove(topic),
        };
        if inner.queued.contains(topic) {
            return; // changed again meanwhile: the waiters wait for the next round
        }
        if let Some(waiters) = inner.waiters.remove(topic) {
            for w in waiters {
                let _ = w.send(result.clone());
            }
        }
    }
}

/// Keeps the bus's topic channels in step with the local subscribers of `topics`;
/// tells `forget` and the history room the channels it unsubscribed.
pub(super) async fn run(
    subscriptions: Arc<Subscriptions>,
    bus: Arc<dyn Backplane>,
    topics: Topics,
    me: Arc<Me>,
    history: Arc<History>,
    forget: mpsc::UnboundedSender<Forget>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        while let Some((topic, have)) = subscriptions.next() {
            let want = topics.subscriber_count(&topic) > 0;
            let channel = me.channels.topic(&topic);
            let (have, result) = match (want, have) {
                (true, Some(Have::Yes)) | (false, None) => (have, Ok(())),
                (true, _) => match bus.subscribe(&channel).await {
                    Ok(()) => (Some(Have::Yes), Ok(())),
                    Err(e) => (Some(Have::Unknown), Err(e)),
                },
                (false, Some(_)) => match bus.unsubscribe(&channel).await {
                    Ok(()) => {
                        let _ = forget.send(Forget::Channel(channel));
                        // Not heard any more: what comes meanwhile is missed, so the
                        // history's cache must look at the bus again before it is used.
                        history.tell(Inbound::Unfollow(topic.clone())).await;
                        (None, Ok(()))
                    }
                    Err(e) => (Some(Have::Unknown), Err(e)),
                },
            };
            let result = result.map_err(|e| {
                tracing::debug!(topic, error = %e, "topic channel not updated; again when the bus is back");
                ClusterError::Unavailable(e.to_string())
            });
            subscriptions.settle(&topic, have, result);
            // Subscribers may have come or gone while the bus answered.
            if (topics.subscriber_count(&topic) > 0) != want {
                subscriptions.changed(&topic);
            }
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = subscriptions.wake.notified() => {}
        }
    }
}
