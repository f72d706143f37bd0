//! A client that reconnects: exponential backoff with jitter, a hook after each
//! (re)connect, and calls that wait for the link up to their timeout. Topics it follows
//! resume from their last position after each reconnect (`reconnect/topics.rs`).

mod topics;

pub use topics::{TopicEvent, TopicEvents, TopicOptions};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;

use crate::client::{again, client_request, connect_shared};
use crate::config::PeerConfig;
use crate::error::{Error, Result};
use crate::peer::Peer;
use crate::router::Router;
use crate::sync::lock;

/// How long to wait between attempts: exponential, capped, with full jitter.
///
/// Attempt `n` (from 0) waits a random time between zero and
/// `min(max, initial * multiplier^n)`, so clients that lost the same server at the
/// same moment do not all come back at the same moment. A connection that succeeds
/// starts the count again.
///
/// ```
/// use std::time::Duration;
/// use jsonrpc_peer::Backoff;
///
/// let backoff = Backoff::default().initial(Duration::from_millis(250)).max(Duration::from_secs(5));
/// assert_eq!(backoff.multiplier, 2.0);
/// assert!(backoff.delay(10) <= Duration::from_secs(5));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Backoff {
    /// The cap of the first wait (default 100 ms).
    pub initial: Duration,
    /// The largest cap (default 10 s).
    pub max: Duration,
    /// How much the cap grows per failed attempt (default 2).
    pub multiplier: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
            multiplier: 2.0,
        }
    }
}

impl Backoff {
    /// Sets [`Self::initial`].
    pub fn initial(mut self, value: Duration) -> Self {
        self.initial = value;
        self
    }

    /// Sets [`Self::max`].
    pub fn max(mut self, value: Duration) -> Self {
        self.max = value;
        self
    }

    /// Sets [`Self::multiplier`].
    pub fn multiplier(mut self, value: f64) -> Self {
        self.multiplier = value;
        self
    }

    /// The wait before attempt `attempt` (counted from 0 since the last success).
    pub fn delay(&self, attempt: u32) -> Duration {
        let cap = self.initial.as_secs_f64() * self.multiplier.powi(attempt.min(64) as i32);
        let cap = cap.min(self.max.as_secs_f64()).max(0.0);
        Duration::from_secs_f64(fastrand::f64() * cap)
    }
}

/// Where a [`Reconnecting`] client stands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkState {
    /// Dialing; `attempt` counts failures since the last success.
    Connecting {
        /// Failed attempts since the last success.
        attempt: u32,
    },
    /// Connected, and the `on_connect` hook has run.
    Connected,
    /// Waiting before the next attempt.
    Waiting {
        /// Failed attempts since the last success.
        attempt: u32,
        /// How long the wait is.
        retry_in: Duration,
    },
    /// [`Reconnecting::close`] was called, or every handle was dropped, or the request
    /// could not be made (a malformed URL: see [`Reconnecting::last_error`]).
    Stopped,
    /// The server refused the handshake with a status that trying again will not
    /// change (a 4xx other than 408 and 429: 401, 403, 404...), so the client stopped
    /// trying. Calls fail with [`Error::Refused`]; [`Reconnecting::last_error`] has the
    /// body. A refusal with any other status (503 when the server is full, 5xx) is
    /// retried with the backoff, as any failure to connect is.
    Refused {
        /// The HTTP status of the refusal.
        status: crate::http::StatusCode,
    },
}

impl LinkState {
    /// Whether the client has stopped for good ([`Stopped`](Self::Stopped) or
    /// [`Refused`](Self::Refused)).
    pub fn is_final(&self) -> bool {
        matches!(self, LinkState::Stopped | LinkState::Refused { .. })
    }
}

/// Whether a refusal with this status is worth another attempt: a 4xx says the request
/// itself is refused (credentials, path), except for 408 and 429, which are about timing.
fn retry_refusal(status: crate::http::StatusCode) -> bool {
    !status.is_client_error() || status.as_u16() == 408 || status.as_u16() == 429
}

/// A hook run each time the link is up, before calls go through it.
type ConnectHook = Arc<dyn Fn(Peer) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A client connection that comes back: when the link drops it dials again with
/// [`Backoff`], runs the `on_connect` hook (to subscribe again, say), and carries on.
///
/// Calls in flight when the link drops end with [`Error::Closed`]; calls made while it
/// is down wait for the next connection, up to their timeout. Cheap to clone; the
/// client stops when [`close`](Self::close) is called or every clone is dropped, and
/// when the server refuses it for good ([`LinkState::Refused`]: a 401 or 403 is not
/// retried forever).
///
/// The request may carry headers, as with [`connect`](crate::connect): every attempt
/// sends them (with a fresh `Sec-WebSocket-Key`).
///
/// ```no_run
/// use jsonrpc_peer::{Reconnecting, Router};
///
/// # async fn run() -> jsonrpc_peer::Result<()> {
/// let client = Reconnecting::builder("ws://127.0.0.1:9000", Router::new())
///     .on_connect(|peer| async move {
///         // Runs after every (re)connect, before calls go through.
///         let _ = peer.call::<bool>("subscribe", ("ticker",)).await;
///     })
///     .start();
/// let diff: i64 = client.call("subtract", [42, 23]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Reconnecting {
    stop: Arc<watch::Sender<bool>>,
    current: watch::Receiver<Option<Peer>>,
    state: watch::Receiver<LinkState>,
    last_error: Arc<std::sync::Mutex<Option<Arc<Error>>>>,
    call_timeout: Duration,
}

