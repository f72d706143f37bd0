//! The registry of live connections: count them, broadcast to them, hooks, shutdown.
//! A [`Server`](crate::Server) and the `axum` endpoint each keep their peers here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use dashmap::DashMap;
use serde::Serialize;
use tokio::sync::watch;

use crate::config::PeerConfig;
use crate::contract::NotificationName;
use crate::error::Result;
use crate::message;
use crate::peer::{ConnectionInfo, Peer};
use crate::relay::Relay;
use crate::router::Router;
use crate::transport::Text;

/// The live connections of a [`Server`](crate::Server): count them, broadcast to them, shut down.
/// Cheap to clone.
#[derive(Clone)]
pub struct ServerHandle {
    inner: Arc<Registry>,
}

/// A hook run as each peer arrives or goes.
type PeerHook = Arc<dyn Fn(&Peer, &ConnectionInfo) + Send + Sync>;

struct Registry {
    peers: DashMap<u64, Peer>,
    /// Set, with the grace period, once shutdown starts.
    shutdown: watch::Sender<Option<Duration>>,
    /// Every hook given, in order. Copied on write: a new connection takes the list
    /// with one reference count, however many hooks there are.
    on_connect: RwLock<Arc<Vec<PeerHook>>>,
    on_disconnect: RwLock<Arc<Vec<PeerHook>>>,
    /// Ticks each time a connection is gone, for `shutdown` to wait on.
    gone: watch::Sender<()>,
    /// Handshakes past the shutdown check whose peer is not in `peers` yet
    /// ([`Admission`]), for `shutdown` to wait on as well.
    admitting: AtomicUsize,
    /// How many listeners given to [`Server::serve`](crate::Server::serve) are still
    /// open, for `shutdown` to wait on: once it returns, the port is free.
    listening: watch::Sender<usize>,
    /// Set once when a cluster node serves these peers; unset, broadcast stays local
    /// at the cost of one load.
    relay: OnceLock<Arc<dyn Relay>>,
}

impl Default for ServerHandle {
    fn default() -> Self {
        ServerHandle::new()
    }
}

impl ServerHandle {
    /// A registry with no connections yet. [`Server::handle`](crate::Server::handle) gives the one a server
    /// uses; make one first when the router's state needs it before the server exists
    /// (as with the `axum` feature's `Endpoint::with_handle`).
    pub fn new() -> Self {
        ServerHandle {
            inner: Arc::new(Registry {
                peers: DashMap::new(),
                shutdown: watch::Sender::new(None),
                on_connect: RwLock::default(),
                on_disconnect: RwLock::default(),
                gone: watch::Sender::new(()),
                admitting: AtomicUsize::new(0),
                listening: watch::Sender::new(0),
                relay: OnceLock::new(),
            }),
        }
    }

