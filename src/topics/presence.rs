//! Presence: which connections are in a topic as members, with the info they joined
//! with, and join/leave notifications for the subscribers that ask.
//!
//! This node's members live here, beside the subscribers: a member is a subscription
//! that joined the topic's presence, and it leaves when it unsubscribes or its
//! connection ends (`Topics::remove_from` calls [`Topics::presence_gone`]). In a
//! cluster the [`MemberRelay`] keeps the other nodes' members and calls their joins and
//! leaves down here ([`Topics::presence_changed`]), so a watcher hears every node's
//! from one place.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use dashmap::DashMap;
use futures_util::Stream;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::broadcast;

use super::Topics;
use crate::addr::PeerAddr;
use crate::contract::Notification;
use crate::error::{Error, Result};
use crate::message;
use crate::peer::Peer;
use crate::presence::{Member, PresenceChange, PresenceError, PresenceEvent, PresenceLimits};
use crate::relay::MemberRelay;
use crate::transport::Text;

crate::notification!(
    /// `presence.join`: a member joined a topic that the subscriber watches
    /// ([`Topics::watch_presence`]).
    pub PresenceJoin = "presence.join", PresenceChange
);

crate::notification!(
    /// `presence.leave`: a member left a topic that the subscriber watches (it
    /// unsubscribed, its connection ended, or its node went).
    pub PresenceLeave = "presence.leave", PresenceChange
);

/// The node name in members' addresses when there is no cluster.
const LOCAL_NODE: &str = "local";

/// This node's side of presence, held by [`Topics`].
#[derive(Default)]
pub(super) struct Presence {
    /// Whether presence was ever used here: until then, unsubscribing pays one load.
    used: AtomicBool,
    /// Topic to its members on this node and the connections watching it. One entry
    /// per topic, so a topic's events go out in the order its members changed.
    topics: DashMap<Box<str>, TopicPresence>,
    /// Connection to the topics it is a member of or watches.
    by_peer: DashMap<u64, HashSet<Box<str>>>,
    limits: RwLock<PresenceLimits>,
    events: OnceLock<broadcast::Sender<PresenceEvent>>,
    /// Set once when these topics are cluster-wide.
    relay: OnceLock<Arc<dyn MemberRelay>>,
}

#[derive(Default)]
struct TopicPresence {
    members: HashMap<u64, Arc<RawValue>>,
    watchers: HashMap<u64, Peer>,
}

impl TopicPresence {
    fn is_empty(&self) -> bool {
        self.members.is_empty() && self.watchers.is_empty()
    }
}

/// A join or leave as it goes on the wire, borrowed.
#[derive(Serialize)]
struct ChangeRef<'a> {
    topic: &'a str,
    addr: &'a PeerAddr,
    info: &'a RawValue,
}

