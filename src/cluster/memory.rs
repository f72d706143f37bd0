//! A bus inside one process, shared by several nodes, with faults on demand: the whole
//! cluster logic runs and is tested on it without any server. It keeps topic histories
//! too (`history.rs`), as the Redis script does.

mod history;
mod members;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::backplane::{Append, Backplane, BackplaneError, BoxFuture, BusEvent, HistoryRead};
use super::keys::TopicKeys;
use super::member_store::{PartWrite, PresenceKey, PresenceRead, StoredPresence};
use super::sync::lock;
use crate::history::{HistoryConfig, Position};
use history::Histories;

/// The hub: every [`MemoryBackplane`] made from it (or from a clone of it) sees the
/// others' publishes, like clients of one Redis.
///
/// ```
/// use jsonrpc_peer::cluster::MemoryHub;
///
/// let hub = MemoryHub::new();
/// let (a, b) = (hub.backplane(), hub.backplane());
/// b.cut(); // b loses the bus: its publishes fail, it receives nothing, it gets `Down`
/// b.restore(); // and `Up`, with its subscriptions as they were
/// # drop(a);
/// ```
#[derive(Clone, Default)]
pub struct MemoryHub {
    links: Arc<Mutex<Vec<Weak<Link>>>>,
    spread: usize,
    histories: Arc<Mutex<Histories>>,
    /// What the bus keeps (presence), as Redis would.
    store: Arc<Mutex<members::Store>>,
}

/// One node's link to a [`MemoryHub`].
#[derive(Clone)]
pub struct MemoryBackplane {
    link: Arc<Link>,
    hub: MemoryHub,
}

struct Link {
    subscriptions: Mutex<HashSet<String>>,
    /// Channels whose messages to this link are lost until `regain`.
    lost: Mutex<Vec<String>>,
    /// Channels this link's publishes to are refused for good.
    refused: Mutex<Vec<String>>,
    /// Channels this link's publishes to fail for now, the rest going through.
    unreachable: Mutex<Vec<String>>,
    tx: mpsc::Sender<BusEvent>,
    rx: Mutex<Option<mpsc::Receiver<BusEvent>>>,
    cut: AtomicBool,
    /// Messages to this link lost silently, from the next one on.
    drop_next: AtomicU64,
    /// Publishes from this link delivered but answered with an error (a lost ack).
    lose_acks: AtomicU64,
    delay_ms: AtomicU64,
    /// Messages lost because the consumer did not keep up.
    overflowed: AtomicU64,
    /// Events kept back, in order, while [`MemoryBackplane::hold`] is on.
    held: Mutex<Option<Vec<BusEvent>>>,
}

/// Events a link holds for a consumer that has not read them (default of
/// [`MemoryHub::backplane`]).
const EVENT_CAPACITY: usize = 65_536;

/// Room kept in a link's stream for the events that are not messages (`Down`, `Up`,
/// `Subscribed`, `Interrupted`): a consumer that has fallen behind loses messages,
/// counted, but still hears that the bus went away and came back.
const RESERVED: usize = 64;

impl MemoryHub {
    /// A hub with no links.
    pub fn new() -> Self {
        MemoryHub::default()
    }

    /// A hub whose links ask the cluster to spread broadcasts and heartbeats over
    /// `spread` channels ([`Backplane::spread`]), as a Redis Cluster's do.
    pub fn with_spread(spread: usize) -> Self {
        MemoryHub {
            spread,
            ..MemoryHub::default()
        }
    }

    /// A new link, for one node.
    pub fn backplane(&self) -> MemoryBackplane {
        self.backplane_with_capacity(EVENT_CAPACITY)
    }

    /// A new link that holds at most `capacity` unread events; past that, messages to it
    /// are lost (and counted), as Redis drops a subscriber that falls too far behind.
    pub fn backplane_with_capacity(&self, capacity: usize) -> MemoryBackplane {
        let (tx, rx) = mpsc::channel(capacity.max(1) + RESERVED);
        let link = Arc::new(Link {
            subscriptions: Mutex::new(HashSet::new()),
            lost: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
            unreachable: Mutex::new(Vec::new()),
            tx,
            rx: Mutex::new(Some(rx)),
            cut: AtomicBool::new(false),
            drop_next: AtomicU64::new(0),
            lose_acks: AtomicU64::new(0),
            delay_ms: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
            held: Mutex::new(None),
        });
        let mut links = lock(&self.links);
        links.retain(|l| l.strong_count() > 0);
        links.push(Arc::downgrade(&link));
        MemoryBackplane {
            link,
            hub: self.clone(),
        }
    }