    /// Makes the peer of a connection being accepted and puts it in the registry (its
    /// `on_connect` hooks run), before the handshake's answer is written: once a client
    /// has read its `101`, it is among the peers a broadcast reaches. The connection
    /// starts with [`Starting::run`], or, if the answer could not be written, ends at
    /// once with [`Starting::abandon`]; either way it leaves the registry when it ends.
    pub(crate) fn admit(
        &self,
        config: &PeerConfig,
        info: ConnectionInfo,
        slot: Option<crate::policy::Slot>,
        keep_headers: bool,
    ) -> Starting {
        // The hook sees the whole handshake; the peer keeps its headers only when
        // asked, as they cost memory on every connection for as long as it lives.
        let stored = if keep_headers {
            info.clone()
        } else {
            ConnectionInfo {
                headers: Default::default(),
                ..info.clone()
            }
        };
        // Registered before the handshake's answer is written, so a client that has
        // read it is already in the registry, and the application's hook has run;
        // unregistered once its tasks are gone.
        let on_start = {
            let registry = self.clone();
            let info = info;
            Box::new(move |peer: &Peer| {
                registry.inner.peers.insert(peer.id(), peer.clone());
                // Admitted as a shutdown began (its handshake was past the check when
                // the signal came), it may have missed the shutdown's list of the peers
                // to close: the signal is set before the list is taken and read here
                // after the insert, so each peer is in the list, or sees the signal.
                if let Some(grace) = *registry.inner.shutdown.borrow() {
                    peer.shared.ask_close(crate::peer::CloseRequest {
                        drain_until: Some(crate::deadline::after(grace)),
                        ..crate::peer::CloseRequest::new(1001, "server shutting down")
                    });
                }
                for hook in hooks(&registry.inner.on_connect).iter() {
                    run_hook("on_connect", hook, peer, &info);
                }
            })
        };
        let registry = self.clone();
        let on_end = Box::new(move |peer: &Peer| {
            // The connection's slot is free again once its tasks are gone.
            drop(slot);
            let removed = registry.inner.peers.remove(&peer.id());
            registry.inner.gone.send_replace(());
            if let Some((_, peer)) = removed {
                for hook in hooks(&registry.inner.on_disconnect).iter() {
                    run_hook("on_disconnect", hook, &peer, peer.info());
                }
            }
        });
        Starting {
            peer: crate::driver::prepare(config, stored, Some(on_start)),
            on_end: Some(on_end),
        }
    }

    /// Runs `hook` for every new connection, before the server answers its handshake
    /// (so before its first frame is read, and before its client's connect resolves):
    /// start per-connection push tasks here, or subscribe the peer to topics. What the
    /// hook sends waits in the peer's outgoing queue and goes out right after the
    /// handshake's answer. Hooks add up:
    /// a second `on_connect` runs after the first, it does not replace it.
    ///
    /// A plain function, not an async one (unlike
    /// [`ReconnectingBuilder::on_connect`](crate::ReconnectingBuilder::on_connect)): it
    /// runs on the connection's own path, before anything is read, and must not hold
    /// that up; spawn a task for whatever needs to await.
    pub fn on_connect(&self, hook: impl Fn(&Peer, &ConnectionInfo) + Send + Sync + 'static) {
        add_hook(&self.inner.on_connect, Arc::new(hook));
    }

    /// Runs `hook` once a connection has ended and its tasks are gone.
    /// [`Peer::close_reason`] says why it ended. Hooks add up, as for
    /// [`on_connect`](Self::on_connect). A connection whose runtime shuts down under
    /// it ends too: its hooks run as the runtime drops its task, and a handle kept
    /// past the runtime no longer counts it.
    pub fn on_disconnect(&self, hook: impl Fn(&Peer, &ConnectionInfo) + Send + Sync + 'static) {
        add_hook(&self.inner.on_disconnect, Arc::new(hook));
    }

