//! A [`Backplane`] on Redis pub/sub (feature `redis`), on the `redis` crate with RESP3.
//!
//! Two connections per backplane:
//! - a publishing one (the crate's `ConnectionManager`, which redials by itself, dialed
//!   anew by this module when it keeps a failed redial: `publisher.rs`), fed by one
//!   writer task from a queue filled at call time: publishes keep their call order and
//!   go out as pipelines;
//! - a subscribing one that this module owns and redials itself, with [`Backoff`]. It
//!   keeps the subscription set and issues all of it again on every new connection
//!   before reporting [`BusEvent::Up`], instead of trusting a client's automatic
//!   resubscription: Redis adapters that did have lost every message after a restart
//!   while looking healthy.
//!
//! Liveness: the subscribing connection publishes a probe on a channel of its own every
//! [`RedisOptions::probe_interval`] and expects it back. A link that stays silent for
//! [`RedisOptions::probe_misses`] intervals (a frozen Redis, a half-open socket) is
//! dropped and dialed again, with `Down` and `Up` reported like any other loss. Only
//! intervals the link's task saw on time count: when this process is too busy to read
//! (its runtime queue long with connection tasks), Redis's silence is not what it saw.

mod append;
#[cfg(feature = "redis-cluster")]
mod cluster;
mod history;
mod members;
mod publisher;
mod scripts;
mod subscriber;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use redis::aio::{ConnectionLike, ConnectionManagerConfig};

use publisher::Publisher;
use redis::{Client, IntoConnectionInfo, ProtocolVersion, Value};
use tokio::sync::{mpsc, oneshot};

#[cfg(feature = "redis-cluster")]
pub use cluster::RedisClusterBackplane;
use subscriber::{Control, Shared, Subscriber};

use super::backplane::{Append, Backplane, BackplaneError, BoxFuture, BusEvent, HistoryRead};
use super::keys::TopicKeys;
use super::member_store::{PartWrite, PresenceKey, PresenceRead, StoredPresence};
use crate::history::{HistoryConfig, Position};
use crate::reconnect::Backoff;

/// Settings of a [`RedisBackplane`]; every one has a default.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    prefix: String,
    probe_interval: Duration,
    probe_misses: u32,
    event_capacity: usize,
    publish_queue: usize,
    batch_max: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    backoff: Backoff,
    spread: usize,
    topology_interval: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            prefix: "jp".to_owned(),
            probe_interval: Duration::from_secs(1),
            probe_misses: 2,
            event_capacity: 4096,
            publish_queue: 4096,
            batch_max: 256,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            backoff: Backoff {
                initial: Duration::from_millis(50),
                max: Duration::from_secs(2),
                multiplier: 2.0,
            },
            spread: 16,
            topology_interval: Duration::from_secs(5),
        }
    }
}

impl RedisOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The prefix of this backplane's own keys: its probe channel is
    /// `{prefix}:probe:{random}` (default `"jp"`). Channels given to
    /// [`Backplane::publish`] and [`Backplane::subscribe`] are used as they are.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How often the subscribing connection sends itself a probe (default 1 s).
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How many probe intervals without the probe coming back (intervals this process
    /// saw on time: a tick over half an interval late does not count) make the subscribing
    /// connection count as dead and be dialed again (default 2, at least 1).
    pub fn probe_misses(mut self, misses: u32) -> Self {
        self.probe_misses = misses.max(1);
        self
    }

    /// The bound of the event stream (default 4096 events). A consumer that falls that
    /// far behind loses messages (counted by
    /// [`Backplane::dropped`], [`ClusterStats::bus_dropped`](super::ClusterStats::bus_dropped)); `Down` and
    /// `Up` are never dropped, and room is kept beyond it for `Subscribed` and
    /// `Interrupted`.
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity.max(1);
        self
    }

    /// How many publishes may wait for the writer (default 4096); past that `publish`
    /// waits for room.
    pub fn publish_queue(mut self, len: usize) -> Self {
        self.publish_queue = len.max(1);
        self
    }

    /// The most `publish` calls sent as one pipeline (default 256; a `publish_many`
    /// counts as one).
    pub fn batch_max(mut self, len: usize) -> Self {
        self.batch_max = len.max(1);
        self
    }

    /// How long one dial may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long Redis may take to answer one command or pipeline (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The waits between dials of the subscribing connection (default 50 ms growing to
    /// 2 s, full jitter).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Redis Cluster only: over how many shard channels broadcasts and heartbeats are
    /// spread (default 16, from 1 to 1024; see [`Backplane::spread`]). Their slots are
    /// spread evenly, so up to this many masters share that traffic. Every node of a
    /// cluster must use the same number: a node listens only to the channels its own
    /// number names.
    pub fn spread(mut self, channels: usize) -> Self {
        self.spread = channels.clamp(1, 1024);
        self
    }

    /// Redis Cluster only: how often the slot map is fetched again when nothing said it
    /// changed (default 5 s). Redis announces most changes (`MOVED`, a `sunsubscribe`
    /// when a slot leaves a master, a closed connection when one dies); this catches
    /// the rest.
    pub fn topology_interval(mut self, interval: Duration) -> Self {
        self.topology_interval = interval.max(Duration::from_millis(10));
        self
    }
}

