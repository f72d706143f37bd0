//! Accepting WebSocket connections; the live ones are kept in the registry.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::time::{timeout_at, Instant};
use tokio_tungstenite::tungstenite::http;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use crate::handshake::{self, Handshakes, Head, Rejection, Ticket};
use crate::policy::{HandshakePolicy, Refusal, Slot, Slots};

use crate::config::PeerConfig;
use crate::error::{Error, Result};
use crate::peer::ConnectionInfo;
use crate::registry::{Listening, ServerHandle};
use crate::router::Router;
use crate::transport::WebSocket;

/// A WebSocket server: every connection gets its own [`Peer`](crate::Peer) serving the router.
///
/// ```no_run
/// use jsonrpc_peer::{Context, Router, RpcError, Server};
///
/// # async fn run() -> jsonrpc_peer::Result<()> {
/// let router = Router::new().method("ping", |_cx: Context, (): ()| async {
///     Ok::<_, RpcError>("pong")
/// });
/// let server = Server::bind("127.0.0.1:9000").await?;
/// println!("listening on ws://{}", server.local_addr()?);
/// server.serve(router).await
/// # }
/// ```
pub struct Server {
    listener: TcpListener,
    config: PeerConfig,
    policy: HandshakePolicy,
    registry: ServerHandle,
    #[cfg(feature = "rustls")]
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// Echo every message instead of running a peer (the Autobahn endpoint).
    #[cfg(feature = "fuzzing")]
    echo: bool,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.listener.local_addr().ok())
            .field("config", &self.config)
            .field("policy", &self.policy)
            .field("handle", &self.registry)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds a TCP listener to `addr` (port 0 picks a free port).
    ///
    /// # Errors
    ///
    /// [`Error::Transport`] when the address cannot be bound.
    pub async fn bind(addr: impl ToSocketAddrs) -> Result<Server> {
        Server::bind_with_backlog(addr, Server::DEFAULT_BACKLOG).await
    }

    /// The listen backlog of [`bind`](Self::bind): how many connections the kernel
    /// holds, fully opened, until the server accepts them. 4,096, Linux's default cap
    /// (`net.core.somaxconn`; the kernel silently lowers a larger one to it).
    ///
    /// tokio's `TcpListener::bind` (and std's) asks for 128: when more clients than that
    /// dial at once (every client of a restarted server coming back), the queue
    /// overflows, the kernel drops their SYNs, and each dropped client waits a second
    /// or more before it tries again. A longer queue costs no memory until it fills.
    pub const DEFAULT_BACKLOG: u32 = 4096;

    /// As [`bind`](Self::bind), with a listen backlog of `backlog` instead of
    /// [`DEFAULT_BACKLOG`](Self::DEFAULT_BACKLOG) (at least 1). The socket reuses the
    /// address (`SO_REUSEADDR`, not on Windows), as tokio's and std's listeners do.
    ///
    /// # Errors
    ///
    /// [`Error::Transport`] when the address cannot be resolved or bound (for several
    /// addresses, the last one's error).
    pub async fn bind_with_backlog(addr: impl ToSocketAddrs, backlog: u32) -> Result<Server> {
        let transport = |e: std::io::Error| Error::Transport(Box::new(e));
        let mut last = None;
        for addr in tokio::net::lookup_host(addr).await.map_err(transport)? {
            match listen(addr, backlog.max(1)) {
                Ok(listener) => return Ok(Server::from_listener(listener)),
                Err(e) => last = Some(e),
            }
        }
        Err(transport(last.unwrap_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "could not resolve to any address",
            )
        })))
    }

    /// A server on a listener bound elsewhere.
    pub fn from_listener(listener: TcpListener) -> Server {
        Server {
            listener,
            config: PeerConfig::default(),
            policy: HandshakePolicy::default(),
            registry: ServerHandle::new(),
            #[cfg(feature = "rustls")]
            tls: None,
            #[cfg(feature = "fuzzing")]
            echo: false,
        }
    }

    /// Settings for every connection this server accepts.
    pub fn peer_config(mut self, config: PeerConfig) -> Self {
        self.config = config;
        self
    }

    /// Who may connect and how: connection and handshake limits, the handshake
    /// timeout, Origin allow-list, authentication.
    pub fn handshake_policy(mut self, policy: HandshakePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Serves `wss://`: every connection is a TLS connection with this configuration
    /// (feature `rustls`). [`HandshakePolicy::handshake_timeout`] is one deadline for
    /// the TLS handshake and the WebSocket handshake together.
    #[cfg(feature = "rustls")]
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(tokio_rustls::TlsAcceptor::from(config));
        self
    }

    /// Echo instead of running a peer (feature `fuzzing`).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn echo_only(mut self) -> Self {
        self.echo = true;
        self
    }

    /// The address the server listens on.
    ///
    /// # Errors
    ///
    /// [`Error::Transport`] if the socket cannot tell (it can, once bound).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::Transport(Box::new(e)))
    }

    /// Registers connections in `handle` (made with [`ServerHandle::new`]) instead of
    /// the server's own, as the `axum` feature's `Endpoint::with_handle` does. Handles
    /// taken from [`handle`](Self::handle) before this call stay with the replaced
    /// registry and see no connections.
    ///
    /// This lets what needs the handle (a [`Cluster`](crate::cluster::Cluster) over
    /// Redis, state a router holds) be set up *before* the listener is bound. Between
    /// [`bind`](Self::bind) and [`serve`](Self::serve) nothing accepts: every client
    /// that dials then waits in the listen queue, and once the queue is full the kernel
    /// drops their SYNs, and each waits a second or more before trying again (a
    /// restarted server whose clients all come back at once meets exactly that). So
    /// bind last, and serve right after:
    ///
    /// ```no_run
    /// use jsonrpc_peer::{Router, Server, ServerHandle};
    ///
    /// # async fn run() -> jsonrpc_peer::Result<()> {
    /// let handle = ServerHandle::new();
    /// // ... slow set-up that needs `handle`: connect a cluster's bus, load state ...
    /// let server = Server::bind("127.0.0.1:9000").await?.with_handle(handle.clone());
    /// println!("listening on ws://{}", server.local_addr()?);
    /// server.serve(Router::new()).await
    /// # }
    /// ```
    pub fn with_handle(mut self, handle: ServerHandle) -> Self {
        self.registry = handle;
        self
    }

    /// A handle to the live connections: count, broadcast, shutdown. It stays usable
    /// while [`serve`](Self::serve) runs.
    pub fn handle(&self) -> ServerHandle {
        self.registry.clone()
    }

    /// Accepts connections until [`ServerHandle::shutdown`], then closes every
    /// connection with 1001 and returns once they are gone.
    ///
    /// # Errors
    ///
    /// None yet: failures to accept one connection are logged and the server goes on.
    pub fn serve<S: Send + Sync + 'static>(
        self,
        router: Router<S>,
    ) -> impl Future<Output = Result<()>> + Send {
        // Counted now, not when first polled: a `shutdown` right after the serve is
        // spawned waits for this listener too.
        let listening = self.registry.listening();
        self.accept_loop(router, listening)
    }

    /// [`serve`](Self::serve)'s loop; `listening` is dropped after the listener.
    async fn accept_loop<S: Send + Sync + 'static>(
        self,
        router: Router<S>,
        listening: Listening,
    ) -> Result<()> {
        let router = Arc::new(router);
        let gate = Arc::new(Gate {
            slots: Slots::new(&self.policy),
            handshakes: Handshakes::new(self.policy.max_handshakes, self.policy.handshake_grace),
            policy: self.policy.clone(),
            #[cfg(feature = "rustls")]
            tls: self.tls.clone(),
            #[cfg(feature = "fuzzing")]
            echo: self.echo,
            line: Mutex::new(VecDeque::new()),
        });
        let mut shutdown = self.registry.shutdown_signal();
        // However the loop ends (shutdown, or this future dropped), the connections
        // still waiting in line are closed: the handshakes under way, on tasks of their
        // own, do not go on to serve them.
        let line = CloseLine(gate.clone());
        // Connections accepted while `max_handshakes` are under way wait in the gate's
        // line, oldest first, not read from, for a place. The accept loop goes on
        // taking them from the listen queue meanwhile: held there, a herd (every client
        // of a restarted server at once) overflows the queue, and the kernel drops the
        // SYNs of the rest, who send them again only after a second or three. The line
        // is at most as long as `max_connections` has room (each waiting connection
        // holds a file descriptor); past that the listen queue holds the next ones. A
        // handshake that ends passes its place to the line's first (`start`); the loop
        // serves the line when a place is given back instead (by a handshake that
        // ended as the line was empty, or was evicted).
        //
        // The line's wait for a place, kept across passes while the line is not empty:
        // made anew on every pass, it set a timer and joined the `Notify` for every
        // connection accepted during a herd, the accept loop's busiest time.
        let mut turn: Option<Pin<Box<dyn Future<Output = Ticket> + Send>>> = None;
        loop {
            let waiting = gate.waiting();
            let may_accept = waiting == 0 || waiting < gate.slots.room();
            if turn.is_none() && waiting > 0 {
                let handshakes = gate.handshakes.clone();
                turn = Some(Box::pin(async move { handshakes.enter().await }));
            }
            let event = tokio::select! {
                biased;
                _ = shutdown.wait_for(Option::is_some) => break,
                // The listen queue first: while it has connections, taking them
                // keeps it from overflowing; the line gets its turns when it is empty.
                accepted = self.listener.accept(), if may_accept => Event::Accepted(accepted),
                // Taken here, not in the task: the bound holds however far the tasks
                // lag behind the accept loop.
                ticket = std::future::poll_fn(|cx| match turn.as_mut() {
                    Some(turn) => turn.as_mut().poll(cx),
                    None => std::task::Poll::Pending,
                }), if turn.is_some() => {
                    turn = None;
                    Event::Turn(ticket)
                }
            };
            match event {
                Event::Turn(ticket) => {
                    // None: a handshake that ended took the line's first itself.
                    if let Some((stream, addr, deadline)) = gate.next_in_line() {
                        self.start(stream, addr, deadline, ticket, &router, &gate);
                    }
                }
                Event::Accepted(Ok((stream, addr))) => {
                    self.admit(stream, addr, &router, &gate);
                    // What else the listen queue holds now, taken in the same turn
                    // and outside the runtime's budget (which would end the turn
                    // after 128 accepts): a yielded accept loop waits behind every
                    // task its worker has queued, the handshakes it just started
                    // among them, and in a herd the kernel meanwhile drops the SYNs
                    // of a full queue, whose clients dial again a second later.
                    for _ in 1..ACCEPT_BURST {
                        let waiting = gate.waiting();
                        if !(waiting == 0 || waiting < gate.slots.room()) {
                            break;
                        }
                        let next = tokio::task::coop::unconstrained(std::future::poll_fn(|cx| {
                            std::task::Poll::Ready(self.listener.poll_accept(cx))
                        }))
                        .await;
                        match next {
                            std::task::Poll::Ready(Ok((stream, addr))) => {
                                self.admit(stream, addr, &router, &gate);
                            }
                            // Nothing more now. An error (out of file descriptors,
                            // most often) ends the burst: if it lasts, the loop's own
                            // accept meets it next, and waits.
                            _ => break,
                        }
                    }
                }
                Event::Accepted(Err(e)) => {
                    // Out of file descriptors, most often: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        drop(line);
        drop(self.listener);
        drop(listening);
        // Whoever called shutdown is closing the connections, within its grace period;
        // wait for them to be gone, and close any still open after that.
        let grace = (*shutdown.borrow()).unwrap_or_default();
        let registry = &self.registry;
        if !registry
            .wait_gone(grace.saturating_add(Duration::from_secs(5)))
            .await
        {
            let peers = registry.peers();
            futures_util::future::join_all(
                peers
                    .iter()
                    .map(|p| p.close_with(1001, "server shutting down")),
            )
            .await;
            registry.wait_gone(Duration::from_secs(5)).await;
        }
        Ok(())
    }
}

/// What woke the accept loop.
enum Event {
    /// A handshake place for the oldest waiting connection.
    Turn(Ticket),
    Accepted(std::io::Result<(TcpStream, SocketAddr)>),
}

/// How many connections the accept loop takes from the listen queue in one turn.
const ACCEPT_BURST: usize = 1024;

impl Server {
    /// Starts an accepted connection's handshake if there is room (and no older one
    /// waits), else puts it in the line.
    fn admit<S: Send + Sync + 'static>(
        &self,
        stream: TcpStream,
        addr: SocketAddr,
        router: &Arc<Router<S>>,
        gate: &Arc<Gate>,
    ) {
        // `Duration::MAX` ("as long as it takes") is a deadline far away, not a panic.
        let deadline = crate::deadline::after(gate.policy.handshake_timeout);
        match (gate.waiting() == 0).then(|| gate.handshakes.try_enter()) {
            Some(Ok(ticket)) => self.start(stream, addr, deadline, ticket, router, gate),
            _ => crate::sync::lock(&gate.line).push_back((stream, addr, deadline)),
        }
    }

    /// Runs one accepted connection's handshake, and then its peer, on a task of its
    /// own; then, with the same place among the handshakes, those of the connections
    /// waiting in line, if any.
    fn start<S: Send + Sync + 'static>(
        &self,
        stream: TcpStream,
        addr: SocketAddr,
        deadline: Instant,
        ticket: Ticket,
        router: &Arc<Router<S>>,
        gate: &Arc<Gate>,
    ) {
        let shaker = Shaker {
            router: router.clone(),
            config: self.config.clone(),
            registry: self.registry.clone(),
            gate: gate.clone(),
        };
        // Boxed: the handshake's future is about 5 KiB, and tokio allocates a task's
        // cell over-aligned (posix_memalign), which glibc serves by splitting blocks.
        // After a burst of connects those aligned 5 KiB blocks, freed between the
        // connections' long-lived ones, left the allocator holding about 2.5 KiB per
        // connection (bench (f), 10,000 idle connections: 7.3-7.9 KiB per connection
        // of RSS unboxed, 4.9 boxed, with the same live heap, 4.6 KB, by DHAT). As a
        // plain box beside a small task cell, the next handshakes reuse its room.
        tokio::spawn(Box::pin(async move {
            let (mut stream, mut addr, mut deadline, mut ticket) = (stream, addr, deadline, ticket);
            loop {
                shaker.one(stream, addr, deadline, &mut ticket).await;
                // The line's first gets this place and this task: in a herd (every
                // client of a restarted server at once) its request is most often
                // in already, and its handshake runs now rather than after a wake-up
                // of the accept loop and a task of its own, queued behind the calls
                // of the clients already back.
                //
                // The place first, then the line's first: taken the other way round,
                // an evicted place put the connection back in line, and the accept
                // loop, had it read the line empty meanwhile, waited for its next
                // accept before serving the line again.
                if shaker.gate.waiting() == 0 {
                    return;
                }
                // None: evicted meanwhile, the place is someone else's.
                let Some(passed) = ticket.pass() else {
                    return;
                };
                ticket = passed;
                // None: the accept loop took it (the place goes back as `ticket` drops).
                let Some(next) = shaker.gate.next_in_line() else {
                    return;
                };
                (stream, addr, deadline) = next;
            }
        }));
    }
}