    /// Resolves to `Some(grace)` once shutdown starts, for the accept loop.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<Option<Duration>> {
        self.inner.shutdown.subscribe()
    }

    /// Counts a served listener until the guard is dropped (after the listener), so
    /// that `shutdown` returns only once the port is free.
    pub(crate) fn listening(&self) -> Listening {
        self.inner.listening.send_modify(|n| *n += 1);
        Listening(self.inner.clone())
    }

    /// Counts a handshake as being admitted until the guard is dropped, which is
    /// after its peer is started (and in `peers`) or after it failed. Taken before
    /// the handshake checks [`is_shutting_down`](Self::is_shutting_down): a shutdown
    /// that starts after that check, while the handshake still authenticates or
    /// writes its answer, waits for that connection too, instead of returning
    /// before the connection is in the registry.
    pub(crate) fn admission(&self) -> Admission {
        self.inner.admitting.fetch_add(1, Ordering::SeqCst);
        Admission(self.inner.clone())
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutdown.borrow().is_some()
    }

    /// The live peers, in no particular order.
    pub fn peers(&self) -> Vec<Peer> {
        self.inner.peers.iter().map(|e| e.value().clone()).collect()
    }

    /// How many connections are live.
    pub fn connection_count(&self) -> usize {
        self.inner.peers.len()
    }

    /// Notifies every live peer, and, when a [`Cluster`](crate::cluster::Cluster) is
    /// attached, every peer of every other node. The notification is serialized once
    /// and the same bytes are queued for each connection; it never waits on a slow peer: a peer
    /// whose outgoing queue is full gets its [`SlowPeer`](crate::SlowPeer) policy (closed
    /// with 1008 by default). Returns how many of this node's peers it was queued for.
    ///
    /// `method` is a [`Notification`](crate::Notification) contract, whose params type
    /// is checked (`handle.broadcast(Tick, &(n,))`), or a string for a name known only
    /// at run time (any params): see [`NotificationName`].
    ///
    /// # Errors
    ///
    /// The params errors of [`Caller::call`](crate::Caller::call); with a cluster,
    /// [`ClusterError::Overloaded`](crate::cluster::ClusterError::Overloaded) when its
    /// outbox is full: then the broadcast reached no one, here or elsewhere.
    pub fn broadcast<P: Serialize + ?Sized>(
        &self,
        method: impl NotificationName<P>,
        params: &P,
    ) -> Result<usize> {
        let frame = notification_frame(&method, params)?;
        // The other nodes first: if the cluster cannot take it, no one gets it.
        if let Some(relay) = self.inner.relay.get() {
            relay.broadcast(&frame)?;
        }
        Ok(self.push_all(&frame))
    }

    /// Notifies every live peer of this server only, as [`broadcast`](Self::broadcast)
    /// does (serialized once, never waiting: a peer whose outgoing queue is full gets
    /// its [`SlowPeer`](crate::SlowPeer) policy) but never across a cluster: for what
    /// each node sends its own peers (a node's own figures, say). Returns how many
    /// peers it was queued for.
    ///
    /// # Errors
    ///
    /// The params errors of [`Caller::call`](crate::Caller::call).
    pub fn broadcast_local<P: Serialize + ?Sized>(
        &self,
        method: impl NotificationName<P>,
        params: &P,
    ) -> Result<usize> {
        let frame = notification_frame(&method, params)?;
        Ok(self.push_all(&frame))
    }

    /// Queues `frame` for every live peer; how many took it.
    pub(crate) fn push_all(&self, frame: &Text) -> usize {
        let mut queued = 0;
        for entry in self.inner.peers.iter() {
            if entry.value().push(frame.clone()) {
                queued += 1;
            }
        }
        queued
    }

    /// The live peer with this [`Peer::id`], if any.
    pub fn peer(&self, id: u64) -> Option<Peer> {
        self.inner.peers.get(&id).map(|p| p.value().clone())
    }

    /// Makes broadcasts cluster-wide; false if a relay already was attached.
    pub(crate) fn attach(&self, relay: Arc<dyn Relay>) -> bool {
        self.inner.relay.set(relay).is_ok()
    }

    /// Shuts down gracefully with a grace period of 10 s; see
    /// [`shutdown_within`](Self::shutdown_within).
    pub async fn shutdown(&self) {
        self.shutdown_within(Duration::from_secs(10)).await;
    }

    /// Stops accepting; lets the calls already running on every connection finish and
    /// send their answers, for at most `grace` (new calls are refused with `-32000`);
    /// closes every connection with 1001 ("going away"); and returns once they are all
    /// gone, their tasks included (a connection whose handshake was past its checks
    /// as the shutdown began, authenticating, say, is let in and closed the same way),
    /// and every [`Server::serve`](crate::Server::serve) of
    /// this handle has let its listener go (the port is free to bind again; waited for
    /// at most 5 s, for a serve whose runtime is gone). `serve` then returns too.
    pub async fn shutdown_within(&self, grace: Duration) {
        self.inner.shutdown.send_if_modified(|slot| {
            let first = slot.is_none();
            slot.get_or_insert(grace);
            first
        });
        let peers = self.peers();
        futures_util::future::join_all(
            peers
                .iter()
                .map(|p| p.drain_and_close(1001, "server shutting down", grace)),
        )
        .await;
        // closed() resolves before a connection's tasks are gone; wait for those too.
        self.wait_gone(grace.saturating_add(Duration::from_secs(5)))
            .await;
        // And for the accept loops to let their listeners go (they stop at the signal;
        // a loop whose task is not polled again, its runtime gone, cannot, hence the
        // bound): a server bound again on the same port right after does not find it
        // taken.
        let mut listening = self.inner.listening.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(5), listening.wait_for(|n| *n == 0)).await;
    }

    /// Waits until no connection is left (at most `limit`); false if some still are.
    pub(crate) async fn wait_gone(&self, limit: Duration) -> bool {
        let mut gone = self.inner.gone.subscribe();
        let empty = async move {
            let _ = gone
                .wait_for(|_| {
                    self.inner.admitting.load(Ordering::SeqCst) == 0 && self.inner.peers.is_empty()
                })
                .await;
        };
        tokio::time::timeout(limit, empty).await.is_ok()
    }
}