    /// How many live links are subscribed to `channel` (Redis's `PUBSUB NUMSUB`).
    pub fn subscribers(&self, channel: &str) -> usize {
        self.live()
            .iter()
            .filter(|l| lock(&l.subscriptions).contains(channel))
            .count()
    }

    /// Cuts every link (the bus goes away).
    pub fn cut_all(&self) {
        self.set_all(true);
    }

    /// Restores every link. All links are back before any is told so.
    pub fn restore_all(&self) {
        self.set_all(false);
    }

    fn set_all(&self, cut: bool) {
        let links = self.live();
        let changed: Vec<_> = links
            .iter()
            .filter(|l| l.cut.swap(cut, Ordering::SeqCst) != cut)
            .collect();
        for link in changed {
            link.announce(cut);
        }
    }

    /// Everything the hub keeps (presence) is lost, as when a Redis without persistence
    /// restarts; links are not touched (cut and restore them around this for a restart).
    pub fn forget_stored(&self) {
        lock(&self.store).clear();
    }

    fn live(&self) -> Vec<Arc<Link>> {
        lock(&self.links).iter().filter_map(Weak::upgrade).collect()
    }

    /// Every topic's history is lost, as when Redis comes back empty: the next append or
    /// position of each topic starts a new epoch, from offset 1. (Cut and restore the
    /// links around it for the whole of a restart.)
    pub fn clear_history(&self) {
        lock(&self.histories).clear();
    }

    /// How many reads of history entries the hub has served (not positions, not
    /// appends): what coalesced resumes save.
    pub fn history_reads(&self) -> u64 {
        lock(&self.histories).reads
    }

    fn publish_to_links(&self, channel: &str, payload: &Bytes) {
        for link in self.live() {
            link.deliver(channel, payload);
        }
    }
}

impl Link {
    fn set_cut(&self, cut: bool) {
        if self.cut.swap(cut, Ordering::SeqCst) != cut {
            self.announce(cut);
        }
    }

    fn announce(&self, cut: bool) {
        // Subscriptions survive a cut: the link issues them again on its own.
        self.send(if cut { BusEvent::Down } else { BusEvent::Up });
    }

    /// Hands `event` to the consumer, or keeps it while held. A message the consumer
    /// has no room for is lost (counted).
    fn send(&self, event: BusEvent) {
        let mut held = lock(&self.held);
        match held.as_mut() {
            Some(held) => held.push(event),
            None => self.hand_over(event),
        }
    }