impl Presence {
    fn limits(&self) -> PresenceLimits {
        self.limits
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn node(&self) -> &str {
        self.relay.get().map_or(LOCAL_NODE, |relay| relay.node())
    }

    /// Tells `topic`'s watchers (but `except`) and the event receivers. Called with the
    /// topic's entry held, so that its events keep the order of its changes.
    fn emit(
        &self,
        entry: &TopicPresence,
        join: bool,
        topic: &str,
        addr: &PeerAddr,
        info: &Arc<RawValue>,
        except: Option<u64>,
    ) {
        let receivers = self.events.get().filter(|tx| tx.receiver_count() > 0);
        let watching = entry.watchers.keys().any(|id| Some(*id) != except);
        if watching {
            let method = if join {
                PresenceJoin::NAME
            } else {
                PresenceLeave::NAME
            };
            let params = ChangeRef {
                topic,
                addr,
                info: info.as_ref(),
            };
            if let Ok(frame) = message::request(method, &params, None) {
                let frame = Text::from(frame);
                for (id, peer) in &entry.watchers {
                    if Some(*id) != except {
                        peer.push(frame.clone());
                    }
                }
            }
        }
        if let Some(tx) = receivers {
            let change = PresenceChange::new(topic, addr.clone(), info.as_ref().to_owned());
            let _ = tx.send(if join {
                PresenceEvent::Join(change)
            } else {
                PresenceEvent::Leave(change)
            });
        }
    }

    /// Takes `topic` out of `id`'s presence topics unless it is still a member or a
    /// watcher there.
    fn release(&self, id: u64, topic: &str) {
        let still = self
            .topics
            .get(topic)
            .is_some_and(|t| t.members.contains_key(&id) || t.watchers.contains_key(&id));
        if still {
            return;
        }
        let now_none = self.by_peer.get_mut(&id).is_some_and(|mut topics| {
            topics.remove(topic);
            topics.is_empty()
        });
        if now_none {
            self.by_peer.remove_if(&id, |_, topics| topics.is_empty());
        }
    }

    /// Counts `topic` among `id`'s presence topics, within the limit.
    fn claim(&self, id: u64, topic: &str, max: usize) -> Result<()> {
        let refused = Error::Presence(PresenceError::TooManyTopics { max });
        if max == 0 {
            // No entry is made for a peer that may hold none.
            return Err(refused);
        }
        let mut topics = self.by_peer.entry(id).or_default();
        if topics.contains(topic) {
            return Ok(());
        }
        if topics.len() >= max {
            return Err(refused);
        }
        topics.insert(topic.into());
        Ok(())
    }
}

/// The joins and leaves of every topic, as this node sees them
/// ([`Topics::presence_events`]): this node's members at once, the other nodes' as
/// their changes arrive. A receiver that falls behind by more than
/// [`PresenceLimits::event_capacity`] events gets [`PresenceEvent::Lagged`].
#[derive(Debug)]
pub struct PresenceEvents {
    rx: broadcast::Receiver<PresenceEvent>,
}

impl PresenceEvents {
    /// The next event; `None` once the topics are gone.
    pub async fn recv(&mut self) -> Option<PresenceEvent> {
        match self.rx.recv().await {
            Ok(event) => Some(event),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(PresenceEvent::Lagged(n)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The events as a [`Stream`].
    pub fn into_stream(self) -> impl Stream<Item = PresenceEvent> + Send + Unpin + 'static {
        Box::pin(futures_util::stream::unfold(
            self,
            |mut events| async move { events.recv().await.map(|event| (event, events)) },
        ))
    }
}

impl Topics {
    /// Sets the bounds of presence ([`PresenceLimits`]); the defaults apply until then.
    pub fn set_presence_limits(&self, limits: PresenceLimits) {
        *self
            .inner
            .presence
            .limits
            .write()
            .unwrap_or_else(PoisonError::into_inner) = limits;
    }

    /// The bounds of presence.
    pub fn presence_limits(&self) -> PresenceLimits {
        self.inner.presence.limits()
    }

    /// Makes `peer`, a subscriber of `topic`, one of its members, with `info` (a small
    /// JSON value of the application's, such as `{"user": "ana"}`): it is listed by
    /// [`presence`](Self::presence) on every node, and watchers get `presence.join`
    /// (not `peer` itself). It leaves when it unsubscribes, when its connection ends,
    /// or with [`leave_presence`](Self::leave_presence). Returns false (and keeps the
    /// first info) if it is a member already; to change a member's info, leave and join
    /// again ([`TopicMethods`](crate::TopicMethods)' `subscribe` with another info does
    /// that in one step).
    ///
    /// A member is one connection: a user in two tabs is two members with one info. To
    /// count users, count distinct infos (or a field of them) in
    /// [`presence`](Self::presence).
    ///
    /// In a cluster, resolves once this node holds the other nodes' members of `topic`
    /// (so [`presence`](Self::presence) right after is complete); while the bus is down,
    /// at once (they load when it is back).
    ///
    /// ```
    /// use jsonrpc_peer::{Context, Router, RpcError, Topics};
    /// use serde_json::Value;
    ///
    /// let router = Router::with_state(Topics::new()).method(
    ///     "join",
    ///     |cx: Context<Topics>, (room, user): (String, String)| async move {
    ///         let topics = cx.state();
    ///         topics.subscribe(cx.peer(), &room);
    ///         topics.join_presence(cx.peer(), &room, serde_json::json!({ "user": user })).await?;
    ///         topics.watch_presence(cx.peer(), &room).await?;
    ///         Ok::<_, RpcError>(topics.presence(&room).await?)
    ///     },
    /// );
    /// # let _ = router;
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Error::Presence`]: [`PresenceError::NotSubscribed`],
    /// [`PresenceError::InfoTooLarge`], [`PresenceError::TooManyMembers`],
    /// [`PresenceError::TooManyTopics`] (see [`PresenceLimits`]); the params errors of
    /// [`Caller::call`](crate::Caller::call) when `info` does not serialize.
    pub async fn join_presence(
        &self,
        peer: &Peer,
        topic: &str,
        info: impl Serialize,
    ) -> Result<bool> {
        self.join_presence_with(peer, topic, info, false).await
    }

    /// [`join_presence`](Self::join_presence); with `replace`, a member already there
    /// whose info is another takes `info`: watchers hear a leave with the old info and a
    /// join with the new one (and in a cluster, the other nodes' watchers), as they would
    /// for a leave and a join, and it returns true. For `TopicMethods`' `subscribe`,
    /// where the info given is what the member is.
    pub(crate) async fn join_presence_with(
        &self,
        peer: &Peer,
        topic: &str,
        info: impl Serialize,
        replace: bool,
    ) -> Result<bool> {
        let info: Arc<RawValue> = Arc::from(serde_json::value::to_raw_value(&info)?);
        let presence = &self.inner.presence;
        let limits = presence.limits();
        info_within(&limits, topic, info.get().len())?;
        self.check_subscribed(peer, topic)?;
        let id = peer.id();
        presence.claim(id, topic, limits.max_topics_per_peer)?;
        presence.used.store(true, Ordering::Release);
        let relay = presence.relay.get();
        if let Some(relay) = relay {
            relay.follow(topic).await;
        }
        let elsewhere = relay.map_or(0, |relay| relay.known(topic));
        let addr = PeerAddr {
            node: presence.node().to_owned(),
            peer: id,
        };
        let added = {
            let mut entry = presence.topics.entry(topic.into()).or_default();
            if let Some(was) = entry.members.get(&id) {
                if !replace || was.get() == info.get() {
                    Ok(false)
                } else {
                    // Under the topic's entry: its watchers hear the two in this order,
                    // with nothing of the topic's between them.
                    let was = was.clone();
                    entry.members.insert(id, info.clone());
                    presence.emit(&entry, false, topic, &addr, &was, Some(id));
                    presence.emit(&entry, true, topic, &addr, &info, Some(id));
                    Ok(true)
                }
            } else if entry.members.len() + elsewhere >= limits.max_members {
                Err(too_many_members(&limits, topic))
            } else {
                entry.members.insert(id, info.clone());
                presence.emit(&entry, true, topic, &addr, &info, Some(id));
                Ok(true)
            }
        };
        if added.is_err() {
            presence.release(id, topic);
            // The entry this refusal made, if no one else is in it.
            presence.topics.remove_if(topic, |_, t| t.is_empty());
        }
        if added? {
            if let Some(relay) = relay {
                relay.changed(topic, id);
            }
            // It may have unsubscribed or gone while it joined.
            if !self.is_subscribed(peer, topic) || peer.is_ending() {
                self.presence_gone(topic, id, false);
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Whether `peer` may join `topic`'s presence with `info` (and watch it) within the
    /// limits, as [`join_presence`](Self::join_presence) would find them now; changes
    /// nothing. For a subscribe that joins: checked before it subscribes, so a refusal
    /// sends and changes nothing (the join itself still decides, for what changed in
    /// between; in a cluster it counts the other nodes' members as known before it
    /// follows the topic).
    pub(crate) fn presence_admits(&self, peer: &Peer, topic: &str, info: &Value) -> Result<()> {
        let presence = &self.inner.presence;
        let limits = presence.limits();
        let bytes = serde_json::value::to_raw_value(info)?.get().len();
        info_within(&limits, topic, bytes)?;
        let id = peer.id();
        let max = limits.max_topics_per_peer;
        let claimed = presence.by_peer.get(&id).map_or(Some(0), |topics| {
            (!topics.contains(topic)).then_some(topics.len())
        });
        if max == 0 || claimed.is_some_and(|count| count >= max) {
            return Err(Error::Presence(PresenceError::TooManyTopics { max }));
        }
        let (member, here) = presence.topics.get(topic).map_or((false, 0), |t| {
            (t.members.contains_key(&id), t.members.len())
        });
        let elsewhere = presence.relay.get().map_or(0, |relay| relay.known(topic));
        if !member && here + elsewhere >= limits.max_members {
            return Err(too_many_members(&limits, topic));
        }
        Ok(())
    }

    /// Takes `peer` out of `topic`'s members (it stays subscribed); watchers get
    /// `presence.leave`. Returns false if it was not a member.
    pub fn leave_presence(&self, peer: &Peer, topic: &str) -> bool {
        let left = self.remove_member(topic, peer.id());
        if left {
            self.inner.presence.release(peer.id(), topic);
        }
        left
    }

    /// Sends `peer`, a subscriber of `topic`, a `presence.join` or `presence.leave`
    /// notification ([`PresenceJoin`], [`PresenceLeave`]) for every member that joins
    /// or leaves `topic` from now on, on any node (not for `peer` itself). It stops when
    /// `peer` unsubscribes, or with [`unwatch_presence`](Self::unwatch_presence).
    /// Returns false if it was watching already.
    ///
    /// The members there already are [`presence`](Self::presence)'s; in a cluster this
    /// resolves once this node holds the other nodes' members, as
    /// [`join_presence`](Self::join_presence) does.
    ///
    /// # Errors
    ///
    /// As [`Error::Presence`]: [`PresenceError::NotSubscribed`],
    /// [`PresenceError::TooManyTopics`].
    pub async fn watch_presence(&self, peer: &Peer, topic: &str) -> Result<bool> {
        let presence = &self.inner.presence;
        self.check_subscribed(peer, topic)?;
        let id = peer.id();
        presence.claim(id, topic, presence.limits().max_topics_per_peer)?;
        presence.used.store(true, Ordering::Release);
        if let Some(relay) = presence.relay.get() {
            relay.follow(topic).await;
        }
        let added = presence
            .topics
            .entry(topic.into())
            .or_default()
            .watchers
            .insert(id, peer.clone())
            .is_none();
        if added && (!self.is_subscribed(peer, topic) || peer.is_ending()) {
            self.presence_gone(topic, id, false);
        }
        Ok(added)
    }

    /// `peer` no longer gets `topic`'s joins and leaves. Returns false if it did not.
    pub fn unwatch_presence(&self, peer: &Peer, topic: &str) -> bool {
        let id = peer.id();
        let presence = &self.inner.presence;
        let removed = presence
            .topics
            .get_mut(topic)
            .is_some_and(|mut t| t.watchers.remove(&id).is_some());
        if removed {
            presence.topics.remove_if(topic, |_, t| t.is_empty());
            presence.release(id, topic);
        }
        removed
    }

    /// The members of `topic` on every node, in no particular order: this node's now,
    /// the others' as this node last heard (in a cluster: from the view it keeps while
    /// it has subscribers of `topic`, else read from the bus).
    ///
    /// # Errors
    ///
    /// In a cluster, when this node does not follow `topic` and the bus cannot be
    /// read: [`ClusterError::Unavailable`](crate::cluster::ClusterError::Unavailable)
    /// (as [`Error::Cluster`]) or [`Error::Timeout`].
    pub async fn presence(&self, topic: &str) -> Result<Vec<Member>> {
        let presence = &self.inner.presence;
        let node = presence.node();
        let mut members: Vec<Member> = presence
            .topics
            .get(topic)
            .map(|t| {
                t.members
                    .iter()
                    .map(|(id, info)| {
                        let addr = PeerAddr {
                            node: node.to_owned(),
                            peer: *id,
                        };
                        Member::new(addr, info.as_ref().to_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let Some(relay) = presence.relay.get() {
            if self.subscriber_count(topic) > 0 {
                relay.follow(topic).await;
            }
            members.extend(relay.members(topic).await?);
        }
        Ok(members)
    }

    /// How many members `topic` has on every node, as [`presence`](Self::presence)
    /// would list them; from memory when this node follows `topic` (it has
    /// subscribers there and the view is loaded), so it is cheap to call often.
    ///
    /// # Errors
    ///
    /// As [`presence`](Self::presence).
    pub async fn presence_count(&self, topic: &str) -> Result<usize> {
        let presence = &self.inner.presence;
        let here = presence.topics.get(topic).map_or(0, |t| t.members.len());
        let Some(relay) = presence.relay.get() else {
            return Ok(here);
        };
        if self.subscriber_count(topic) > 0 {
            relay.follow(topic).await;
        }
        Ok(here + relay.count(topic).await?)
    }

    /// Every join and leave of every topic from now on, as this node sees them (its own
    /// members' at once, the other nodes' as they arrive): for server-side code that
    /// reacts to who comes and goes. Receivers that do not keep up lose the oldest
    /// ([`PresenceEvent::Lagged`]); [`PresenceLimits::event_capacity`] is fixed when
    /// the first receiver is made.
    pub fn presence_events(&self) -> PresenceEvents {
        let presence = &self.inner.presence;
        let tx = presence
            .events
            .get_or_init(|| broadcast::channel(presence.limits().event_capacity.max(1)).0);
        PresenceEvents { rx: tx.subscribe() }
    }

    fn check_subscribed(&self, peer: &Peer, topic: &str) -> Result<()> {
        if self.is_subscribed(peer, topic) {
            Ok(())
        } else {
            Err(Error::Presence(PresenceError::NotSubscribed {
                topic: topic.to_owned(),
            }))
        }
    }

    fn is_subscribed(&self, peer: &Peer, topic: &str) -> bool {
        self.inner
            .by_peer
            .get(&peer.id())
            .is_some_and(|topics| topics.contains(topic))
    }

    /// Removes member `id` of `topic`, telling the watchers and the relay.
    fn remove_member(&self, topic: &str, id: u64) -> bool {
        let presence = &self.inner.presence;
        let removed = presence.topics.get_mut(topic).and_then(|mut entry| {
            let info = entry.members.remove(&id)?;
            let addr = PeerAddr {
                node: presence.node().to_owned(),
                peer: id,
            };
            presence.emit(&entry, false, topic, &addr, &info, Some(id));
            Some(())
        });
        if removed.is_none() {
            return false;
        }
        presence.topics.remove_if(topic, |_, t| t.is_empty());
        if let Some(relay) = presence.relay.get() {
            relay.changed(topic, id);
        }
        true
    }

    /// For unsubscribing: `id` is out of `topic`'s presence; and when `topic` has no
    /// subscribers left here, the relay need no longer follow it.
    pub(super) fn presence_gone(&self, topic: &str, id: u64, topic_empty: bool) {
        let presence = &self.inner.presence;
        if !presence.used.load(Ordering::Acquire) {
            return;
        }
        self.remove_member(topic, id);
        let unwatched = presence
            .topics
            .get_mut(topic)
            .is_some_and(|mut t| t.watchers.remove(&id).is_some());
        if unwatched {
            presence.topics.remove_if(topic, |_, t| t.is_empty());
        }
        presence.release(id, topic);
        if topic_empty {
            if let Some(relay) = presence.relay.get() {
                relay.unfollow(topic);
            }
        }
    }

    /// This node's member `id` of `topic` and its info, if it is one (for the relay,
    /// which reads the truth when it writes).
    pub(crate) fn local_member(&self, topic: &str, id: u64) -> Option<Arc<RawValue>> {
        self.inner
            .presence
            .topics
            .get(topic)
            .and_then(|t| t.members.get(&id).cloned())
    }

    /// A member on another node joined or left `topic`: its watchers here hear it.
    pub(crate) fn presence_changed(
        &self,
        join: bool,
        topic: &str,
        addr: &PeerAddr,
        info: &Arc<RawValue>,
    ) {
        let presence = &self.inner.presence;
        let receivers = presence
            .events
            .get()
            .is_some_and(|tx| tx.receiver_count() > 0);
        match presence.topics.get(topic) {
            Some(entry) => presence.emit(&entry, join, topic, addr, info, None),
            None if receivers => {
                presence.emit(&TopicPresence::default(), join, topic, addr, info, None)
            }
            None => {}
        }
    }

    /// Makes presence cluster-wide; false if a relay already was attached.
    pub(crate) fn attach_members(&self, relay: Arc<dyn MemberRelay>) -> bool {
        self.inner.presence.relay.set(relay).is_ok()
    }
}

/// An info of `bytes` within `limits.max_info_bytes`, or the error saying it is not.
fn info_within(limits: &PresenceLimits, topic: &str, bytes: usize) -> Result<()> {
    if bytes > limits.max_info_bytes {
        return Err(Error::Presence(PresenceError::InfoTooLarge {
            topic: topic.to_owned(),
            bytes,
            max: limits.max_info_bytes,
        }));
    }
    Ok(())
}

/// The error of a join past `limits.max_members` in `topic`.
fn too_many_members(limits: &PresenceLimits, topic: &str) -> Error {
    Error::Presence(PresenceError::TooManyMembers {
        topic: topic.to_owned(),
        max: limits.max_members,
    })
}

#[cfg(test)]
mod tests {
    use crate::{Peer, PeerConfig, PresenceLimits, Router, Topics};

    #[tokio::test]
    async fn a_refused_join_leaves_no_entry_behind() {
        let topics = Topics::new();
        topics.set_presence_limits(PresenceLimits::default().max_members(0));
        let (end, _other) = crate::transport::pair();
        let peer = Peer::start(end, Router::new(), &PeerConfig::default());
        for topic in ["a", "b", "c"] {
            topics.subscribe(&peer, topic);
            let refused = topics.join_presence(&peer, topic, "info").await;
            assert!(refused.is_err(), "{refused:?}");
        }
        assert!(topics.inner.presence.topics.is_empty());
        assert!(topics.inner.presence.by_peer.is_empty());
    }

    #[tokio::test]
    async fn no_topic_allowed_leaves_no_entry_behind() {
        let topics = Topics::new();
        topics.set_presence_limits(PresenceLimits::default().max_topics_per_peer(0));
        let (end, _other) = crate::transport::pair();
        let peer = Peer::start(end, Router::new(), &PeerConfig::default());
        topics.subscribe(&peer, "a");
        let refused = topics.join_presence(&peer, "a", "info").await;
        assert!(refused.is_err(), "{refused:?}");
        let refused = topics.watch_presence(&peer, "a").await;
        assert!(refused.is_err(), "{refused:?}");
        assert!(topics.inner.presence.topics.is_empty());
        assert!(topics.inner.presence.by_peer.is_empty());
    }
}