/// The frame of a notification sent to many peers (a contract's one-value params as
/// `[value]`, as its handler reads them).
fn notification_frame<P: Serialize + ?Sized>(
    method: &impl NotificationName<P>,
    params: &P,
) -> Result<Text> {
    let params = message::Params {
        positional: method.positional(),
        params,
    };
    Ok(Text::from(message::request(
        method.method(),
        &params,
        None,
    )?))
}

/// A peer admitted by [`ServerHandle::admit`], in the registry, waiting for its
/// transport.
#[must_use = "a peer admitted and never started stays in the registry"]
pub(crate) struct Starting {
    peer: Peer,
    /// Taken by [`run`](Self::run); still here when dropped without it.
    on_end: Option<crate::driver::ConnectionHook>,
}

impl Starting {
    /// Runs the peer on `transport`, once the handshake's answer is written.
    pub(crate) fn run<T: crate::transport::Transport, S: Send + Sync + 'static>(
        mut self,
        transport: T,
        router: Arc<Router<S>>,
        config: &PeerConfig,
    ) -> Peer {
        let on_end = self.on_end.take();
        crate::driver::run(self.peer.clone(), transport, router, config, on_end)
    }

    /// Ends the peer at once: the handshake's answer could not be written. It ends as
    /// a connection whose other side went away ([`CloseReason::Eof`]): what was sent
    /// to it fails, and it leaves the registry (`on_disconnect` runs).
    ///
    /// [`CloseReason::Eof`]: crate::CloseReason::Eof
    pub(crate) fn abandon(self, config: &PeerConfig) {
        // A transport whose other end is already gone: the connection's task reads its
        // end first thing, and ends as any other connection does.
        let (transport, gone) = crate::transport::pair();
        drop(gone);
        self.run(transport, Arc::new(Router::<()>::new()), config);
    }
}

/// Dropped without being run (the task answering its handshake was dropped: its
/// runtime shut down under it), the peer ends where it stands, as a connection whose
/// task is dropped does: its handles see it closed, and it leaves the registry
/// (`on_disconnect` runs).
impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(on_end) = self.on_end.take() {
            crate::driver::end_unstarted(&self.peer);
            on_end(&self.peer);
        }
    }
}

/// A handshake being admitted; see [`ServerHandle::admission`].
pub(crate) struct Admission(Arc<Registry>);

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.admitting.fetch_sub(1, Ordering::SeqCst);
        self.0.gone.send_replace(());
    }
}

/// An accept loop that holds its listener; see [`ServerHandle::listening`].
pub(crate) struct Listening(Arc<Registry>);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.listening.send_modify(|n| *n -= 1);
    }
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("connections", &self.connection_count())
            .finish()
    }
}

/// The hooks of one kind, as they are now.
fn hooks(list: &RwLock<Arc<Vec<PeerHook>>>) -> Arc<Vec<PeerHook>> {
    list.read().map(|l| l.clone()).unwrap_or_default()
}