/// A listener on `addr` with a backlog of `backlog`, as tokio's `TcpListener::bind`
/// makes one but for the backlog.
fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// What every handshake on one server shares.
struct Gate {
    policy: HandshakePolicy,
    slots: Slots,
    handshakes: Arc<Handshakes>,
    #[cfg(feature = "rustls")]
    tls: Option<tokio_rustls::TlsAcceptor>,
    #[cfg(feature = "fuzzing")]
    echo: bool,
    /// Connections accepted while `max_handshakes` are under way, oldest first, not
    /// read from, each with the deadline of its handshake (`handshake_timeout` from
    /// its accept), waiting for a place.
    line: Mutex<VecDeque<Waiting>>,
}

/// A connection waiting in line, with its handshake's deadline.
type Waiting = (TcpStream, SocketAddr, Instant);

/// Empties the gate's line when dropped.
struct CloseLine(Arc<Gate>);

impl Drop for CloseLine {
    fn drop(&mut self) {
        let line = std::mem::take(&mut *crate::sync::lock(&self.0.line));
        // Closed outside the lock.
        drop(line);
    }
}

impl Gate {
    /// How many connections wait in line.
    fn waiting(&self) -> usize {
        crate::sync::lock(&self.line).len()
    }

    /// The line's first whose deadline has not passed; those whose has are dropped.
    fn next_in_line(&self) -> Option<Waiting> {
        let now = Instant::now();
        loop {
            let (stream, addr, deadline) = crate::sync::lock(&self.line).pop_front()?;
            if deadline > now {
                return Some((stream, addr, deadline));
            }
            crate::metrics::handshake("timeout", None);
            tracing::debug!(%addr, "handshake timed out waiting for its turn");
        }
    }
}

