//! The `Peer` handle: call, notify, batch, close, closed.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::{Mutex, OnceLock};

use tokio::sync::{mpsc, Notify};
use tokio_tungstenite::tungstenite::http::HeaderMap;

use crate::batch::Batch;
use crate::cancel::CancelOnDrop;
use crate::config::{CancelStyle, PeerConfig, SlowPeer};
use crate::driver::Running;
use crate::error::{CloseReason, Error, Result, RpcError};
use crate::message;
use crate::message::Outcome;
use crate::pending::{Due, Pending, Registered};
use crate::progress::Sinks;
use crate::router::Router;
use crate::sync::lock;
use crate::transport::{Text, Transport};

use crate::queue::Outgoing;
use crate::queue::{OutQueue, TrySendError};

/// A close asked for by this side.
#[derive(Clone, Debug)]
pub(crate) struct CloseRequest {
    pub(crate) code: u16,
    pub(crate) reason: String,
    /// Let calls already running finish (until this instant) before closing; calls
    /// that arrive meanwhile are refused.
    pub(crate) drain_until: Option<tokio::time::Instant>,
    /// Drop what is queued and send the close frame next: the slow-peer close, where
    /// the queue is what the other side does not read, and waiting behind it would
    /// hide the code from a client that reads again.
    pub(crate) discard_queued: bool,
}

/// The state one connection's handles share with its tasks.
pub(crate) struct Shared {
    pub(crate) out: OutQueue,
    pub(crate) pending: Pending,
    next_id: AtomicU64,
    pub(crate) call_timeout: Duration,
    /// Empty while open; the cause once closed. A `OnceLock` and a `Notify` rather than
    /// a watch channel, which costs about 350 bytes on every connection.
    closed: OnceLock<CloseReason>,
    /// Wakes [`Peer::closed`] waiters once `closed` is set.
    closed_notify: Notify,
    /// A close asked for by this side (the first one wins). The connection's task is its
    /// only waiter, and checks it on every pass: a `OnceLock` read and an `AtomicWaker`
    /// cost a load each, where polling a `Notify` takes its lock.
    close_request: OnceLock<CloseRequest>,
    /// The connection's task, registered on every pass: woken for a close request, and
    /// for a call whose deadline its timer does not cover yet (`pending.rs`).
    task_waker: AtomicWaker,
    pub(crate) info: ConnectionInfo,
    pub(crate) id: u64,
    pub(crate) slow_peer: SlowPeer,
    /// Run once when the connection ends; `None` once they have run.
    on_close: Mutex<Option<Vec<OnClose>>>,
    /// The cancel sent for a call given up; `None` sends none.
    pub(crate) cancel_style: Option<CancelStyle>,
    pub(crate) cancels_skipped: AtomicU64,
    /// Incoming calls a cancel can still stop.
    pub(crate) running: Running,
    /// Where the progress of our calls that asked for it goes.
    pub(crate) progress: Sinks,
    pub(crate) progress_queue: usize,
}

type OnClose = Box<dyn FnOnce() + Send + 'static>;

/// Where a connection comes from: what the WebSocket handshake said.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The other side's address, when the transport has one.
    pub remote_addr: Option<SocketAddr>,
    /// The request path and query of the handshake (server side), e.g. `/rpc?room=1`.
    pub path: Option<String>,
    /// The handshake's headers: the client's request on the server side, the
    /// server's response on the client side. On the server side, hooks always see
    /// them, but the peer keeps them only with
    /// [`HandshakePolicy::keep_headers`](crate::HandshakePolicy::keep_headers).
    pub headers: HeaderMap,
    /// What the authentication hook attached, if any.
    pub(crate) auth: Option<Attached>,
}

/// What an authentication hook attached to a connection; read it with
/// [`Peer::auth`].
pub(crate) type Attached = Arc<dyn std::any::Any + Send + Sync>;

impl ConnectionInfo {
    /// Info with only a remote address.
    pub fn from_addr(remote_addr: Option<SocketAddr>) -> Self {
        ConnectionInfo {
            remote_addr,
            ..Default::default()
        }
    }
}

static NEXT_PEER_ID: AtomicU64 = AtomicU64::new(1);

