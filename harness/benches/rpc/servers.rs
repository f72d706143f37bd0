//! The servers, in this process on the server thread: jsonrpc-peer's, the baseline's and
//! jsonrpsee's side by side; and jsonrpc-peer's client.

use jsonrpc_peer::{connect, Caller, Context, Peer, Router, RpcError, Server, ServerHandle};
use std::sync::Arc;

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
        let server = Server::bind("127.0.0.1:0").await.expect("bind");
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
    connect(url, router).await.expect("connect")
}