    /// Hands `event` to the consumer now.
    fn hand_over(&self, event: BusEvent) {
        let message = matches!(event, BusEvent::Message { .. });
        // Serialized by the `held` lock: the room seen is not taken meanwhile.
        if message && self.tx.capacity() <= RESERVED {
            self.overflowed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.tx.try_send(event).is_err() && message {
            self.overflowed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn deliver(&self, channel: &str, payload: &Bytes) {
        if self.cut.load(Ordering::SeqCst) {
            return;
        }
        // Held until the message is handed over: a subscription's `Subscribed` event
        // and the messages on its channel reach the consumer in the order they happened.
        let subscriptions = lock(&self.subscriptions);
        if !subscriptions.contains(channel) || lock(&self.lost).iter().any(|c| c == channel) {
            return;
        }
        let lost = self
            .drop_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if lost.is_ok() {
            return;
        }
        self.send(BusEvent::Message {
            channel: channel.to_owned(),
            payload: payload.clone(),
        });
        drop(subscriptions);
    }

    fn check(&self) -> Result<(), BackplaneError> {
        if self.cut.load(Ordering::SeqCst) {
            Err(BackplaneError::Unavailable("link cut".into()))
        } else {
            Ok(())
        }
    }
}

impl MemoryBackplane {
    /// Cuts this link: publishes and subscribes fail, nothing is received, and the
    /// consumer gets [`BusEvent::Down`].
    pub fn cut(&self) {
        self.link.set_cut(true);
    }

    /// Restores this link: the consumer gets [`BusEvent::Up`]; subscriptions are as
    /// they were before the cut.
    pub fn restore(&self) {
        self.link.set_cut(false);
    }

    /// The next `n` messages for this link are lost without a word (a lossy bus).
    pub fn drop_next(&self, n: u64) {
        self.link.drop_next.store(n, Ordering::SeqCst);
    }

    /// The next `n` publishes from this link are delivered but fail (the bus took them
    /// and the answer was lost): the publisher sends them again, and receivers must
    /// drop the copies.
    pub fn lose_acks(&self, n: u64) {
        self.link.lose_acks.store(n, Ordering::SeqCst);
    }

    /// Every publish from this link waits `delay` before it is delivered (a slow bus;
    /// order is kept).
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.link.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Messages on `channels` to this link are lost, the rest still arrive (one server of
    /// several went away), until [`regain`](Self::regain).
    pub fn lose(&self, channels: &[&str]) {
        lock(&self.link.lost).extend(channels.iter().map(|c| (*c).to_owned()));
    }

    /// Publishes from this link to `channels` fail with [`BackplaneError::Refused`] and
    /// reach no one, as Redis refuses a channel its ACL does not allow.
    pub fn refuse(&self, channels: &[&str]) {
        lock(&self.link.refused).extend(channels.iter().map(|c| (*c).to_owned()));
    }

    /// Publishes from this link to `channels` fail with
    /// [`BackplaneError::Unavailable`] and reach no one, while the others go through:
    /// one shard of a Redis Cluster without a master. In a
    /// [`publish_many`](Backplane::publish_many), those messages fail as
    /// [`BackplaneError::Partial`]. Until [`reach`](Self::reach).
    pub fn unreach(&self, channels: &[&str]) {
        lock(&self.link.unreachable).extend(channels.iter().map(|c| (*c).to_owned()));
    }

    /// Ends [`unreach`](Self::unreach).
    pub fn reach(&self) {
        lock(&self.link.unreachable).clear();
    }

    /// Ends [`lose`](Self::lose): the consumer gets [`BusEvent::Interrupted`] with the
    /// channels it was subscribed to among them.
    pub fn regain(&self) {
        let lost = std::mem::take(&mut *lock(&self.link.lost));
        let subscribed = lock(&self.link.subscriptions);
        let channels: Vec<String> = lost
            .into_iter()
            .filter(|c| subscribed.contains(c))
            .collect();
        drop(subscribed);
        if !channels.is_empty() {
            self.link.send(BusEvent::Interrupted { channels });
        }
    }

    /// Holds every event for this link (messages, `Down`, `Up`, `Subscribed`), in order,
    /// until [`release`](Self::release): a consumer that has not read them yet, while
    /// the rest of the cluster moves on.
    pub fn hold(&self) {
        lock(&self.link.held).get_or_insert_with(Vec::new);
    }

    /// Ends [`hold`](Self::hold): the held events go to the consumer, in order.
    pub fn release(&self) {
        // Under the lock, so that nothing sent meanwhile overtakes them.
        let mut held = lock(&self.link.held);
        for event in held.take().unwrap_or_default() {
            self.link.hand_over(event);
        }
    }

    /// Messages lost because this link's consumer did not keep up.
    pub fn overflowed(&self) -> u64 {
        self.link.overflowed.load(Ordering::Relaxed)
    }
}

impl Backplane for MemoryBackplane {
    fn dropped(&self) -> u64 {
        self.overflowed()
    }

    fn publish(&self, channel: &str, payload: Bytes) -> BoxFuture<'_, Result<(), BackplaneError>> {
        let channel = channel.to_owned();
        Box::pin(async move {
            self.link.check()?;
            let delay = self.link.delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                self.link.check()?;
            }
            if lock(&self.link.refused).contains(&channel) {
                return Err(BackplaneError::Refused(format!("{channel} is not allowed")));
            }
            if lock(&self.link.unreachable).contains(&channel) {
                return Err(BackplaneError::Unavailable(format!(
                    "{channel} is unreachable"
                )));
            }
            self.hub.publish_to_links(&channel, &payload);
            let lost = self
                .link
                .lose_acks
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if lost.is_ok() {
                return Err(BackplaneError::Unavailable("answer lost".into()));
            }
            Ok(())
        })
    }

    /// One after another, as the trait's own; a message on an
    /// [`unreach`](Self::unreach)ed channel fails alone ([`BackplaneError::Partial`]).
    fn publish_many(
        &self,
        messages: Vec<(String, Bytes)>,
    ) -> BoxFuture<'_, Result<(), BackplaneError>> {
        Box::pin(async move {
            let mut failed = Vec::new();
            let mut why = String::new();
            for (at, (channel, payload)) in messages.into_iter().enumerate() {
                let unreachable = lock(&self.link.unreachable).contains(&channel);
                match self.publish(&channel, payload).await {
                    Err(BackplaneError::Unavailable(e)) if unreachable => {
                        failed.push(at);
                        why = e;
                    }
                    result => result?,
                }
            }
            match failed.is_empty() {
                true => Ok(()),
                false => Err(BackplaneError::Partial { failed, why }),
            }
        })
    }

    fn subscribe(&self, channel: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
        let channel = channel.to_owned();
        Box::pin(async move {
            self.link.check()?;
            let mut subscriptions = lock(&self.link.subscriptions);
            if subscriptions.insert(channel.clone()) {
                // Under the lock that delivery takes: in the stream, before every
                // message published on the channel from now on.
                self.link.send(BusEvent::Subscribed { channel });
            }
            Ok(())
        })
    }

    fn unsubscribe(&self, channel: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
        let channel = channel.to_owned();
        Box::pin(async move {
            self.link.check()?;
            lock(&self.link.subscriptions).remove(&channel);
            Ok(())
        })
    }

    fn presence_write(
        &self,
        writes: Vec<PartWrite>,
    ) -> BoxFuture<'_, Result<Vec<String>, BackplaneError>> {
        Box::pin(async move {
            self.link.check()?;
            let mut store = lock(&self.hub.store);
            Ok(writes.into_iter().map(|w| store.write(w)).collect())
        })
    }