/// What a handshake task needs for every connection it serves.
struct Shaker<S> {
    router: Arc<Router<S>>,
    config: PeerConfig,
    registry: ServerHandle,
    gate: Arc<Gate>,
}

impl<S: Send + Sync + 'static> Shaker<S> {
    /// One connection's handshake (TLS first, if configured) with `ticket`'s place,
    /// all by `deadline`; on success the connection runs as a peer on a task of its own.
    async fn one(
        &self,
        stream: TcpStream,
        addr: SocketAddr,
        deadline: Instant,
        ticket: &mut Ticket,
    ) {
        // Frames are coalesced by the connection's task; Nagle's delay would only add
        // latency.
        let _ = stream.set_nodelay(true);
        #[cfg(feature = "rustls")]
        if let Some(tls) = self.gate.tls.clone() {
            let accepted = ticket.run(timeout_at(deadline, tls.accept(stream)));
            match accepted.await {
                Some(Ok(Ok(stream))) => self.handshake(stream, addr, deadline, ticket).await,
                Some(Ok(Err(e))) => {
                    crate::metrics::handshake("gone", None);
                    tracing::debug!(%addr, error = %e, "TLS handshake failed");
                }
                Some(Err(_)) => {
                    crate::metrics::handshake("timeout", None);
                    tracing::debug!(%addr, "TLS handshake timed out");
                }
                None => {
                    crate::metrics::handshake("evicted", None);
                    tracing::debug!(%addr, "handshake evicted");
                }
            }
            return;
        }
        self.handshake(stream, addr, deadline, ticket).await;
    }

    /// The WebSocket handshake; on success the connection runs as a peer.
    async fn handshake<IO>(
        &self,
        mut io: IO,
        addr: SocketAddr,
        deadline: Instant,
        ticket: &mut Ticket,
    ) where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let gate = &self.gate;
        let decided = ticket
            .run(timeout_at(
                deadline,
                decide(&mut io, addr, gate, &self.registry),
            ))
            .await;
        let (request, tail, slot, auth, accept, admission) = match decided {
            Some(Ok(Ok(admitted))) => admitted,
            Some(Ok(Err(Some(rejection)))) => {
                crate::metrics::handshake("refused", Some(rejection.status.as_u16()));
                // Not DEBUG-only: a refusal is what an operator looks for first.
                crate::logs::throttled!(info, %addr, status = %rejection.status, "handshake refused");
                // The answer gets what is left of the deadline.
                let _ = timeout_at(deadline, handshake::reject(&mut io, &rejection)).await;
                return;
            }
            Some(Ok(Err(None))) => {
                crate::metrics::handshake("gone", None);
                tracing::debug!(%addr, "connection closed during the handshake");
                return;
            }
            Some(Err(_)) => {
                crate::metrics::handshake("timeout", None);
                tracing::debug!(%addr, "handshake timed out");
                return;
            }
            None => {
                crate::metrics::handshake("evicted", None);
                tracing::debug!(%addr, "handshake evicted by newer ones");
                return;
            }
        };
        #[cfg(feature = "fuzzing")]
        if gate.echo {
            if switch(&mut io, &accept, deadline, addr).await {
                let config = Some(self.config.websocket());
                let ws = WebSocketStream::from_partially_read(io, tail, Role::Server, config).await;
                tokio::spawn(async move {
                    let _slot = slot;
                    crate::transport::echo::echo(WebSocket::new(ws)).await;
                });
            }
            return;
        }
        let (parts, ()) = request.into_parts();
        let info = ConnectionInfo {
            remote_addr: Some(addr),
            path: Some(parts.uri.to_string()),
            headers: parts.headers,
            auth,
        };
        // In the registry before the client can read the 101: a broadcast made once its
        // connect has resolved reaches it. From here the connection counts in its slot.
        let starting =
            self.registry
                .admit(&self.config, info, Some(slot), gate.policy.keep_headers);
        // The peer is in the registry now (or was asked to close, admitted as a
        // shutdown began): a shutdown need not wait for this handshake any longer.
        drop(admission);
        if !switch(&mut io, &accept, deadline, addr).await {
            starting.abandon(&self.config);
            return;
        }
        // The ticket's place goes to the next in line, or is given back, once the peer
        // is started.
        let ws = WebSocketStream::from_partially_read(
            crate::transport::ReadAhead::new(io),
            tail,
            Role::Server,
            Some(self.config.websocket()),
        )
        .await;
        starting.run(WebSocket::new(ws), self.router.clone(), &self.config);
    }
}

