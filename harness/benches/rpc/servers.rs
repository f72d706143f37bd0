//! The servers, in this process on the server thread: jsonrpc-peer's, the baseline's and
//! jsonrpsee's side by side; and jsonrpc-peer's client.

use jsonrpc_peer::{
    connect_with_config, Caller, Context, Peer, PeerConfig, Router, RpcError, Server, ServerHandle,
};
use std::sync::{Arc, OnceLock};

use crate::jsonrpsee::JsonrpseeServer;
use crate::measure::Tracker;
use crate::raw::RawServer;
use crate::{ADD, FLOOD, TICK};

pub(crate) struct Servers {
    pub(crate) ours_url: String,
    pub(crate) raw_url: String,
    pub(crate) jsonrpsee_url: String,
    /// Kept so the servers run as long as the bench.
    pub(crate) _ours: ServerHandle,
    pub(crate) _raw: RawServer,
    pub(crate) _jsonrpsee: JsonrpseeServer,
}

impl Servers {
    pub(crate) async fn start() -> Servers {
        let server = Server::bind("127.0.0.1:0")
            .await
            .expect("bind")
            .peer_config(ours_config());
        let ours_url = format!("ws://{}", server.local_addr().expect("address"));
        let ours = server.handle();
        tokio::spawn(server.serve(ours_router()));
        let (raw, addr) = RawServer::start().await;
        let (jsonrpsee, jsonrpsee_addr) = JsonrpseeServer::start().await;
        Servers {
            ours_url,
            raw_url: format!("ws://{addr}"),
            jsonrpsee_url: format!("ws://{jsonrpsee_addr}"),
            _ours: ours,
            _raw: raw,
            _jsonrpsee: jsonrpsee,
        }
    }
}

/// The server's methods: `add` answers at once; `flood` sends `n` notifications to
/// the caller, then answers.
pub(crate) fn ours_router() -> Router {
    Router::new()
        .method(ADD, |_cx: Context, [a, b]: [i64; 2]| async move {
            Ok::<_, RpcError>(a + b)
        })
        .method(FLOOD, |cx: Context, [n]: [u64; 1]| async move {
            for i in 0..n {
                cx.peer()
                    .notify(TICK, [i])
                    .await
                    .map_err(RpcError::internal_error)?;
            }
            Ok::<_, RpcError>(n)
        })
}

/// A jsonrpc-peer client whose `tick` notifications count on `tracker`.
pub(crate) async fn connect_ours(url: &str, tracker: &Arc<Tracker>) -> Peer {
    let tracker = tracker.clone();
    let router = Router::new().notification(TICK, move |_cx: Context, _: [u64; 1]| {
        tracker.hit();
        std::future::ready(())
    });
    connect_with_config(url, router, &ours_config())
        .await
        .expect("connect")
}

/// The settings of our server's and clients' connections: the defaults, with the
/// `Metrics` call layer under `--metrics`.
static OURS_CONFIG: OnceLock<PeerConfig> = OnceLock::new();

pub(crate) fn ours_config() -> PeerConfig {
    OURS_CONFIG.get_or_init(PeerConfig::default).clone()
}

/// `--metrics`: installs a Prometheus recorder (what an application would, with its
/// upkeep once a second on a thread of its own, as its HTTP listener would run it)
/// and gives our connections the `Metrics` layer. Before anything connects.
pub(crate) fn with_metrics() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder");
    std::thread::spawn(move || loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        handle.run_upkeep();
    });
    let config = PeerConfig::default().layer(jsonrpc_peer::metrics::Metrics::new());
    assert!(OURS_CONFIG.set(config).is_ok(), "set before any connection");
}