/// Settings for a [`Reconnecting`] client; see [`Reconnecting::builder`].
pub struct ReconnectingBuilder<S> {
    request: Result<Request, Arc<Error>>,
    router: Router<S>,
    config: PeerConfig,
    backoff: Backoff,
    on_connect: Vec<ConnectHook>,
}

impl<S> std::fmt::Debug for ReconnectingBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconnectingBuilder")
            .field("uri", &self.request.as_ref().map(|r| r.uri().to_string()))
            .field("backoff", &self.backoff)
            .field("on_connect_hooks", &self.on_connect.len())
            .finish_non_exhaustive()
    }
}

impl<S: Send + Sync + 'static> ReconnectingBuilder<S> {
    /// Settings for each connection.
    pub fn peer_config(mut self, config: PeerConfig) -> Self {
        self.config = config;
        self
    }

    /// The wait between attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Runs after each (re)connect, before the connection is offered to calls: an
    /// async hook, as it usually calls the other side (to subscribe again) and calls
    /// made through the client must wait for it. Hooks add up: each one given runs, in
    /// the order given.
    ///
    /// (The server's [`ServerHandle::on_connect`](crate::ServerHandle::on_connect) is a
    /// plain function instead: it runs on the connection's path before its first frame
    /// is read, must not hold that up, and spawns whatever it wants to await.)
    pub fn on_connect<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Peer) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.on_connect
            .push(Arc::new(move |peer| Box::pin(hook(peer))));
        self
    }

    /// Starts dialing in the background (within a tokio runtime).
    pub fn start(self) -> Reconnecting {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (current_tx, current_rx) = watch::channel(None);
        let (state_tx, state_rx) = watch::channel(LinkState::Connecting { attempt: 0 });
        let call_timeout = self.config.call_timeout;
        let last_error = Arc::new(std::sync::Mutex::new(None));
        tokio::spawn(self.run(stop_rx, current_tx, state_tx, last_error.clone()));
        Reconnecting {
            stop: Arc::new(stop_tx),
            current: current_rx,
            state: state_rx,
            last_error,
            call_timeout,
        }
    }

    async fn run(
        self,
        mut stop: watch::Receiver<bool>,
        current: watch::Sender<Option<Peer>>,
        state: watch::Sender<LinkState>,
        last_error: Arc<std::sync::Mutex<Option<Arc<Error>>>>,
    ) {
        let router = Arc::new(self.router);
        let remember = |e: Error| {
            *lock(&last_error) = Some(Arc::new(e));
        };
        let request = match &self.request {
            Ok(request) => request,
            Err(e) => {
                tracing::warn!(error = %e, "reconnecting client: the request is not valid; stopped");
                *lock(&last_error) = Some(e.clone());
                state.send_replace(LinkState::Stopped);
                return;
            }
        };
        let url = request.uri().to_string();
        // Resolves when close() is called or every handle is gone.
        let stopped = |stop: &mut watch::Receiver<bool>| {
            let mut stop = stop.clone();
            async move {
                let _ = stop.wait_for(|s| *s).await;
            }
        };
        let mut attempt = 0u32;
        loop {
            state.send_replace(LinkState::Connecting { attempt });
            let dial = connect_shared(again(request), router.clone(), &self.config);
            let connected = tokio::select! {
                biased;
                _ = stopped(&mut stop) => break,
                connected = dial => connected,
            };
            match connected {
                Ok(peer) => {
                    attempt = 0;
                    let hooks = async {
                        for hook in &self.on_connect {
                            hook(peer.clone()).await;
                        }
                    };
                    tokio::select! {
                        biased;
                        _ = stopped(&mut stop) => { peer.close().await; break }
                        _ = hooks => {}
                    }
                    state.send_replace(LinkState::Connected);
                    current.send_replace(Some(peer.clone()));
                    let ended = tokio::select! {
                        biased;
                        _ = stopped(&mut stop) => None,
                        reason = peer.closed() => Some(reason),
                    };
                    current.send_replace(None);
                    match ended {
                        Some(reason) => {
                            tracing::info!(%url, %reason, "link lost; reconnecting");
                            remember(Error::Closed(reason));
                        }
                        None => {
                            peer.close().await;
                            break;
                        }
                    }
                }
                Err(Error::Refused { status, body }) if !retry_refusal(status) => {
                    tracing::warn!(%url, %status, body = body.as_deref().unwrap_or(""), "the server refused the handshake; not trying again");
                    remember(Error::Refused { status, body });
                    current.send_replace(None);
                    state.send_replace(LinkState::Refused { status });
                    return;
                }
                Err(e) => {
                    tracing::debug!(%url, error = %e, attempt, "connect failed");
                    remember(e);
                }
            }
            let retry_in = self.backoff.delay(attempt);
            attempt = attempt.saturating_add(1);
            state.send_replace(LinkState::Waiting { attempt, retry_in });
            tokio::select! {
                biased;
                _ = stopped(&mut stop) => break,
                _ = tokio::time::sleep(retry_in) => {}
            }
        }
        current.send_replace(None);
        state.send_replace(LinkState::Stopped);
    }
}