/// A [`Backplane`] on a Redis server (standalone), through RESP3 pub/sub.
///
/// `url` is `redis://HOST:PORT[/DB]` or `redis+unix:///path/to/socket`; RESP3 is
/// chosen whatever the URL says. Messages published while the link is down are lost to
/// this node (Redis pub/sub keeps nothing): the stream says [`BusEvent::Down`] then
/// [`BusEvent::Up`] so the layer above can report the gap.
///
/// Its errors convert into [`jsonrpc_peer::Error`](crate::Error) with `?`:
///
/// ```no_run
/// # async fn run() -> jsonrpc_peer::Result<()> {
/// use jsonrpc_peer::cluster::{Backplane, RedisBackplane, RedisOptions};
///
/// let bus = RedisBackplane::connect("redis+unix:///tmp/r.sock", RedisOptions::default()).await?;
/// let mut events = bus.events().expect("taken once");
/// bus.subscribe("jp:all").await?;
/// bus.publish("jp:all", "hello".into()).await?;
/// let first = events.recv().await; // Subscribed { channel: "jp:all" }
/// let second = events.recv().await; // Message { channel: "jp:all", payload: "hello" }
/// # Ok(()) }
/// ```
pub struct RedisBackplane {
    /// The history script on the publishing connection (multiplexed: concurrent calls
    /// go out pipelined), its appends committed in groups (append.rs).
    history: scripts::Scripts<Publisher>,
    /// Presence's reads and writes (a clone of the publishing connection).
    store: Publisher,
    publish_tx: mpsc::Sender<Publish>,
    control_tx: mpsc::Sender<Control>,
    events: Mutex<Option<mpsc::Receiver<BusEvent>>>,
    shared: Arc<Shared>,
}

/// One `publish` or `publish_many` call, in the writer's queue.
struct Publish {
    messages: Vec<(String, Bytes)>,
    done: oneshot::Sender<Result<(), BackplaneError>>,
}

impl RedisBackplane {
    /// Dials Redis (both connections) and starts the backplane's tasks. Fails if Redis
    /// cannot be reached now; once started it redials by itself, for as long as the
    /// backplane lives. Must be called within a tokio runtime.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, BackplaneError> {
        let mut info = url.into_connection_info().map_err(unavailable)?;
        info.redis.protocol = ProtocolVersion::RESP3;
        let client = Client::open(info).map_err(unavailable)?;
        let shared = Arc::new(Shared::default());

        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(options.connect_timeout)
            .set_response_timeout(options.response_timeout)
            .set_number_of_retries(1)
            .set_max_delay(
                options
                    .backoff
                    .max
                    .as_millis()
                    .try_into()
                    .unwrap_or(u64::MAX),
            );
        let publisher = Publisher::connect(client.clone(), manager_config)
            .await
            .map_err(unavailable)?;

        let (events_tx, events_rx) = mpsc::channel(options.event_capacity + subscriber::RESERVED);
        let subscriber = Subscriber::new(client, options.clone(), events_tx, shared.clone());
        let link = subscriber.dial().await.map_err(unavailable)?;
        shared.up.store(true, Ordering::Release);