/// Runs one of the application's hooks. Its panic is logged and goes no further: it
/// would leave the peer registered with nothing to end it (`on_connect`), or stop the
/// hooks after it and the connection's end (`on_disconnect`).
fn run_hook(kind: &'static str, hook: &PeerHook, peer: &Peer, info: &ConnectionInfo) {
    let run = std::panic::AssertUnwindSafe(|| hook(peer, info));
    if std::panic::catch_unwind(run).is_err() {
        tracing::error!(peer = peer.id(), hook = kind, "a connection hook panicked");
    }
}

/// Adds a hook after the others.
fn add_hook(list: &RwLock<Arc<Vec<PeerHook>>>, hook: PeerHook) {
    if let Ok(mut slot) = list.write() {
        let mut next = Vec::clone(&slot);
        next.push(hook);
        *slot = Arc::new(next);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Caller, CloseReason, Error};

    /// A server's handle with one peer admitted (not started), and the ids its
    /// `on_disconnect` hook sees.
    fn admitted() -> (
        ServerHandle,
        PeerConfig,
        Starting,
        Peer,
        tokio::sync::mpsc::UnboundedReceiver<u64>,
    ) {
        let handle = ServerHandle::new();
        let (gone_tx, gone_rx) = tokio::sync::mpsc::unbounded_channel();
        handle.on_disconnect(move |peer, _| {
            let _ = gone_tx.send(peer.id());
        });
        let config = PeerConfig::default();
        let starting = handle.admit(&config, ConnectionInfo::default(), None, false);
        assert_eq!(handle.connection_count(), 1);
        let peer = handle.peers().remove(0);
        (handle, config, starting, peer, gone_rx)
    }

    /// A peer put in the registry before its handshake's answer, which then could not
    /// be written: it ends as a connection whose other side went away, what was sent
    /// to it fails rather than waits, and it leaves the registry.
    #[tokio::test]
    async fn an_admitted_peer_whose_answer_was_not_written_ends_and_leaves_the_registry() {
        let (handle, config, starting, peer, mut gone_rx) = admitted();
        // A call made meanwhile (by an `on_connect` hook, say) waits in the queue.
        let call = tokio::spawn({
            let peer = peer.clone();
            async move { peer.call::<u64>("anything", ()).await }
        });
        starting.abandon(&config);
        let step = Duration::from_secs(10);
        let reason = tokio::time::timeout(step, peer.closed()).await.unwrap();
        assert!(matches!(reason, CloseReason::Eof), "{reason:?}");
        let answer = tokio::time::timeout(step, call).await.unwrap().unwrap();
        assert!(matches!(answer, Err(Error::Closed(_))), "{answer:?}");
        let forgotten = tokio::time::timeout(step, gone_rx.recv()).await.unwrap();
        assert_eq!(forgotten, Some(peer.id()));
        assert_eq!(handle.connection_count(), 0);
    }

    /// A peer admitted whose handshake's task is dropped before it runs the peer (its
    /// runtime shut down under it): it ends there and then, with no runtime needed,
    /// with a cause; what is sent to it after fails, and it leaves the registry once
    /// (`on_disconnect` runs once).
    #[test]
    fn an_admitted_peer_dropped_before_it_runs_ends_and_leaves_the_registry() {
        use futures_util::FutureExt;

        let (handle, _config, starting, peer, mut gone_rx) = admitted();
        let queued = peer.notify("queued", ()).now_or_never();
        assert!(matches!(queued, Some(Ok(()))), "{queued:?}");

        drop(starting);

        assert_eq!(handle.connection_count(), 0);
        assert_eq!(gone_rx.try_recv().ok(), Some(peer.id()));
        assert!(gone_rx.try_recv().is_err(), "on_disconnect runs once");
        assert!(peer.is_closed());
        assert!(
            matches!(peer.close_reason(), Some(CloseReason::Transport(_))),
            "{:?}",
            peer.close_reason()
        );
        let sent = peer.notify("after", ()).now_or_never();
        assert!(matches!(sent, Some(Err(Error::Closed(_)))), "{sent:?}");
    }
}
