//! The baseline every ratio rests on: a raw tokio-tungstenite + serde_json server and
//! client doing the same work as jsonrpc-peer (same frames, same depth, writes coalesced).

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use crate::{ClientWs, ADD, FLOOD, FLOOD_TASK, QUEUE, TICK};

/// The same limits as `PeerConfig::default()` gives tungstenite.
pub(crate) fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(64 * 1024)
        .max_message_size(Some(1 << 20))
        .max_frame_size(Some(1 << 20))
}

#[derive(Serialize)]
pub(crate) struct RawCall<P> {
    pub(crate) jsonrpc: &'static str,
    pub(crate) method: &'static str,
    pub(crate) params: P,
    pub(crate) id: u64,
}

#[derive(Deserialize)]
pub(crate) struct RawRequest<'a> {
    pub(crate) jsonrpc: &'a str,
    pub(crate) method: &'a str,
    #[serde(borrow)]
    pub(crate) params: &'a RawValue,
    #[serde(borrow)]
    pub(crate) id: &'a RawValue,
}

#[derive(Serialize)]
pub(crate) struct RawResponse<'a, T> {
    pub(crate) jsonrpc: &'static str,
    pub(crate) result: T,
    pub(crate) id: &'a RawValue,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct RawNotification<'a, P> {
    pub(crate) jsonrpc: &'a str,
    pub(crate) method: &'a str,
    pub(crate) params: P,
}

#[derive(Deserialize)]
pub(crate) struct RawReply {
    pub(crate) result: i64,
    pub(crate) id: u64,
}

#[derive(Deserialize)]
pub(crate) struct RawIncoming<'a> {
    #[serde(borrow, default)]
    pub(crate) method: Option<&'a str>,
    #[serde(default)]
    pub(crate) params: Option<[u64; 1]>,
    #[serde(default)]
    pub(crate) id: Option<u64>,
}

/// The baseline server: one task per connection reads a frame, parses it, feeds the
/// answer, and flushes only when no further frame is ready. Broadcasts reach each
/// connection's task through a queue, like jsonrpc-peer's.
#[derive(Clone, Default)]
pub(crate) struct RawServer {
    pub(crate) queues: Arc<Mutex<Vec<mpsc::Sender<Utf8Bytes>>>>,
    pub(crate) live: Arc<AtomicUsize>,
}

impl RawServer {
    pub(crate) async fn start() -> (RawServer, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = RawServer::default();
        let accepting = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(accepting.clone().connection(stream));
            }
        });
        (server, addr)
    }

    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Serializes once and queues the same bytes for every live connection.
    pub(crate) fn broadcast(&self, seq: u64) -> usize {
        let frame = Utf8Bytes::from(tick(seq));
        let mut queues = self.queues.lock().expect("not poisoned");
        queues.retain(|q| !q.is_closed());
        queues
            .iter()
            .filter(|q| q.try_send(frame.clone()).is_ok())
            .count()
    }

    pub(crate) async fn connection(self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let Ok(mut ws) =
            tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
        else {
            return;
        };
        let (tx, mut pushes) = mpsc::channel(QUEUE);
        // For `flood_task`, whose task queues its frames as broadcasts are queued.
        let own = tx.clone();
        self.queues.lock().expect("not poisoned").push(tx);
        self.live.fetch_add(1, Ordering::SeqCst);
        let _live = LiveGuard(self.live.clone());
        loop {
            let event = match next_event(&mut ws, &mut pushes).now_or_never() {
                Some(event) => event,
                None => {
                    if ws.flush().await.is_err() {
                        return;
                    }
                    next_event(&mut ws, &mut pushes).await
                }
            };
            let written = match event {
                RawEvent::Frame(Some(Ok(Message::Text(text)))) => {
                    raw_answer(&mut ws, &own, &text).await
                }
                RawEvent::Frame(Some(Ok(Message::Close(_)) | Err(_)) | None) => return,
                RawEvent::Frame(Some(Ok(_))) => Ok(()),
                RawEvent::Push(frame) => ws.feed(Message::Text(frame)).await,
            };
            if written.is_err() {
                return;
            }
        }
    }
}

pub(crate) struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) enum RawEvent {
    Frame(Option<Result<Message, tokio_tungstenite::tungstenite::Error>>),
    Push(Utf8Bytes),
}

/// The next incoming frame or queued broadcast, whichever is ready first.
pub(crate) fn next_event<'a>(
    ws: &'a mut WebSocketStream<TcpStream>,
    pushes: &'a mut mpsc::Receiver<Utf8Bytes>,
) -> impl Future<Output = RawEvent> + 'a {
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(frame) = ws.poll_next_unpin(cx) {
            return Poll::Ready(RawEvent::Frame(frame));
        }
        match pushes.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(RawEvent::Push(frame)),
            _ => Poll::Pending,
        }
    })
}

