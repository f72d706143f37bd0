//! A [`Backplane`] on Redis Cluster's sharded pub/sub (feature `redis-cluster`).
//!
//! Every channel is a shard channel (`SPUBLISH`, `SSUBSCRIBE`): its messages stay within
//! the shard that serves its slot, where a classic `PUBLISH` on a cluster goes to every
//! node of every shard. The slot is Redis's: CRC16 of the channel's name, or of its hash
//! tag (the text between `{` and `}`) when it has one. So topic channels (`jp:t:<topic>`)
//! and node channels (`jp:n:<node>`) spread over the shards by name, and topics named
//! with one tag (`room:{42}:chat`, `room:{42}:typing`) share a shard. Broadcasts and
//! heartbeats are spread too ([`RedisOptions::spread`], 16 channels by default, their
//! slots evenly apart): each node publishes on one of them and listens to all, so no
//! shard carries every node's broadcasts.
//!
//! Two sides, each with one connection per master:
//! - publishing (publisher.rs): one writer, pipelines per master, `MOVED` followed after
//!   a fresh slot map;
//! - subscribing (shards.rs): one task that owns the channel set and the links, and
//!   reports `Down` (no master reachable), `Up` (every master linked, every channel held
//!   again) and [`BusEvent::Interrupted`] (the channels of one lost master or moved slot,
//!   held again elsewhere).
//!
//! Both share the slot map (topology.rs), fetched with `CLUSTER SLOTS` from the masters
//! known, their replicas, then the seeds.
//!
//! Topic history runs the same script as on one Redis (scripts.rs), through redis-rs's
//! cluster client: a topic's stream, meta and channel share a slot (keys.rs), so each
//! call runs on that slot's master, `SPUBLISH`es there, and follows `MOVED`, `ASK` and
//! `TRYAGAIN` while the slot moves.

mod publisher;
mod shards;
mod topology;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo};
use tokio::sync::mpsc;

use super::members;
use super::scripts::Scripts;
use super::subscriber::{Control, Shared, RESERVED};
use super::{control, enqueue, unavailable, Publish, RedisOptions};
use crate::cluster::backplane::{
    Append, Backplane, BackplaneError, BoxFuture, BusEvent, HistoryRead,
};
use crate::cluster::keys::TopicKeys;
use crate::cluster::member_store::{PartWrite, PresenceKey, PresenceRead, StoredPresence};
use crate::history::{HistoryConfig, Position};
use shards::Shards;
use topology::Map;

/// A [`Backplane`] on a Redis Cluster (Redis 7 or later), through sharded pub/sub.
///
/// `seeds` are some of the cluster's nodes, `redis://HOST:PORT` (any one that answers
/// gives the whole map). Messages on a shard whose master is lost are lost to this
/// node until it is subscribed again on the master that took over (a promoted replica):
/// the stream then says [`BusEvent::Interrupted`] with those channels only. With no
/// master reachable it says [`BusEvent::Down`], then [`BusEvent::Up`] once every master
/// is linked again, like [`RedisBackplane`](super::RedisBackplane).
///
/// ```no_run
/// # async fn run() -> Result<(), jsonrpc_peer::cluster::BackplaneError> {
/// use jsonrpc_peer::cluster::{Backplane, RedisClusterBackplane, RedisOptions};
///
/// let seeds = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
/// let bus = RedisClusterBackplane::connect(seeds, RedisOptions::default()).await?;
/// let mut events = bus.events().expect("taken once");
/// bus.subscribe("jp:t:prices").await?;
/// bus.publish("jp:t:prices", "97000".into()).await?;
/// let first = events.recv().await; // Subscribed { channel: "jp:t:prices" }
/// let second = events.recv().await; // Message { channel: "jp:t:prices", .. }
/// # Ok(()) }
/// ```
pub struct RedisClusterBackplane {
    /// The history script, through the cluster client.
    history: Scripts<ClusterConnection>,
    /// Presence's scripts, through the same client (a clone of its connection).
    store: ClusterConnection,
    publish_tx: mpsc::Sender<Publish>,
    control_tx: mpsc::Sender<Control>,
    events: Mutex<Option<mpsc::Receiver<BusEvent>>>,
    shared: Arc<Shared>,
    map: Arc<Map>,
    spread: usize,
}