impl Reconnecting {
    /// A client of `url` serving `router`, with default settings until
    /// [`start`](ReconnectingBuilder::start).
    ///
    /// `request` is a URL or a handshake request with headers, as [`connect`](crate::connect)
    /// takes; one that is not valid stops the client at once ([`LinkState::Stopped`],
    /// the reason in [`last_error`](Self::last_error)).
    pub fn builder<S: Send + Sync + 'static>(
        request: impl IntoClientRequest,
        router: Router<S>,
    ) -> ReconnectingBuilder<S> {
        ReconnectingBuilder {
            request: client_request(request).map_err(Arc::new),
            router,
            config: PeerConfig::default(),
            backoff: Backoff::default(),
            on_connect: Vec::new(),
        }
    }

    /// The last failure: to connect (an [`Error::Refused`], an [`Error::Transport`]...)
    /// or of the link ([`Error::Closed`] with why it closed). Kept after the link is up
    /// again, so a display can say what happened last.
    pub fn last_error(&self) -> Option<Arc<Error>> {
        lock(&self.last_error).clone()
    }

    /// Where the link stands now.
    pub fn state(&self) -> LinkState {
        self.state.borrow().clone()
    }

    /// A receiver that sees every change of [`state`](Self::state).
    pub fn watch_state(&self) -> watch::Receiver<LinkState> {
        self.state.clone()
    }

    /// The current connection, if the link is up.
    pub fn peer(&self) -> Option<Peer> {
        self.current.borrow().clone().filter(|p| !p.is_closed())
    }

    /// Waits until the link is up (at most `timeout`) and returns its peer.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], or [`Error::Closed`] once the client is stopped.
    pub async fn connected(&self, timeout: Duration) -> Result<Peer> {
        let mut current = self.current.clone();
        let mut state = self.state.clone();
        let wait = async {
            loop {
                if let Some(peer) = current.borrow_and_update().clone() {
                    if !peer.is_closed() {
                        return Ok(peer);
                    }
                }
                let now = state.borrow_and_update().clone();
                if let LinkState::Refused { status } = now {
                    let body = match self.last_error().as_deref() {
                        Some(Error::Refused { body, .. }) => body.clone(),
                        _ => None,
                    };
                    return Err(Error::Refused { status, body });
                }
                if now == LinkState::Stopped {
                    return Err(stopped());
                }
                tokio::select! {
                    changed = current.changed() => if changed.is_err() { return Err(stopped()) },
                    changed = state.changed() => if changed.is_err() { return Err(stopped()) },
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| Error::timeout(None, timeout))?
    }

    /// [`Peer::call`] on the current connection, waiting for one if the link is down.
    /// The call's timeout covers the wait.
    ///
    /// # Errors
    ///
    /// As for [`Peer::call`].
    pub async fn call<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<R> {
        self.call_with_timeout(method, params, self.call_timeout)
            .await
    }

    /// [`call`](Self::call) with its own timeout.
    ///
    /// # Errors
    ///
    /// As for [`Peer::call`].
    pub async fn call_with_timeout<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
        timeout: Duration,
    ) -> Result<R> {
        let deadline = Instant::now() + timeout;
        let peer = self.connected(timeout).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        peer.call_with_timeout(method, params, left)
            .await
            .map_err(|e| match e {
                Error::Timeout { .. } => Error::timeout(Some(method), timeout),
                other => other,
            })
    }

    /// [`Peer::notify`] on the current connection, waiting for one (up to the call
    /// timeout) if the link is down.
    ///
    /// # Errors
    ///
    /// As for [`Peer::notify`], or [`Error::Timeout`].
    pub async fn notify(&self, method: &str, params: impl Serialize) -> Result<()> {
        self.connected(self.call_timeout)
            .await?
            .notify(method, params)
            .await
    }

    /// Stops reconnecting and closes the current connection.
    pub async fn close(&self) {
        self.stop.send_replace(true);
        let mut state = self.state.clone();
        let _ = state.wait_for(LinkState::is_final).await;
    }
}

fn stopped() -> Error {
    Error::Closed(crate::CloseReason::Local {
        code: 1000,
        reason: "the reconnecting client was stopped".into(),
    })
}

impl std::fmt::Debug for Reconnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconnecting")
            .field("state", &self.state())
            .finish()
    }
}