    fn presence_read(
        &self,
        read: PresenceRead,
    ) -> BoxFuture<'_, Result<StoredPresence, BackplaneError>> {
        Box::pin(async move {
            self.link.check()?;
            Ok(lock(&self.hub.store).read(&read))
        })
    }

    fn presence_refresh(
        &self,
        keys: Vec<PresenceKey>,
        node: &str,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<bool>, BackplaneError>> {
        let node = node.to_owned();
        Box::pin(async move {
            self.link.check()?;
            Ok(lock(&self.hub.store).refresh(&keys, &node, ttl))
        })
    }

    fn events(&self) -> Option<mpsc::Receiver<BusEvent>> {
        lock(&self.link.rx).take()
    }

    fn spread(&self) -> usize {
        self.hub.spread.max(1)
    }

    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Position, BackplaneError>> {
        Box::pin(async move {
            self.link.check()?;
            let delay = self.link.delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                self.link.check()?;
            }
            let now = tokio::time::Instant::now();
            // Recorded and published under one lock: one order for every link.
            let mut histories = lock(&self.hub.histories);
            let (epoch, offset) = histories.append(
                &append.keys.meta,
                append.bounds,
                append.new_epoch,
                append.data,
                now,
            );
            self.hub
                .publish_to_links(&append.keys.channel, &append.message(&epoch, offset));
            drop(histories);
            let lost = self
                .link
                .lose_acks
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if lost.is_ok() {
                return Err(BackplaneError::Unavailable("answer lost".into()));
            }
            Ok(Position { epoch, offset })
        })
    }

    fn read_history<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        after: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        Box::pin(async move {
            self.link.check()?;
            let now = tokio::time::Instant::now();
            Ok(lock(&self.hub.histories).read(&keys.meta, bounds, after, max, now))
        })
    }

    fn history_position<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        new_epoch: &'a str,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        Box::pin(async move {
            self.link.check()?;
            let now = tokio::time::Instant::now();
            Ok(lock(&self.hub.histories).position(&keys.meta, bounds, new_epoch, now))
        })
    }
}

impl std::fmt::Debug for MemoryBackplane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackplane")
            .field("cut", &self.link.cut.load(Ordering::Relaxed))
            .field("subscriptions", &lock(&self.link.subscriptions).len())
            .finish()
    }
}

impl std::fmt::Debug for MemoryHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryHub")
            .field("links", &self.live().len())
            .finish()
    }
}
