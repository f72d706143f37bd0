//! The `Peer` handle: call, notify, batch, close, closed.
//!
//! The handle is a reference to the state it shares with the connection's task
//! (`peer/shared.rs`); the task itself is `driver.rs`.

mod info;
mod reply;
mod shared;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::batch::Batch;
use crate::cancel::CancelOnDrop;
use crate::config::PeerConfig;
use crate::error::{CloseReason, Error, Result};
use crate::message;
use crate::pending::Registered;
use crate::queue::Outgoing;
use crate::router::Router;
use crate::transport::{Text, Transport};

pub(crate) use info::Attached;
pub use info::ConnectionInfo;
pub use reply::Reply;
pub(crate) use shared::{CloseRequest, Shared};

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
    owner: Option<Arc<Owner>>,
}

/// Closes its connection with 1000 when dropped: the last user handle of a client
/// connection went away, and nobody could reach the connection any more.
struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        // What was sent before the drop still goes out, then the close frame.
        if self.0.ask_close(CloseRequest::new(1000, "")) {
            let peer = self.0.id();
            tracing::debug!(peer, "last handle dropped; closing with 1000");
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
        self.call_with_timeout(method, params, self.shared.call_timeout())
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
        self.call_raw_with_timeout(method, params, self.shared.call_timeout())
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
                Some(shared.progress().register(id, tx))
            }
            None => None,
        };
        // The call layers (layer.rs) see it, and may answer it instead.
        if shared.layers().is_some() {
            let send = |frame| self.send_call(frame, id, method, timeout);
            return crate::layer::made_call(self, method, frame, send).await;
        }
        self.send_call(frame, id, method, timeout).await
    }

    /// Registers our call `id`, queues its `frame` and waits for its answer.
    async fn send_call(
        &self,
        frame: impl Into<Text>,
        id: u64,
        method: &str,
        timeout: Duration,
    ) -> Result<Reply> {
        let shared = &*self.shared;
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
        let span = tracing::debug_span!("call", method, id, peer = shared.id());
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
        if self.shared.layers().is_some() {
            let send = |frame| self.shared.send(frame);
            return crate::layer::made_notification(self, method, frame, send).await;
        }
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
        self.shared.next_id()
    }

    /// Asks the connection to close with code 1000 and waits until it has (at most the
    /// close timeout). Calls still waiting end with [`Error::Closed`].
    pub async fn close(&self) {
        self.close_with(1000, "").await;
    }

    /// [`close`](Self::close) with a close code and reason of your own.
    pub async fn close_with(&self, code: u16, reason: &str) {
        self.shared.ask_close(CloseRequest::new(code, reason));
        self.closed().await;
    }

    /// Resolves when the connection has ended, with the cause.
    pub async fn closed(&self) -> CloseReason {
        self.shared.closed().await
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.shared.ended().is_some()
    }

    /// How many of this side's calls are waiting for their answers.
    pub fn pending_calls(&self) -> usize {
        self.shared.pending().len()
    }

    /// How many bytes of frames wait in the outgoing queue for the socket: at most
    /// [`PeerConfig::outgoing_queue_bytes`] plus one frame.
    pub fn queued_bytes(&self) -> usize {
        self.shared.queue().queued_bytes()
    }

    /// Queues an already serialized frame without waiting. A full queue means the other
    /// side does not keep up: the [`SlowPeer`](crate::SlowPeer) policy applies to it
    /// alone.
    pub(crate) fn push(&self, frame: Text) -> bool {
        self.shared.push(frame)
    }

    /// Applies the [`SlowPeer`](crate::SlowPeer) policy: with `Close`, closes with 1008
    /// and `reason`, dropping what is queued; with `Drop`, only logs (the caller drops
    /// the message). Returns whether the connection is being closed.
    pub(crate) fn fell_behind(&self, reason: &str) -> bool {
        self.shared.fell_behind(reason)
    }

    /// Queues an already serialized frame, waiting for room: back-pressure for a
    /// replay, where the slow-peer policy would punish a peer for the replay's length.
    pub(crate) async fn push_waiting(&self, frame: Text) -> Result<()> {
        self.shared
            .queue()
            .send(Outgoing::Frame(frame))
            .await
            .map_err(|_| Error::Closed(self.shared.close_reason()))
    }

    /// Whether the outgoing queue holds at most half of each of its bounds.
    pub(crate) fn queue_half_empty(&self) -> bool {
        self.shared.queue().half_empty()
    }

    /// Resolves once the outgoing queue holds at most half of each bound.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once the connection is ending.
    pub(crate) async fn wait_queue_half_empty(&self) -> Result<()> {
        if self.shared.queue().wait_half_empty().await {
            Ok(())
        } else {
            Err(Error::Closed(self.shared.close_reason()))
        }
    }

    /// Whether the connection is ending: its `on_close` callbacks have been taken (they
    /// run before [`is_closed`](Self::is_closed) turns true), so a registry that adds the
    /// peer now must remove it itself.
    pub(crate) fn is_ending(&self) -> bool {
        self.shared.is_ending()
    }

    /// Runs `callback` once when the connection ends (at once if it already has),
    /// before [`closed`](Self::closed) resolves. Registries use it to forget the peer.
    pub fn on_close(&self, callback: impl FnOnce() + Send + 'static) {
        self.shared.on_close(Box::new(callback));
    }

    /// A number that tells this connection apart from every other in the process, and
    /// from those of the process's earlier runs: ids count up from the time the process
    /// made its first connection, in microseconds since the Unix epoch. So an id (or a
    /// cluster's [`PeerAddr`](crate::cluster::PeerAddr)) from before a restart never
    /// names a connection after it, unless the system clock went back in between. Ids
    /// stay below 2^53, so JavaScript reads them exactly.
    pub fn id(&self) -> u64 {
        self.shared.id()
    }

    /// What the handshake said: remote address, path, headers.
    pub fn info(&self) -> &ConnectionInfo {
        self.shared.info()
    }

    /// What the [`HandshakePolicy::authenticate`](crate::HandshakePolicy::authenticate)
    /// hook attached to this connection, if it attached a `T`.
    pub fn auth<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.info().auth.as_deref()?.downcast_ref()
    }

    /// Why the connection ended, once it has.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.shared.ended().cloned()
    }

    /// Closes gracefully: calls from the other side that are already running may
    /// finish and send their answers (for at most `grace`), new ones are refused with
    /// `-32000`, then the connection closes with `code`. Waits until it has.
    pub async fn drain_and_close(&self, code: u16, reason: &str, grace: Duration) {
        self.shared.ask_close(CloseRequest {
            drain_until: Some(tokio::time::Instant::now() + grace),
            ..CloseRequest::new(code, reason)
        });
        self.closed().await;
    }

    /// The other side's address, when the transport has one.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.info().remote_addr
    }
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("id", &self.id())
            .field("remote_addr", &self.remote_addr())
            .field("closed", &self.shared.ended())
            .field("pending_calls", &self.pending_calls())
            .finish()
    }
}
