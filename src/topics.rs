//! Publish/subscribe on plain JSON-RPC notifications.
//!
//! A topic is a name; publishing to it sends each subscriber one notification whose
//! method is the topic's name, or the method of the notification contract published on
//! it ([`Topic`]). Which methods subscribe and unsubscribe is the
//! application's choice (see [`Topics`], and [`TopicMethods`] for ready-made ones); a
//! peer that disconnects leaves every topic. A topic may keep history
//! ([`Topics::keep_history`]): its publications get offsets, and a subscriber that comes
//! back resumes from its last one (`histories.rs`, `log.rs`, `store.rs`).

mod histories;
mod log;

pub(crate) use log::{frame as recorded_frame, Applied, Followed};
mod methods;
mod presence;
mod store;

pub use methods::TopicMethods;
pub use presence::{PresenceEvents, PresenceJoin, PresenceLeave};

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use serde::Serialize;

use crate::contract::Topic;
use crate::error::Result;
use crate::history::Published;
use crate::message;
use crate::peer::Peer;
use crate::relay::Relay;
use crate::transport::Text;

/// Named topics and the peers subscribed to each. Cheap to clone; share one between
/// the server's handlers (in the router's state) and whatever publishes.
///
/// ```
/// use jsonrpc_peer::{Context, Router, RpcError, Topics};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> jsonrpc_peer::Result<()> {
/// // The application decides how peers subscribe: here, two methods of its own
/// // (`TopicMethods` has ready-made ones).
/// let router = Router::with_state(Topics::new())
///     .method("subscribe", |cx: Context<Topics>, (topic,): (String,)| async move {
///         Ok::<_, RpcError>(cx.state().subscribe(cx.peer(), &topic))
///     })
///     .method("unsubscribe", |cx: Context<Topics>, (topic,): (String,)| async move {
///         Ok::<_, RpcError>(cx.state().unsubscribe(cx.peer(), &topic))
///     });
/// // Elsewhere: every subscriber of "prices" gets {"method":"prices","params":{...}}.
/// let topics = Topics::new();
/// let published = topics.publish("prices", &serde_json::json!({"BTC": 1})).await?;
/// assert_eq!(published.delivered, 0); // nobody subscribed yet
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Topics {
    inner: Arc<Inner>,
}

/// One topic's local subscribers, by peer id: one lock per topic (a map of its own per
/// topic, where a nested `DashMap` iterated all its shards for every message, some
/// 1,700 instructions for a topic with one subscriber). A delivery holds the read lock
/// while it queues the frame for each (a `push` never waits); a subscribe or leave
/// takes the write lock.
#[derive(Default)]
struct Subscribers(RwLock<HashMap<u64, Peer>>);

impl Subscribers {
    fn read(&self) -> RwLockReadGuard<'_, HashMap<u64, Peer>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<u64, Peer>> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, id: u64, peer: Peer) {
        self.write().insert(id, peer);
    }

    /// Removes `id`; whether none are left.
    fn remove(&self, id: u64) -> bool {
        let mut map = self.write();
        map.remove(&id);
        map.is_empty()
    }

    fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn len(&self) -> usize {
        self.read().len()
    }

    /// Queues `frame` for each; how many took it.
    fn push(&self, frame: &Text) -> usize {
        self.read()
            .values()
            .filter(|peer| peer.push(frame.clone()))
            .count()
    }

    fn peers(&self) -> Vec<Peer> {
        self.read().values().cloned().collect()
    }
}

#[derive(Default)]
struct Inner {
    /// Topic name to its subscribers, by peer id.
    topics: DashMap<Box<str>, Subscribers>,
    /// Peer id to the topics it is in, so a disconnect leaves them all.
    by_peer: DashMap<u64, HashSet<Box<str>>>,
    /// Set once when these topics are cluster-wide; unset, publish stays local at the
    /// cost of one load.
    relay: OnceLock<Arc<dyn Relay>>,
    /// The topics that keep history.
    history: histories::Histories,
    /// Publications the cluster refused.
    refused: AtomicU64,
    /// Who is in each topic: this node's members, and who watches them.
    presence: presence::Presence,
}

impl Topics {
    /// No topics, no subscribers.
    pub fn new() -> Self {
        Topics::default()
    }

    /// Subscribes `peer` to `topic`. Returns false if it already was. On a topic with
    /// history, the subscription starts from now (as
    /// [`subscribe_from`](Self::subscribe_from) without a position).
    pub fn subscribe(&self, peer: &Peer, topic: &str) -> bool {
        let added = self.join(peer, topic);
        if added {
            self.subscribe_history(peer, topic);
        }
        added
    }