impl Shared {
    pub(crate) fn new(config: &PeerConfig, info: ConnectionInfo) -> Self {
        Shared {
            out: OutQueue::new(config.outgoing_queue, config.outgoing_queue_bytes),
            pending: Pending::new(),
            next_id: AtomicU64::new(1),
            call_timeout: config.call_timeout,
            closed: OnceLock::new(),
            closed_notify: Notify::new(),
            close_request: OnceLock::new(),
            task_waker: AtomicWaker::new(),
            info,
            id: NEXT_PEER_ID.fetch_add(1, Ordering::Relaxed),
            slow_peer: config.slow_peer,
            on_close: Mutex::new(Some(Vec::new())),
            cancel_style: config.cancel_on_drop.then_some(config.cancel_style),
            cancels_skipped: AtomicU64::new(0),
            running: Running::default(),
            progress: Sinks::default(),
            progress_queue: config.progress_queue,
        }
    }

    /// Queues a frame if there is room now. False only when the queue is full.
    pub(crate) fn try_send_now(&self, frame: String) -> bool {
        !matches!(
            self.out.try_send(Outgoing::Frame(Text::from(frame))),
            Err(TrySendError::Full(_))
        )
    }

    /// Runs the `on_close` callbacks, once.
    pub(crate) fn run_on_close(&self) {
        let callbacks = lock(&self.on_close).take();
        for callback in callbacks.into_iter().flatten() {
            callback();
        }
    }

    /// Ready once a close is asked for, with the request. For the connection's task.
    pub(crate) fn poll_close_request(&self, cx: &mut std::task::Context<'_>) -> Poll<CloseRequest> {
        if let Some(request) = self.close_request.get() {
            return Poll::Ready(request.clone());
        }
        // Registered, then checked again: a close asked for in between is not missed.
        self.task_waker.register(cx.waker());
        match self.close_request.get() {
            Some(request) => Poll::Ready(request.clone()),
            None => Poll::Pending,
        }
    }

    /// Registers the connection's task for its wake-ups, when it does not look at the
    /// close request (while draining).
    pub(crate) fn register_task(&self, cx: &mut std::task::Context<'_>) {
        self.task_waker.register(cx.waker());
    }

    /// Registers an outgoing call in the pending map, and wakes the connection's task
    /// when its timer must be set for the call's deadline.
    pub(crate) fn register(&self, id: u64, due: Due) -> Result<Registered<'_>> {
        let registered = self.pending.register(id, due, || self.close_reason())?;
        if registered.wake {
            self.task_waker.wake();
        }
        Ok(registered)
    }

    /// How the pending map keeps the deadline of a call with `timeout`: the
    /// connection's sweep for timeouts up to the connection's own (later deadlines
    /// would hold the deque's order back for the calls that use the default), a timer of
    /// the call's own for longer ones.
    pub(crate) fn due(&self, timeout: Duration) -> Due {
        if timeout <= self.call_timeout {
            Due::After(timeout)
        } else {
            Due::Own
        }
    }

    pub(crate) fn close_reason(&self) -> CloseReason {
        self.closed.get().cloned().unwrap_or(CloseReason::Eof)
    }

    /// Records why the connection ended (the first cause wins), ends every call, then
    /// wakes whoever waits in [`Peer::closed`]: a call that sees the connection closed
    /// has already ended.
    pub(crate) fn mark_closed(&self, reason: CloseReason) {
        let _ = self.closed.set(reason);
        self.pending.fail_all(&self.close_reason());
        self.closed_notify.notify_waiters();
    }

    /// Queues an answer made on one of the connection's tasks, waiting for room; it is
    /// dropped if the connection ends first.
    pub(crate) async fn send_answer(&self, answer: String) {
        let _ = self.out.send(Outgoing::Frame(Text::from(answer))).await;
    }

    /// Queues `frame`, waiting for room.
    pub(crate) async fn send(&self, frame: String) -> Result<()> {
        // Without a deadline it never gives up, so `None` does not come back.
        self.send_by(frame, None)
            .await
            .unwrap_or_else(|| Err(Error::Closed(self.close_reason())))
    }

    /// Queues `frame`, waiting for room until `deadline` (if any): `None` once it
    /// passes. Most sends find room: `try_send` skips the future that waits for it, and
    /// only a full queue makes a timer.
    pub(crate) async fn send_by(
        &self,
        frame: String,
        deadline: Option<tokio::time::Instant>,
    ) -> Option<Result<()>> {
        let frame = match self.out.try_send(Outgoing::Frame(Text::from(frame))) {
            Ok(()) => return Some(Ok(())),
            Err(TrySendError::Full(frame)) => frame,
            Err(TrySendError::Closed(_)) => return Some(Err(Error::Closed(self.close_reason()))),
        };
        let send = self.out.send(frame);
        let sent = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, send).await.ok()?,
            None => send.await,
        };
        Some(sent.map_err(|_| Error::Closed(self.close_reason())))
    }
}

