//! The third contender: jsonrpsee 0.26.1's WebSocket server (`RpcModule`) and client
//! (`WsClient`) doing the same work as the other two, reviewable on its own.
//!
//! - `add` is a method, as on the other servers: `[a, b]` in, `a + b` out.
//! - jsonrpsee's server cannot send a plain notification: everything it pushes is a
//!   subscription notification, `{"jsonrpc":"2.0","method":"tick","params":
//!   {"subscription":ID,"result":[i]}}`, sent for a subscription the client asked for.
//!   So (d) is a subscription `subscribe_flood` (params `[n]`): the server accepts, sends
//!   `n` notifications through the sink (awaiting room in the connection's buffer, as
//!   ours awaits room in its queue), and ends the subscription. Where ours answers the
//!   `flood` call after the notifications, jsonrpsee answers the subscribe call first.
//! - (e) is a subscription `subscribe_tick`: every client subscribes once, the server
//!   keeps the sinks, and a broadcast is `try_send` of the same params to every sink,
//!   which is what a jsonrpsee server does to reach every connection. Each sink frames
//!   the params with its own subscription id, so jsonrpsee serializes the frame once per
//!   recipient where ours and the baseline serialize it once.
//!
//! Configuration: jsonrpsee's defaults, except `max_connections` (default 100, too few
//! for (e) and (f)) and, on the client, the subscription buffer (default 1024 items; a
//! subscription whose buffer fills is dropped, and (d)'s reader runs on the same thread
//! as the client's background task, so it is raised to hold a whole flood).

use jsonrpsee::core::client::{ClientT, Subscription, SubscriptionClientT};
use jsonrpsee::core::SubscriptionError;
use jsonrpsee::server::{Server, ServerConfig, ServerHandle, SubscriptionSink};
use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::ws_client::{WsClient, WsClientBuilder};
use jsonrpsee::{rpc_params, RpcModule};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::measure::{Meter, Sample, Tracker};
use crate::{ADD, TICK};

pub(crate) const SUBSCRIBE_FLOOD: &str = "subscribe_flood";
pub(crate) const UNSUBSCRIBE_FLOOD: &str = "unsubscribe_flood";
pub(crate) const SUBSCRIBE_TICK: &str = "subscribe_tick";
pub(crate) const UNSUBSCRIBE_TICK: &str = "unsubscribe_tick";

/// Far above any connection count the bench opens.
const MAX_CONNECTIONS: u32 = 1_000_000;
/// Room for the longest flood on the client side (see the module doc).
const SUBSCRIPTION_BUFFER: usize = 4_000_000;

/// What the server's methods share: the broadcast subscriptions, and how many
/// connections have made their call or subscription (the child server's `count`).
#[derive(Default)]
pub(crate) struct JsonrpseeState {
    pub(crate) sinks: Mutex<Vec<SubscriptionSink>>,
    pub(crate) served: AtomicUsize,
}

#[derive(Clone)]
pub(crate) struct JsonrpseeServer {
    pub(crate) state: Arc<JsonrpseeState>,
    /// Stops the server when the last clone is dropped.
    pub(crate) _handle: ServerHandle,
}

impl JsonrpseeServer {
    pub(crate) async fn start() -> (JsonrpseeServer, std::net::SocketAddr) {
        let config = ServerConfig::builder()
            .max_connections(MAX_CONNECTIONS)
            .build();
        let server = Server::builder()
            .set_config(config)
            .build("127.0.0.1:0")
            .await
            .expect("jsonrpsee binds");
        let addr = server.local_addr().expect("address");
        let state = Arc::new(JsonrpseeState::default());
        let handle = server.start(module(state.clone()));
        (
            JsonrpseeServer {
                state,
                _handle: handle,
            },
            addr,
        )
    }

    /// Connections that have made their call or their broadcast subscription.
    pub(crate) fn count(&self) -> usize {
        self.state.served.load(Ordering::SeqCst)
    }