    /// Adds `peer` to `topic`'s subscribers (not to its history's live ones). Returns
    /// false if it already was.
    fn join(&self, peer: &Peer, topic: &str) -> bool {
        let id = peer.id();
        let first_topic = !self.inner.by_peer.contains_key(&id);
        let added = self
            .inner
            .by_peer
            .entry(id)
            .or_default()
            .insert(topic.into());
        if !added {
            return false;
        }
        let created = match self.inner.topics.entry(topic.into()) {
            Entry::Occupied(subscribers) => {
                subscribers.get().insert(id, peer.clone());
                false
            }
            Entry::Vacant(slot) => {
                slot.insert(Subscribers::default()).insert(id, peer.clone());
                true
            }
        };
        if created {
            if let Some(relay) = self.inner.relay.get() {
                relay.changed(topic);
            }
        }
        if first_topic {
            // When the connection ends, the peer leaves every topic (at once, if it
            // has already ended).
            let topics = self.clone();
            peer.on_close(move || topics.forget(id));
        } else if peer.is_ending() {
            // It may have ended while this subscription was being added: its `on_close`
            // callbacks (this one's `forget` among them) have begun, and may have run
            // before the inserts above, or between them (then it took the peer's entry
            // before this topic's subscriber was in: that one goes here).
            self.forget(id);
            self.remove_from(topic, id);
        }
        true
    }

    /// [`subscribe`](Self::subscribe), and with a cluster, waits until this node
    /// listens to the topic on the bus: a publish on any node after this returns reaches
    /// `peer`. Returns false if it already was subscribed.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Unavailable`](crate::cluster::ClusterError::Unavailable) while
    /// the bus is down (the local subscription stays; the node listens once the bus is
    /// back), [`Error::Timeout`](crate::Error::Timeout) if the bus does not answer within
    /// the cluster's call timeout.
    pub async fn subscribe_ready(&self, peer: &Peer, topic: &str) -> Result<bool> {
        let added = self.subscribe(peer, topic);
        if let Some(relay) = self.inner.relay.get() {
            relay.ready(topic).await?;
            // A topic with history: its cache follows the bus from now on (asked even
            // when it follows now: see `subscribe_from`).
            if self.history_follows(topic).is_some() {
                relay.follow(topic).await?;
            }
        }
        Ok(added)
    }

    /// Unsubscribes `peer` from `topic`. Returns false if it was not subscribed.
    pub fn unsubscribe(&self, peer: &Peer, topic: &str) -> bool {
        let id = peer.id();
        let removed = self
            .inner
            .by_peer
            .get_mut(&id)
            .is_some_and(|mut topics| topics.remove(topic));
        if removed {
            self.remove_from(topic, id);
        }
        removed
    }

    /// Notifies every subscriber of `topic` once; with a cluster, on every node. The
    /// notification is serialized once; a subscriber that does not keep up gets its
    /// [`SlowPeer`](crate::SlowPeer) policy. Says how many of this node's subscribers
    /// it was queued for.
    ///
    /// `topic` is a [`Notification`](crate::Notification) contract (the topic of its own
    /// name, its params type checked: `topics.publish(PriceTick, &price)`), the same on
    /// a topic of another name (`PriceTick.on_topic("prices/BTC")`), or a string (the
    /// topic's name and the notification's method, any params): see [`Topic`].
    ///
    /// What it promises:
    /// - On a topic with history ([`keep_history`](Self::keep_history)), `Ok` means
    ///   recorded: the publication has its [`offset`](Published::offset), and a
    ///   subscriber gets it live or when it resumes, unless the history's bounds trimmed
    ///   it first. The params are `{"offset":N,"data":PAYLOAD}`; any JSON value is a
    ///   payload (the resuming client, [`ReconnectingBuilder::topic`](crate::ReconnectingBuilder::topic),
    ///   hands the application the payload). In a cluster the bus records it (Redis gives the offset: one order
    ///   for every node and publisher) and delivers it to every node's subscribers,
    ///   this node's too, in offset order; `Ok` comes once Redis has it, and
    ///   [`delivered`](Published::delivered) counts this node's live subscribers then.
    ///   There the notification's method is the topic's name (each node makes it from
    ///   what the bus recorded): a contract of another name on it is refused
    ///   ([`HistoryError::OtherName`](crate::HistoryError::OtherName)).
    /// - Without history, at most once: queued for each subscriber connected now (and,
    ///   in a cluster, taken by the outbox, which sends it when the bus can and never
    ///   drops what it took); a subscriber whose link drops misses what was published
    ///   meanwhile. The params are the payload, an array or object.
    ///
    /// # Errors
    ///
    /// The params errors of [`Caller::call`](crate::Caller::call);
    /// [`HistoryError::TooLarge`](crate::HistoryError::TooLarge) (as
    /// [`Error::History`](crate::Error::History)) when the data alone is over the
    /// history's byte bound. In a cluster,
    /// [`ClusterError::Unavailable`](crate::cluster::ClusterError::Unavailable) at once
    /// while the bus is down (with history: not recorded) or when Redis fails the
    /// record, [`ClusterError::Overloaded`](crate::cluster::ClusterError::Overloaded)
    /// when the outbox has no room (without history: waited for while the bus is up, up
    /// to the call timeout) or too many publications wait to be recorded
    /// ([`max_pending_records`](crate::cluster::ClusterBuilder::max_pending_records)).
    /// On any error the publication reached no subscriber (a record whose answer was
    /// lost may still have been recorded, and then is delivered); each one the cluster
    /// refused (`Unavailable`, `Overloaded`) is counted in [`refused`](Self::refused).
    pub async fn publish<P: Serialize + ?Sized>(
        &self,
        topic: impl Topic<P>,
        params: &P,
    ) -> Result<Published> {
        let (name, method) = (topic.name(), topic.method());
        // On a topic with history the payload is the envelope's `data`, any JSON value:
        // kept as published (a contract's one value is not made `[value]`, which only
        // params need), so the resuming client reads it as the contract's type.
        if let Some(published) = self.publish_recorded(name, method, params).await? {
            crate::metrics::topic_published(published.delivered);
            return Ok(published);
        }
        let params = &crate::message::Params {
            positional: topic.positional(),
            params,
        };
        let delivered = self.publish_plain(name, method, params).await?;
        crate::metrics::topic_published(delivered);
        Ok(Published {
            delivered,
            offset: None,
        })
    }