/// The result of one call, still raw JSON text: read it with the caller's own type
/// ([`decode`](Self::decode)), or pass it on unparsed ([`get`](Self::get)).
#[derive(Clone)]
pub struct Reply {
    frame: Text,
    range: Range<usize>,
}

impl Reply {
    pub(crate) fn new(frame: Text, range: Range<usize>) -> Self {
        Reply { frame, range }
    }

    /// The `result` member as raw JSON text, exactly as received.
    pub fn get(&self) -> &str {
        &self.frame[self.range.clone()]
    }

    /// Reads the result as `R`.
    ///
    /// # Errors
    ///
    /// [`Error::Serialization`] when the result does not fit `R`.
    pub fn decode<R: DeserializeOwned>(&self) -> Result<R, Error> {
        Ok(serde_json::from_str(self.get())?)
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Reply").field(&self.get()).finish()
    }
}

impl Outcome<Reply> {
    /// The call's result; `method` is the method called, for an error to name it.
    pub(crate) fn into_result(self, method: &str) -> Result<Reply, Error> {
        match self {
            Outcome::Result(reply) => Ok(reply),
            Outcome::Error(error) => match serde_json::from_str::<RpcError>(error.get()) {
                Ok(error) => Err(Error::Rpc {
                    method: method.into(),
                    error,
                }),
                Err(e) => Err(Error::InvalidResponse(format!(
                    "malformed error object: {e}"
                ))),
            },
        }
    }
}

/// A handle to one connection: call the other side, notify it, send it a batch, close.
///
/// Cheap to clone (one reference count); every clone is the same connection. Handlers
/// get the peer that called them through [`Context::peer`](crate::Context::peer).
///
/// Every call ends: with its result, the other side's error ([`Error::Rpc`]), a
/// timeout ([`Error::Timeout`]), or [`Error::Closed`] when the connection goes. A call
/// whose future is dropped leaves nothing behind.
#[derive(Clone)]
pub struct Peer {
    pub(crate) shared: Arc<Shared>,
    /// Shared by the handles a client's user holds ([`connect`](crate::connect)); when
    /// the last of them is dropped, the connection closes. `None` for the handles the
    /// connection's own task, handlers and registries hold: they do not keep it open.
    pub(crate) owner: Option<Arc<Owner>>,
}

/// Closes its connection with 1000 when dropped: the last user handle of a client
/// connection went away, and nobody could reach the connection any more.
pub(crate) struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        let request = CloseRequest {
            code: 1000,
            reason: String::new(),
            drain_until: None,
            // What was sent before the drop still goes out, then the close frame.
            discard_queued: false,
        };
        if self.0.close_request.set(request).is_ok() {
            tracing::debug!(peer = self.0.id, "last handle dropped; closing with 1000");
            self.0.task_waker.wake();
        }
    }
}