/// Writes the handshake's `101` answer by `deadline`: whether it was written.
async fn switch<IO: tokio::io::AsyncWrite + Unpin>(
    io: &mut IO,
    accept: &http::HeaderValue,
    deadline: Instant,
    addr: SocketAddr,
) -> bool {
    match timeout_at(deadline, handshake::switch(io, accept)).await {
        Ok(Ok(())) => {
            crate::metrics::handshake("accepted", Some(101));
            true
        }
        _ => {
            crate::metrics::handshake("gone", None);
            tracing::debug!(%addr, "the 101 answer could not be written in time");
            false
        }
    }
}

/// What an admitted handshake carries on: the request, bytes read past its head, the
/// connection slot, what authentication attached, the accept key, and its place among
/// the handshakes a shutdown waits for.
type Admitted = (
    http::Request<()>,
    Vec<u8>,
    Slot,
    Option<crate::peer::Attached>,
    http::HeaderValue,
    crate::registry::Admission,
);

/// Reads and decides one handshake request: `Err(Some(answer))` to refuse it,
/// `Err(None)` when the client went away first.
async fn decide<IO: tokio::io::AsyncRead + Unpin>(
    io: &mut IO,
    addr: SocketAddr,
    gate: &Gate,
    registry: &ServerHandle,
) -> std::result::Result<Admitted, Option<Rejection>> {
    let (request, tail) = match handshake::read_head(io, gate.policy.max_handshake_size).await {
        Head::Request(request, tail) => (request, tail),
        Head::Gone => return Err(None),
        Head::Bad(rejection) => return Err(Some(rejection)),
    };
    let accept = handshake::check(request.method(), request.version(), request.headers())?;
    let admission = registry.admission();
    if registry.is_shutting_down() {
        return Err(Some(Rejection::new(
            http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting down",
        )));
    }
    // The request's own faults first: a client told 403 or 401 stops dialling, one
    // told 503 (full) dials again, and would for good.
    let auth = gate.policy.check(&request).map_err(|r| Some(refuse(&r)))?;
    // The connection counts against the limit from here on: connections that never
    // complete a handshake take no slot.
    let slot = gate
        .slots
        .take(Some(addr.ip()))
        .map_err(|r| Some(refuse(&r)))?;
    Ok((request, tail, slot, auth, accept, admission))
}

/// The HTTP answer to a refused handshake.
fn refuse(refusal: &Refusal) -> Rejection {
    Rejection::new(refusal.http_status(), refusal.reason.clone())
}