    /// A publication on a topic without history.
    async fn publish_plain<P: Serialize + ?Sized>(
        &self,
        topic: &str,
        method: &str,
        params: &P,
    ) -> Result<usize> {
        let relay = self.inner.relay.get();
        if relay.is_none() && !self.inner.topics.contains_key(topic) {
            // No one to send it to, so not serialized; but params that could not be
            // sent are refused now as they are once someone subscribes.
            message::check_params(params)?;
            return Ok(0);
        }
        let frame = Text::from(message::request(method, params, None)?);
        // The other nodes first: if the cluster cannot take it, no one gets it.
        if let Some(relay) = relay {
            if let Err(e) = relay.publish(topic, &frame).await {
                self.inner.refused.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        }
        // Counted by `publish` (a publication), not as a delivery from another node.
        Ok(self.push_local(topic, &frame))
    }

    /// Publications the cluster refused (its outbox was full, or the bus could not
    /// record one on a topic with history): each returned an error from
    /// [`publish`](Self::publish) and reached no one. Zero without a cluster.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// Queues `frame` for every local subscriber of `topic` (a publish from another node).
    pub(crate) fn deliver(&self, topic: &str, frame: Text) -> usize {
        let delivered = self.push_local(topic, &frame);
        crate::metrics::topic_delivered(delivered);
        delivered
    }

    /// Queues `frame` for every local subscriber of `topic`; how many took it.
    fn push_local(&self, topic: &str, frame: &Text) -> usize {
        self.inner
            .topics
            .get(topic)
            .map_or(0, |subscribers| subscribers.push(frame))
    }

    /// The topics with local subscribers.
    pub(crate) fn topic_names(&self) -> Vec<String> {
        self.inner
            .topics
            .iter()
            .map(|e| e.key().to_string())
            .collect()
    }

    /// Makes publishing cluster-wide; false if a relay already was attached.
    pub(crate) fn attach(&self, relay: Arc<dyn Relay>) -> bool {
        self.inner.relay.set(relay).is_ok()
    }

    /// How many peers are subscribed to `topic`.
    pub fn subscriber_count(&self, topic: &str) -> usize {
        self.inner.topics.get(topic).map_or(0, |s| s.len())
    }

    /// How many topics `peer` is subscribed to, and whether `topic` is one of them.
    pub(crate) fn subscribed(&self, peer: &Peer, topic: &str) -> (usize, bool) {
        self.inner
            .by_peer
            .get(&peer.id())
            .map_or((0, false), |t| (t.len(), t.contains(topic)))
    }

    /// The topics `peer` is subscribed to.
    pub fn topics_of(&self, peer: &Peer) -> Vec<String> {
        self.inner
            .by_peer
            .get(&peer.id())
            .map(|t| t.iter().map(|t| t.to_string()).collect())
            .unwrap_or_default()
    }

    /// Removes a peer from every topic it is in.
    fn forget(&self, id: u64) {
        if let Some((_, topics)) = self.inner.by_peer.remove(&id) {
            for topic in topics.iter() {
                self.remove_from(topic, id);
            }
        }
    }

    fn remove_from(&self, topic: &str, id: u64) {
        let now_empty = self
            .inner
            .topics
            .get(topic)
            .is_some_and(|subscribers| subscribers.remove(id));
        self.leave_history(topic, id, now_empty);
        self.presence_gone(topic, id, now_empty);
        // Only if no one subscribed in between.
        if now_empty
            && self
                .inner
                .topics
                .remove_if(topic, |_, s| s.is_empty())
                .is_some()
        {
            if let Some(relay) = self.inner.relay.get() {
                relay.changed(topic);
            }
        }
    }
}

impl std::fmt::Debug for Topics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topics")
            .field("topics", &self.inner.topics.len())
            .field("subscribed_peers", &self.inner.by_peer.len())
            .finish()
    }
}