impl RedisClusterBackplane {
    /// Asks the seeds for the slot map, dials every master (both sides) and starts the
    /// backplane's tasks. Fails if no seed answers or a master cannot be reached now;
    /// once started it follows the cluster by itself (failovers, moved slots, the whole
    /// cluster gone and back) for as long as the backplane lives. Must be called within
    /// a tokio runtime.
    pub async fn connect<I, S>(seeds: I, options: RedisOptions) -> Result<Self, BackplaneError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let seeds = seeds
            .into_iter()
            .map(|seed| seed_address(seed.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if seeds.is_empty() {
            return Err(BackplaneError::Unavailable(
                "no Redis Cluster seed given".into(),
            ));
        }
        let client = ClusterClientBuilder::new(seeds.iter().map(|s| format!("redis://{s}")))
            .connection_timeout(options.connect_timeout)
            .response_timeout(options.response_timeout)
            // A moved slot is a retry (at once for MOVED and ASK); TRYAGAIN and a master
            // gone wait 10 ms growing to 500 ms. The caller hears of what still fails.
            .retries(6)
            .min_retry_wait(10)
            .max_retry_wait(500)
            .build()
            .map_err(unavailable)?;
        let scripts = client.get_async_connection().await.map_err(unavailable)?;
        let store = scripts.clone();
        let history = Scripts::start(
            scripts,
            "SPUBLISH",
            options.publish_queue,
            options.batch_max,
        );
        let map = Map::new(seeds, options.connect_timeout, options.response_timeout)
            .await
            .map_err(BackplaneError::Unavailable)?;
        let map = Arc::new(map);
        let shared = Arc::new(Shared::default());
        let (events_tx, events_rx) = mpsc::channel(options.event_capacity + RESERVED);
        let (control_tx, control_rx) = mpsc::channel(64);
        let (mut shards, inputs) = Shards::new(
            map.clone(),
            options.clone(),
            events_tx,
            shared.clone(),
            control_rx,
        );
        shards
            .dial_all()
            .await
            .map_err(BackplaneError::Unavailable)?;
        shared.up.store(true, std::sync::atomic::Ordering::Release);

        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(options.connect_timeout)
            .set_response_timeout(options.response_timeout);
        let (publish_tx, publish_rx) = mpsc::channel(options.publish_queue);
        tokio::spawn(publisher::write_loop(
            map.clone(),
            publish_rx,
            options.batch_max,
            config,
            shared.clone(),
        ));
        tokio::spawn(shards.run(inputs));
        Ok(RedisClusterBackplane {
            history,
            store,
            publish_tx,
            control_tx,
            events: Mutex::new(Some(events_rx)),
            shared,
            map,
            spread: options.spread,
        })
    }

    /// Whether every master was reachable and every subscription held, the last time
    /// that changed (false from a `Down` to the next `Up`).
    pub fn is_up(&self) -> bool {
        self.shared.up.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The masters (`host:port`) of the slot map as last fetched.
    pub fn masters(&self) -> Vec<String> {
        self.map.get().masters().to_vec()
    }
}

/// `host:port` of a seed given as `redis://HOST:PORT` (or `HOST:PORT`).
fn seed_address(seed: &str) -> Result<String, BackplaneError> {
    let url = if seed.contains("://") {
        seed.to_owned()
    } else {
        format!("redis://{seed}")
    };
    let info = url
        .as_str()
        .into_connection_info()
        .map_err(|e| BackplaneError::Unavailable(format!("seed {seed:?}: {e}")))?;
    match info.addr {
        ConnectionAddr::Tcp(host, port) if host.contains(':') => Ok(format!("[{host}]:{port}")),
        ConnectionAddr::Tcp(host, port) => Ok(format!("{host}:{port}")),
        _ => Err(BackplaneError::Unavailable(format!(
            "seed {seed:?}: a Redis Cluster is reached over TCP, redis://HOST:PORT"
        ))),
    }
}

impl std::fmt::Debug for RedisClusterBackplane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterBackplane")
            .field("up", &self.is_up())
            .field("masters", &self.masters())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl Backplane for RedisClusterBackplane {
    /// Messages dropped because the event stream was full.
    fn dropped(&self) -> u64 {
        self.shared
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many times a subscribing link to a master was dialed again after a loss.
    fn reconnects(&self) -> u64 {
        self.shared
            .reconnects
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn publish(&self, channel: &str, payload: Bytes) -> BoxFuture<'_, Result<(), BackplaneError>> {
        let sent = enqueue(
            &self.publish_tx,
            self.is_up(),
            vec![(channel.to_owned(), payload)],
        );
        Box::pin(async move {
            sent.await.map_err(|e| match e {
                // The one message: not a part.
                BackplaneError::Partial { why, .. } => BackplaneError::Unavailable(why),
                e => e,
            })
        })
    }

    /// One queue entry: split by master, one pipeline each (with whatever else waits).
    /// Messages whose master failed while others answered fail as
    /// [`BackplaneError::Partial`].
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
        let up = self.is_up();
        Box::pin(async move {
            if !up {
                return Err(BackplaneError::Unavailable("redis cluster is down".into()));
            }
            members::write_per_topic(&self.store, writes)
                .await
                .map_err(unavailable)
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
                return Err(BackplaneError::Unavailable("redis cluster is down".into()));
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
        let up = self.is_up();
        let node = node.to_owned();
        Box::pin(async move {
            if !up {
                return Err(BackplaneError::Unavailable("redis cluster is down".into()));
            }
            members::refresh_per_topic(&self.store, &keys, &node, ttl)
                .await
                .map_err(unavailable)
        })
    }

    fn events(&self) -> Option<mpsc::Receiver<BusEvent>> {
        self.events.lock().ok()?.take()
    }

    fn spread(&self) -> usize {
        self.spread
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_tcp_addresses() {
        assert_eq!(
            seed_address("redis://127.0.0.1:7000").unwrap(),
            "127.0.0.1:7000"
        );
        assert_eq!(seed_address("10.1.2.3:7001").unwrap(), "10.1.2.3:7001");
        assert!(seed_address("redis+unix:///tmp/r.sock").is_err());
        assert!(seed_address("http://x").is_err());
    }
}