    /// Sends `[seq]` to every broadcast subscription; how many took it.
    pub(crate) fn broadcast(&self, seq: u64) -> usize {
        let params = serde_json::value::to_raw_value(&[seq]).expect("serializes");
        let mut sinks = self.state.sinks.lock().expect("not poisoned");
        sinks.retain(|s| !s.is_closed());
        let mut queued = 0;
        for sink in sinks.iter_mut() {
            if sink.try_send(params.clone()).is_ok() {
                queued += 1;
            }
        }
        queued
    }
}

fn module(state: Arc<JsonrpseeState>) -> RpcModule<Arc<JsonrpseeState>> {
    let mut module = RpcModule::new(state);
    module
        .register_method(ADD, |params, state, _| {
            let [a, b]: [i64; 2] = params.parse()?;
            state.served.fetch_add(1, Ordering::Relaxed);
            Ok::<_, ErrorObjectOwned>(a + b)
        })
        .expect("register add");
    module
        .register_subscription(
            SUBSCRIBE_FLOOD,
            TICK,
            UNSUBSCRIBE_FLOOD,
            |params, pending, _, _| async move {
                let [n]: [u64; 1] = match params.parse() {
                    Ok(n) => n,
                    Err(e) => {
                        pending.reject(e).await;
                        return Ok(());
                    }
                };
                let sink = pending.accept().await?;
                for i in 0..n {
                    sink.send(serde_json::value::to_raw_value(&[i])?).await?;
                }
                Ok::<(), SubscriptionError>(())
            },
        )
        .expect("register subscribe_flood");
    module
        .register_subscription(
            SUBSCRIBE_TICK,
            TICK,
            UNSUBSCRIBE_TICK,
            |_, pending, state, _| async move {
                let sink = pending.accept().await?;
                state.sinks.lock().expect("not poisoned").push(sink);
                state.served.fetch_add(1, Ordering::SeqCst);
                Ok::<(), SubscriptionError>(())
            },
        )
        .expect("register subscribe_tick");
    module
}

pub(crate) async fn jsonrpsee_connect(url: &str) -> WsClient {
    WsClientBuilder::default()
        .max_buffer_capacity_per_subscription(SUBSCRIPTION_BUFFER)
        .build(url)
        .await
        .expect("jsonrpsee connects")
}

/// One `add` call through jsonrpsee's client.
pub(crate) async fn jsonrpsee_add(client: &WsClient, a: i64) -> i64 {
    client
        .request(ADD, rpc_params![a, 1])
        .await
        .expect("jsonrpsee call")
}

/// (d): subscribes for `n` notifications; the time until the last one has been read
/// (and its params parsed) by the client.
pub(crate) async fn jsonrpsee_flood(client: &WsClient, n: u64) -> Sample {
    let meter = Meter::start();
    let mut sub: Subscription<[u64; 1]> = client
        .subscribe(SUBSCRIBE_FLOOD, rpc_params![n], UNSUBSCRIBE_FLOOD)
        .await
        .expect("subscribe_flood");
    let mut last = meter.start;
    for i in 0..n {
        let [seen] = sub
            .next()
            .await
            .expect("the subscription is open")
            .expect("a tick");
        assert_eq!(seen, i);
        last = Instant::now();
    }
    let sample = meter.finish_count(n, last);
    // The server has ended the subscription; dropping it sends an unsubscribe call
    // that finds nothing, after the measurement.
    drop(sub);
    sample
}

/// (e): a client subscribed to the broadcasts; each one counts on `tracker`.
pub(crate) async fn jsonrpsee_listener(
    url: &str,
    tracker: Arc<Tracker>,
) -> (WsClient, tokio::task::JoinHandle<()>) {
    let client = jsonrpsee_connect(url).await;
    let mut sub: Subscription<[u64; 1]> = client
        .subscribe(SUBSCRIBE_TICK, rpc_params![], UNSUBSCRIBE_TICK)
        .await
        .expect("subscribe_tick");
    let reader = tokio::spawn(async move {
        while let Some(Ok(_)) = sub.next().await {
            tracker.hit();
        }
    });
    (client, reader)
}