/// Parses one request with serde_json and feeds its answer (and, for `flood`, the
/// notifications before it). `flood_task` is answered by a task of its own, through
/// `own`, the connection's queue.
pub(crate) async fn raw_answer(
    ws: &mut WebSocketStream<TcpStream>,
    own: &mpsc::Sender<Utf8Bytes>,
    text: &str,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    let Ok(request) = serde_json::from_str::<RawRequest>(text) else {
        return Ok(());
    };
    assert_eq!(request.jsonrpc, "2.0");
    let answer = match request.method {
        ADD => {
            let [a, b]: [i64; 2] = serde_json::from_str(request.params.get()).expect("params");
            serde_json::to_string(&RawResponse {
                jsonrpc: "2.0",
                result: a + b,
                id: request.id,
            })
        }
        FLOOD => {
            let [n]: [u64; 1] = serde_json::from_str(request.params.get()).expect("params");
            for i in 0..n {
                ws.feed(Message::text(tick(i))).await?;
            }
            serde_json::to_string(&RawResponse {
                jsonrpc: "2.0",
                result: n,
                id: request.id,
            })
        }
        FLOOD_TASK => {
            let [n]: [u64; 1] = serde_json::from_str(request.params.get()).expect("params");
            tokio::spawn(flood_task(own.clone(), n, request.id.get().to_owned()));
            return Ok(());
        }
        _ => return Ok(()),
    };
    ws.feed(Message::text(answer.expect("serializes"))).await
}

/// The notification `tick [i]`, serialized.
fn tick(i: u64) -> String {
    let note = RawNotification {
        jsonrpc: "2.0",
        method: TICK,
        params: [i],
    };
    serde_json::to_string(&note).expect("serializes")
}

/// `flood` shaped as jsonrpc-peer runs it: on a task of its own, apart from the
/// connection's, each frame handed over through the connection's bounded queue (of
/// `QUEUE` frames, as ours), awaiting room when it is full; then the answer.
async fn flood_task(own: mpsc::Sender<Utf8Bytes>, n: u64, id: String) {
    for i in 0..n {
        if own.send(Utf8Bytes::from(tick(i))).await.is_err() {
            return;
        }
    }
    let id = RawValue::from_string(id).expect("an id as received");
    let answer = serde_json::to_string(&RawResponse {
        jsonrpc: "2.0",
        result: n,
        id: &id,
    })
    .expect("serializes");
    let _ = own.send(Utf8Bytes::from(answer)).await;
}

/// A baseline client connection: a writer task that feeds what is queued and flushes
/// when the queue is empty; the reading half stays here for each round's reader task.
pub(crate) struct RawConn {
    pub(crate) tx: mpsc::Sender<Message>,
    pub(crate) stream: Option<SplitStream<ClientWs>>,
}

impl RawConn {
    pub(crate) async fn connect(url: &str) -> RawConn {
        let (sink, stream) = raw_connect(url).await.split();
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(raw_writer(sink, rx));
        RawConn {
            tx,
            stream: Some(stream),
        }
    }
}

pub(crate) async fn raw_connect(url: &str) -> ClientWs {
    let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(ws_config()), true)
        .await
        .expect("raw connect");
    ws
}

pub(crate) async fn raw_writer(
    mut sink: SplitSink<ClientWs, Message>,
    mut rx: mpsc::Receiver<Message>,
) {
    while let Some(first) = rx.recv().await {
        if sink.feed(first).await.is_err() {
            return;
        }
        while let Ok(more) = rx.try_recv() {
            if sink.feed(more).await.is_err() {
                return;
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
}

/// A baseline client shaped as jsonrpc-peer's (the reference rows): each call is
/// awaited by the task that made it, its answer routed to it by id through a map of
/// pending calls (a oneshot each) by one reader task; the frames go out through the
/// writer task. The work a `call(...).await` API needs, written by hand.
pub(crate) struct RawShaped {
    tx: mpsc::Sender<Message>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<i64>>>>,
    next_id: AtomicU64,
}

impl RawShaped {
    pub(crate) async fn connect(url: &str) -> Arc<RawShaped> {
        let (sink, mut stream) = raw_connect(url).await.split();
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(raw_writer(sink, rx));
        let pending: Arc<Mutex<HashMap<u64, oneshot::Sender<i64>>>> = Arc::default();
        let routes = pending.clone();
        tokio::spawn(async move {
            while let Some(Ok(frame)) = stream.next().await {
                let Message::Text(text) = frame else { continue };
                let reply: RawReply = serde_json::from_str(&text).expect("a response");
                let caller = routes.lock().expect("not poisoned").remove(&reply.id);
                if let Some(caller) = caller {
                    let _ = caller.send(reply.result);
                }
            }
        });
        Arc::new(RawShaped {
            tx,
            pending,
            next_id: AtomicU64::new(0),
        })
    }

    /// `add(i, 1)`, awaited.
    pub(crate) async fn add(&self, i: i64) -> i64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = serde_json::to_string(&RawCall {
            jsonrpc: "2.0",
            method: ADD,
            params: [i, 1],
            id,
        })
        .expect("serializes");
        let (answer, answered) = oneshot::channel();
        self.pending
            .lock()
            .expect("not poisoned")
            .insert(id, answer);
        self.tx
            .send(Message::text(frame))
            .await
            .expect("raw writer");
        answered.await.expect("answered")
    }
}
