//! The `Peer` handle: batch, close, closed; calls and notifications through
//! [`Caller`](crate::Caller) (`peer/send.rs`).
//!
//! The handle is a reference to the state it shares with the connection's task
//! (`peer/shared.rs`); the task itself is `driver.rs`.

mod info;
mod send;
mod shared;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::batch::Batch;
use crate::config::PeerConfig;
use crate::error::{CloseReason, Error, Result};
use crate::queue::Outgoing;
use crate::router::Router;
use crate::transport::{Text, Transport};

pub(crate) use crate::call::Reply;
pub(crate) use info::Attached;
pub use info::ConnectionInfo;
pub(crate) use send::{SendCall, Started, Waiting};
pub(crate) use shared::{CloseRequest, Shared, NO_STATUS};

/// A handle to one connection: call the other side, notify it, send it a batch, close.
///
/// Cheap to clone (one reference count); every clone is the same connection. Handlers
/// get the peer that called them through [`Context::peer`](crate::Context::peer).
///
/// Calls and notifications go through [`Caller`](crate::Caller)
/// (`use jsonrpc_peer::Caller;`), as they do for every handle that can call. Every call
/// ends: with its result, the other side's error ([`Error::Rpc`]), a timeout
/// ([`Error::Timeout`]), or [`Error::Closed`] when the connection goes. A call whose
/// future is dropped leaves nothing behind.
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

    /// Asks the connection to close with code 1000 and waits until it has (at most the
    /// close timeout). Calls still waiting end with [`Error::Closed`].
    pub async fn close(&self) {
        self.close_with(1000, "").await;
    }

    /// [`close`](Self::close) with a close code and reason of your own.
    ///
    /// The reason is cut to 123 bytes, at a character's end (a close frame carries at
    /// most 125). A code a close frame may not carry (RFC 6455 7.4: below 1000, 1004
    /// to 1006, 1014 to 2999, 5000 and above) sends a close frame without a code,
    /// which the other side reads as 1005; [`closed`](Self::closed) then says
    /// `Local { code: 1005, .. }`. Codes of your own go in 4000 to 4999.
    pub async fn close_with(&self, code: u16, reason: &str) {
        self.shared.ask_close(CloseRequest::new(code, reason));
        self.closed().await;
    }

    /// Asks the connection to close with `code` and `reason`, without waiting; what
    /// was queued before goes out first.
    pub(crate) fn ask_close(&self, code: u16, reason: &str) {
        self.shared.ask_close(CloseRequest::new(code, reason));
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
    /// A callback that panics when the connection ends is logged; the others still run.
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
            drain_until: Some(crate::deadline::after(grace)),
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