        let store = publisher.clone();
        let (publish_tx, publish_rx) = mpsc::channel(options.publish_queue);
        let (control_tx, control_rx) = mpsc::channel(64);
        let history = scripts::Scripts::start(
            publisher.clone(),
            "PUBLISH",
            options.publish_queue,
            options.batch_max,
        );
        tokio::spawn(write_loop(publisher, publish_rx, options.batch_max));
        tokio::spawn(subscriber.run(link, control_rx));
        Ok(RedisBackplane {
            history,
            store,
            publish_tx,
            control_tx,
            events: Mutex::new(Some(events_rx)),
            shared,
        })
    }

    /// Whether the subscribing connection is up now (every subscription issued).
    pub fn is_up(&self) -> bool {
        self.shared.up.load(Ordering::Acquire)
    }
}

/// Hands a subscribe or unsubscribe to the subscribing side and waits for its answer.
fn control(
    control_tx: &mpsc::Sender<Control>,
    make: impl FnOnce(oneshot::Sender<Result<(), BackplaneError>>) -> Control,
) -> BoxFuture<'static, Result<(), BackplaneError>> {
    let (done, answer) = oneshot::channel();
    let control_tx = control_tx.clone();
    let cmd = make(done);
    Box::pin(async move {
        control_tx
            .send(cmd)
            .await
            .map_err(|_| BackplaneError::Closed)?;
        answer.await.map_err(|_| BackplaneError::Closed)?
    })
}

impl std::fmt::Debug for RedisBackplane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackplane")
            .field("up", &self.is_up())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

/// Puts one `publish` or `publish_many` call in the writer's queue, at once when there
/// is room (so call order is send order), and waits for the writer's answer. Fails at
/// once while the bus is down (`up` false).
fn enqueue(
    publish_tx: &mpsc::Sender<Publish>,
    up: bool,
    messages: Vec<(String, Bytes)>,
) -> BoxFuture<'static, Result<(), BackplaneError>> {
    if !up {
        return Box::pin(async { Err(BackplaneError::Unavailable("redis link is down".into())) });
    }
    if messages.is_empty() {
        return Box::pin(async { Ok(()) });
    }
    let (done, answer) = oneshot::channel();
    let item = Publish { messages, done };
    // Queued now, not when the future is first polled: call order is send order.
    let queued = match publish_tx.try_send(item) {
        Ok(()) => None,
        Err(mpsc::error::TrySendError::Full(item)) => Some(item),
        Err(mpsc::error::TrySendError::Closed(_)) => {
            return Box::pin(async { Err(BackplaneError::Closed) })
        }
    };
    let publish_tx = publish_tx.clone();
    Box::pin(async move {
        if let Some(item) = queued {
            publish_tx
                .send(item)
                .await
                .map_err(|_| BackplaneError::Closed)?;
        }
        answer.await.map_err(|_| BackplaneError::Closed)?
    })
}

impl Backplane for RedisBackplane {
    /// Messages dropped because the event stream was full.
    fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// How many times the subscribing connection was dialed again after a loss.
    fn reconnects(&self) -> u64 {
        self.shared.reconnects.load(Ordering::Relaxed)
    }

    fn publish(&self, channel: &str, payload: Bytes) -> BoxFuture<'_, Result<(), BackplaneError>> {
        enqueue(
            &self.publish_tx,
            self.is_up(),
            vec![(channel.to_owned(), payload)],
        )
    }

    /// One queue entry, sent in one pipeline (with whatever else is waiting).
    fn publish_many(
        &self,
        messages: Vec<(String, Bytes)>,
    ) -> BoxFuture<'_, Result<(), BackplaneError>> {
        enqueue(&self.publish_tx, self.is_up(), messages)
    }

    fn subscribe(&self, channel: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
        let channel = channel.to_owned();
        control(&self.control_tx, move |done| {
            Control::Subscribe(channel, done)
        })
    }

    fn unsubscribe(&self, channel: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
        let channel = channel.to_owned();
        control(&self.control_tx, move |done| {
            Control::Unsubscribe(channel, done)
        })
    }

    fn presence_write(
        &self,
        writes: Vec<PartWrite>,
    ) -> BoxFuture<'_, Result<Vec<String>, BackplaneError>> {
        let mut conn = self.store.clone();
        let up = self.is_up();
        Box::pin(async move {
            if !up {
                return Err(BackplaneError::Unavailable("redis link is down".into()));
            }
            members::write(&mut conn, writes).await.map_err(unavailable)
        })
    }

    fn presence_read(
        &self,
        read: PresenceRead,
    ) -> BoxFuture<'_, Result<StoredPresence, BackplaneError>> {
        let mut conn = self.store.clone();
        let up = self.is_up();
        Box::pin(async move {
            if !up {
                return Err(BackplaneError::Unavailable("redis link is down".into()));
            }
            members::read(&mut conn, read).await.map_err(unavailable)
        })
    }

    fn presence_refresh(
        &self,
        keys: Vec<PresenceKey>,
        node: &str,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<bool>, BackplaneError>> {
        let mut conn = self.store.clone();
        let up = self.is_up();
        let node = node.to_owned();
        Box::pin(async move {
            if !up {
                return Err(BackplaneError::Unavailable("redis link is down".into()));
            }
            members::refresh(&mut conn, &keys, &node, ttl)
                .await
                .map_err(unavailable)
        })
    }

    fn events(&self) -> Option<mpsc::Receiver<BusEvent>> {
        self.events.lock().ok()?.take()
    }

    /// Committed with the other appends waiting at the time, one script call per topic.
    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Position, BackplaneError>> {
        self.history.append(append)
    }

    fn read_history<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        after: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        self.history.read(keys, bounds, after, max)
    }

    fn history_position<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        new_epoch: &'a str,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        self.history.position(keys, bounds, new_epoch)
    }
}

