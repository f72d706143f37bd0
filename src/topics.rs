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
mod methods;
mod presence;
mod store;

pub use methods::TopicMethods;
pub use presence::{PresenceEvents, PresenceJoin, PresenceLeave};

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

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

#[derive(Default)]
struct Inner {
    /// Topic name to its subscribers, by peer id.
    topics: DashMap<Box<str>, DashMap<u64, Peer>>,
    /// Peer id to the topics it is in, so a disconnect leaves them all.
    by_peer: DashMap<u64, HashSet<Box<str>>>,
    /// Set once when these topics are cluster-wide; unset, publish stays local at the
    /// cost of one load.
    relay: OnceLock<Arc<dyn Relay>>,
    /// The topics that keep history.
    history: histories::Histories,
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
                slot.insert(DashMap::new()).insert(id, peer.clone());
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
        } else if peer.is_closed() {
            // It may have ended while this subscription was being added.
            self.forget(id);
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
    ///   hands the application the payload). (In a cluster, such a topic is delivered
    ///   on this node only for now.)
    /// - Without history, at most once: queued for each subscriber connected now (and,
    ///   in a cluster, handed to the bus's outbox); a subscriber whose link drops misses
    ///   what was published meanwhile. The params are the payload, an array or object.
    ///
    /// # Errors
    ///
    /// The params errors of [`Caller::call`](crate::Caller::call);
    /// [`HistoryError::TooLarge`](crate::HistoryError::TooLarge) (as
    /// [`Error::History`](crate::Error::History)) when the data alone is over the
    /// history's byte bound: then it reached no one.
    pub async fn publish<P: Serialize + ?Sized>(
        &self,
        topic: impl Topic<P>,
        params: &P,
    ) -> Result<Published> {
        let (name, method) = (topic.name(), topic.method());
        if let Some(published) = self.publish_recorded(name, method, params)? {
            crate::metrics::topic_published(published.delivered);
            return Ok(published);
        }
        let delivered = self.publish_plain(name, method, params)?;
        crate::metrics::topic_published(delivered);
        Ok(Published {
            delivered,
            offset: None,
        })
    }

    /// A publication on a topic without history.
    fn publish_plain<P: Serialize + ?Sized>(
        &self,
        topic: &str,
        method: &str,
        params: &P,
    ) -> Result<usize> {
        let relay = self.inner.relay.get();
        let subscribers = self.inner.topics.get(topic);
        if subscribers.is_none() && relay.is_none() {
            return Ok(0);
        }
        let frame = Text::from(message::request(method, params, None)?);
        let queued = subscribers.map_or(0, |subscribers| {
            subscribers
                .iter()
                .filter(|entry| entry.value().push(frame.clone()))
                .count()
        });
        if let Some(relay) = relay {
            relay.publish(topic, &frame);
        }
        Ok(queued)
    }

    /// Queues `frame` for every local subscriber of `topic` (a publish from another node).
    pub(crate) fn deliver(&self, topic: &str, frame: Text) -> usize {
        let delivered = self.inner.topics.get(topic).map_or(0, |subscribers| {
            subscribers
                .iter()
                .filter(|entry| entry.value().push(frame.clone()))
                .count()
        });
        crate::metrics::topic_delivered(delivered);
        delivered
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
        let now_empty = self.inner.topics.get(topic).is_some_and(|subscribers| {
            subscribers.remove(&id);
            subscribers.is_empty()
        });
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