impl Peer {
    /// Runs a peer over any [`Transport`], serving `router`, and returns its handle.
    /// [`connect`](crate::connect) and [`Server`](crate::Server) do this for WebSockets.
    ///
    /// `router` is a [`Router`], or an `Arc` of one to share it between connections.
    ///
    /// Must be called within a tokio runtime: the connection's tasks are spawned on it.
    pub fn start<T: Transport, S: Send + Sync + 'static>(
        transport: T,
        router: impl Into<Arc<Router<S>>>,
        config: &PeerConfig,
    ) -> Peer {
        crate::driver::spawn(
            transport,
            router.into(),
            config,
            ConnectionInfo::default(),
            Default::default(),
        )
    }

    /// Calls `method` with `params` and waits for the result, read as `R`.
    ///
    /// Params must serialize to a JSON array or object; `()` (or `None`) sends none.
    /// The call waits at most the connection's call timeout (30 s unless
    /// [`PeerConfig::call_timeout`] says otherwise).
    ///
    /// # Errors
    ///
    /// [`Error::Rpc`] when the other side answers with an error, [`Error::Timeout`],
    /// [`Error::Closed`], [`Error::InvalidParams`], or [`Error::Serialization`] when the
    /// params cannot be written or the result does not fit `R`.
    pub async fn call<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<R> {
        self.call_with_timeout(method, params, self.shared.call_timeout)
            .await
    }

    /// [`call`](Self::call) with its own timeout.
    ///
    /// # Errors
    ///
    /// As for [`call`](Self::call).
    pub async fn call_with_timeout<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
        timeout: Duration,
    ) -> Result<R> {
        self.call_raw_with_timeout(method, params, timeout)
            .await?
            .decode()
    }

    /// Calls `method` and returns the raw result, for callers that read it later or
    /// pass it on unparsed. Waits at most the connection's call timeout, as
    /// [`call`](Self::call) does.
    ///
    /// # Errors
    ///
    /// As for [`call`](Self::call), except that the result is not read.
    pub async fn call_raw(&self, method: &str, params: impl Serialize) -> Result<Reply> {
        self.call_raw_with_timeout(method, params, self.shared.call_timeout)
            .await
    }

    /// [`call_raw`](Self::call_raw) with its own timeout.
    ///
    /// # Errors
    ///
    /// As for [`call_raw`](Self::call_raw).
    pub async fn call_raw_with_timeout(
        &self,
        method: &str,
        params: impl Serialize,
        timeout: Duration,
    ) -> Result<Reply> {
        self.call_inner(method, params, timeout, None).await
    }

    /// A call, with its progress values going to `progress` if given.
    pub(crate) async fn call_inner(
        &self,
        method: &str,
        params: impl Serialize,
        timeout: Duration,
        progress: Option<mpsc::Sender<Reply>>,
    ) -> Result<Reply> {
        let shared = &*self.shared;
        let id = self.next_id();
        let mut frame = message::request(method, &params, Some(id))?;
        let _sink = match progress {
            Some(tx) => {
                frame = crate::progress::with_token(frame, id);
                Some(shared.progress.register(id, tx))
            }
            None => None,
        };
        let Registered {
            mut guard,
            rx,
            deadline,
            ..
        } = shared.register(id, shared.due(timeout))?;
        // Declared after the guard, so dropped before it: the cancel is queued while
        // the entry is still there (unless the sweep removed it), and a late answer
        // still finds no one waiting.
        let cancel = CancelOnDrop::new(shared, id);
        let waiting = async {
            // With the sweep keeping the deadline, only waiting for room in the queue
            // needs a timer; it gives up at the same deadline.
            shared
                .send_by(frame, deadline)
                .await
                .ok_or_else(|| Error::timeout(Some(method), timeout))??;
            cancel.queued();
            let answer = rx
                .await
                .unwrap_or_else(|_| Some(Err(Error::Closed(shared.close_reason()))));
            // Past its deadline (`None`), the call was given up: the cancel goes out,
            // as when a timer of its own drops this future.
            if answer.is_some() {
                cancel.answered();
            }
            Ok::<_, Error>(answer)
        };
        // One span per outgoing call: what happens while it waits says which call.
        let span = tracing::debug_span!("call", method, id, peer = shared.id);
        let waiting = tracing::Instrument::instrument(waiting, span);
        let answer = match deadline {
            // The connection's sweep ends the call at its deadline.
            Some(_) => waiting.await?,
            None => tokio::time::timeout(timeout, waiting)
                .await
                .map_err(|_| Error::timeout(Some(method), timeout))??,
        };
        // The reader, the sweep or the connection's end removed the entry when it
        // handed this over.
        guard.disarm();
        match answer {
            Some(answer) => answer?.into_result(method),
            None => Err(Error::timeout(Some(method), timeout)),
        }
    }

    /// Sends a notification: no answer comes, and none is waited for.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], or the params errors of [`call`](Self::call).
    pub async fn notify(&self, method: &str, params: impl Serialize) -> Result<()> {
        let frame = message::request(method, &params, None)?;
        self.shared.send(frame).await
    }

    /// Starts a batch: calls and notifications sent together as one JSON array.
    ///
    /// ```no_run
    /// # async fn run(peer: jsonrpc_peer::Peer) -> jsonrpc_peer::Result<()> {
    /// let mut batch = peer.batch();
    /// batch.call("subtract", [42, 23])?.notify("update", [1, 2])?.call("sum", [1, 2, 4])?;
    /// let answers = batch.send().await?;
    /// let difference: i64 = answers[0].as_ref().map_err(|e| e.to_string()).unwrap().decode()?;
    /// # Ok(()) }
    /// ```
    pub fn batch(&self) -> Batch<'_> {
        Batch::new(self)
    }

    /// This handle, made the owner of its connection: once it and every clone of it are
    /// dropped, the connection closes with 1000.
    pub(crate) fn close_on_drop(mut self) -> Peer {
        self.owner = Some(Arc::new(Owner(self.shared.clone())));
        self
    }

    /// A handle that does not keep the connection open: the connection's own, its
    /// handlers', a registry's.
    pub(crate) fn handle(shared: Arc<Shared>) -> Peer {
        Peer {
            shared,
            owner: None,
        }
    }

    /// A fresh id for an outgoing call.
    pub(crate) fn next_id(&self) -> u64 {
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Asks the connection to close with code 1000 and waits until it has (at most the
    /// close timeout). Calls still waiting end with [`Error::Closed`].
    pub async fn close(&self) {
        self.close_with(1000, "").await;
    }

    /// [`close`](Self::close) with a close code and reason of your own.
    pub async fn close_with(&self, code: u16, reason: &str) {
        self.request_close(code, reason);
        self.closed().await;
    }

    /// Resolves when the connection has ended, with the cause.
    pub async fn closed(&self) -> CloseReason {
        let shared = &*self.shared;
        loop {
            // Registered before the check: `notify_waiters` keeps no permit, so a close
            // between the check and the wait would otherwise be missed.
            let mut notified = std::pin::pin!(shared.closed_notify.notified());
            notified.as_mut().enable();
            if let Some(reason) = shared.closed.get() {
                return reason.clone();
            }
            notified.await;
        }
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.get().is_some()
    }

    /// How many of this side's calls are waiting for their answers.
    pub fn pending_calls(&self) -> usize {
        self.shared.pending.len()
    }

    /// How many bytes of frames wait in the outgoing queue for the socket: at most
    /// [`PeerConfig::outgoing_queue_bytes`] plus one frame.
    pub fn queued_bytes(&self) -> usize {
        self.shared.out.queued_bytes()
    }

    /// Queues an already serialized frame without waiting. A full queue means the other
    /// side does not keep up: the [`SlowPeer`] policy applies to it alone.
    pub(crate) fn push(&self, frame: Text) -> bool {
        match self.shared.out.try_send(Outgoing::Frame(frame)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                match self.shared.slow_peer {
                    SlowPeer::Close => {
                        tracing::debug!(remote = ?self.remote_addr(), "outgoing queue full; closing with 1008");
                        self.ask_close(CloseRequest {
                            code: 1008,
                            reason: "outgoing queue full".to_owned(),
                            drain_until: None,
                            discard_queued: true,
                        });
                    }
                    SlowPeer::Drop => {
                        tracing::debug!(remote = ?self.remote_addr(), "outgoing queue full; notification dropped");
                    }
                }
                false
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }

    /// Runs `callback` once when the connection ends (at once if it already has),
    /// before [`closed`](Self::closed) resolves. Registries use it to forget the peer.
    pub fn on_close(&self, callback: impl FnOnce() + Send + 'static) {
        let mut callback = Some(Box::new(callback) as OnClose);
        if let Some(list) = lock(&self.shared.on_close).as_mut() {
            list.extend(callback.take());
        }
        if let Some(callback) = callback {
            callback();
        }
    }

    /// A number that tells this connection apart from every other in the process.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// What the handshake said: remote address, path, headers.
    pub fn info(&self) -> &ConnectionInfo {
        &self.shared.info
    }

    /// What the [`HandshakePolicy::authenticate`](crate::HandshakePolicy::authenticate)
    /// hook attached to this connection, if it attached a `T`.
    pub fn auth<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.shared.info.auth.as_deref()?.downcast_ref()
    }

    /// Why the connection ended, once it has.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.shared.closed.get().cloned()
    }

    fn request_close(&self, code: u16, reason: &str) {
        self.ask_close(CloseRequest {
            code,
            reason: reason.to_owned(),
            drain_until: None,
            discard_queued: false,
        });
    }

    fn ask_close(&self, request: CloseRequest) {
        if self.shared.close_request.set(request).is_ok() {
            self.shared.task_waker.wake();
        }
    }

    /// Closes gracefully: calls from the other side that are already running may
    /// finish and send their answers (for at most `grace`), new ones are refused with
    /// `-32000`, then the connection closes with `code`. Waits until it has.
    pub async fn drain_and_close(&self, code: u16, reason: &str, grace: Duration) {
        self.ask_close(CloseRequest {
            code,
            reason: reason.to_owned(),
            drain_until: Some(tokio::time::Instant::now() + grace),
            discard_queued: false,
        });
        self.closed().await;
    }

    /// The other side's address, when the transport has one.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.shared.info.remote_addr
    }
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("id", &self.shared.id)
            .field("remote_addr", &self.shared.info.remote_addr)
            .field("closed", &self.shared.closed.get())
            .field("pending_calls", &self.pending_calls())
            .finish()
    }
}