fn unavailable(e: redis::RedisError) -> BackplaneError {
    BackplaneError::Unavailable(e.to_string())
}

/// Sends the queue in order: whatever is waiting (up to `batch_max` calls) goes out as one
/// pipeline on the one publishing connection, so Redis sees the publishes in call order.
/// Each call gets the answers to its own publishes: a publish Redis refuses for good
/// (`NOPERM`: an ACL that does not allow the channel) fails its call with
/// [`BackplaneError::Refused`], and the calls around it are not held to it.
async fn write_loop(mut conn: Publisher, mut queue: mpsc::Receiver<Publish>, batch_max: usize) {
    let mut batch = Vec::with_capacity(batch_max);
    while queue.recv_many(&mut batch, batch_max).await > 0 {
        let mut pipe = redis::pipe();
        for (channel, payload) in batch.iter().flat_map(|item| &item.messages) {
            pipe.cmd("PUBLISH").arg(channel).arg(payload.as_ref());
        }
        let count = pipe.len();
        let mut result = conn.req_packed_commands(&pipe, 0, count).await;
        if result.as_ref().is_err_and(|e| e.is_unrecoverable_error()) {
            // The manager dials again on this error; a batch that found the old
            // connection dead (after a Redis restart, say) goes out once more on the new
            // one. Receivers drop duplicates by sequence number should one get through.
            result = conn.req_packed_commands(&pipe, 0, count).await;
        }
        match result {
            Ok(answers) if answers.len() == count => {
                let mut answers = answers.into_iter();
                for item in batch.drain(..) {
                    let own: Vec<Value> = answers.by_ref().take(item.messages.len()).collect();
                    let _ = item.done.send(publish_outcome(&item.messages, &own));
                }
            }
            Ok(answers) => {
                let e = BackplaneError::Protocol(format!(
                    "{} answers to a pipeline of {count} PUBLISH",
                    answers.len()
                ));
                for item in batch.drain(..) {
                    let _ = item.done.send(Err(clone_error(&e)));
                }
            }
            Err(e) => {
                let e = unavailable(e);
                for item in batch.drain(..) {
                    let _ = item.done.send(Err(clone_error(&e)));
                }
            }
        }
    }
}

/// One call's outcome from the answers to its publishes: the first error Redis gave,
/// as [`BackplaneError::Refused`] when it refuses for good.
fn publish_outcome(messages: &[(String, Bytes)], answers: &[Value]) -> Result<(), BackplaneError> {
    let refused = answers
        .iter()
        .zip(messages)
        .find_map(|(answer, (channel, _))| match answer {
            Value::ServerError(e) => Some((channel, e)),
            _ => None,
        });
    let Some((channel, e)) = refused else {
        return Ok(());
    };
    let why = format!(
        "PUBLISH to {channel}: {} {}",
        e.code(),
        e.details().unwrap_or_default()
    );
    Err(if e.code() == "NOPERM" {
        BackplaneError::Refused(why)
    } else {
        BackplaneError::Unavailable(why)
    })
}

fn clone_error(e: &BackplaneError) -> BackplaneError {
    match e {
        BackplaneError::Closed => BackplaneError::Closed,
        other => BackplaneError::Unavailable(other.to_string()),
    }
}
