//! The reconnecting client's settings and its one task: dial (with the request made
//! for this attempt), run the `on_connect` hooks, offer the connection to calls, wait
//! for it to end, back off, dial again.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_tungstenite::tungstenite::handshake::client::Request;

use super::backoff::Backoff;
use super::Reconnecting;
use crate::client::{again, connect_shared};
use crate::config::PeerConfig;
use crate::error::{Error, Result};
use crate::peer::Peer;
use crate::router::Router;
use crate::sync::lock;

/// Where a [`Reconnecting`] client stands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkState {
    /// Dialing; `attempt` counts failures since the last success.
    Connecting {
        /// Failed attempts since the last success; a link that was up and was lost
        /// counts as the first, and one lost sooner than [`Backoff::max`] after it
        /// opened counts as one more.
        attempt: u32,
    },
    /// Connected, and the `on_connect` hook has run.
    Connected,
    /// Waiting before the next attempt.
    Waiting {
        /// Failed attempts since the last success; a link that was up and was lost
        /// counts as the first, and one lost sooner than [`Backoff::max`] after it
        /// opened counts as one more.
        attempt: u32,
        /// How long the wait is.
        retry_in: Duration,
    },
    /// [`Reconnecting::close`] was called, or every handle was dropped, or the request
    /// could not be made or dialed (a malformed URL, a scheme other than `ws` and `wss`,
    /// `wss` without TLS support: see [`Reconnecting::last_error`]), or the runtime the
    /// client was started in shut down.
    Stopped,
    /// The server refused the handshake with a status that trying again will not
    /// change (a 4xx other than 408 and 429: 401, 403, 404...), so the client stopped
    /// trying. Calls fail with [`Error::Refused`]; [`Reconnecting::last_error`] has the
    /// body. A refusal with any other status (503 when the server is full, 5xx) is
    /// retried with the backoff, as any failure to connect is, after the wait its
    /// `Retry-After` asks for in seconds, if it has one (the backoff's wait is added,
    /// for jitter; a `Retry-After` that is a date is not read). (A token that expires
    /// is refreshed by [`ReconnectingBuilder::before_dial`], so a 401 means the fresh
    /// one was refused too.)
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
/// itself is refused (credentials, path), except for 408 and 429, which are about timing;
/// a permanent redirect (301, 308) says the address moved for good (the client does not
/// follow redirects: give it the new address). A temporary one (302, 303, 307) is
/// retried, as the server may take the request again.
fn retry_refusal(status: crate::http::StatusCode) -> bool {
    let permanent_redirect = matches!(status.as_u16(), 301 | 308);
    !permanent_redirect
        && (!status.is_client_error() || status.as_u16() == 408 || status.as_u16() == 429)
}

/// A hook run each time the link is up, before calls go through it.
type ConnectHook = Arc<dyn Fn(Peer) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A hook that makes each attempt's handshake request from the base one.
type DialHook =
    Arc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Result<Request>> + Send>> + Send + Sync>;

/// What the handle and the task share about the request: the base one, which
/// [`Reconnecting::set_request`] replaces, or why there is none.
pub(super) type BaseRequest = Arc<Mutex<Result<Request, Arc<Error>>>>;

/// What the handle and the task share about the last failure.
pub(super) type LastError = Arc<Mutex<Option<Arc<Error>>>>;

/// Settings for a [`Reconnecting`] client; see [`Reconnecting::builder`].
pub struct ReconnectingBuilder<S> {
    pub(super) request: Result<Request, Arc<Error>>,
    pub(super) router: Router<S>,
    pub(super) config: PeerConfig,
    pub(super) backoff: Backoff,
    pub(super) on_connect: Vec<ConnectHook>,
    pub(super) before_dial: Option<DialHook>,
    /// The `$/gap` handler's table, once a topic is followed.
    pub(super) gaps: Option<Arc<super::topics::Gaps>>,
}

impl<S> std::fmt::Debug for ReconnectingBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconnectingBuilder")
            .field("uri", &self.request.as_ref().map(|r| r.uri().to_string()))
            .field("backoff", &self.backoff)
            .field("on_connect_hooks", &self.on_connect.len())
            .field("before_dial", &self.before_dial.is_some())
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
    /// the order given. A hook that panics costs its connection: it is closed with 1011,
    /// [`last_error`](crate::Reconnecting::last_error) says so, and the link dials
    /// again after its backoff.
    ///
    /// A hook calls through the `peer` it is given: a call through the client itself (a
    /// clone captured by the hook) waits for the link, which waits for the hook, so it
    /// ends only at its timeout. Nothing times the hook out: one that never ends keeps
    /// the link at [`LinkState::Connecting`] (calls wait their timeouts; `close` still
    /// ends it), so give its own waits a timeout (calls on `peer` have one).
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

    /// Makes the handshake request of each attempt: `hook` gets the base request (the
    /// one given to [`Reconnecting::builder`], or to
    /// [`Reconnecting::set_request`] since, with a fresh `Sec-WebSocket-Key`) and
    /// returns the one to send. For a bearer token that expires: fetch the current one
    /// and put it in `Authorization`, so a redial after the token rotated gets in
    /// instead of ending in a 401 and [`LinkState::Refused`].
    ///
    /// An error from the hook (the token service is down), no request within
    /// [`PeerConfig::connect_timeout`], or a panic of the hook, counts as a failed
    /// attempt: it is kept in [`last_error`](Reconnecting::last_error) and the client
    /// tries again after the backoff.
    ///
    /// ```no_run
    /// use std::sync::{Arc, Mutex};
    /// use jsonrpc_peer::http::header::{HeaderValue, AUTHORIZATION};
    /// use jsonrpc_peer::{Caller, Error, Reconnecting, Router};
    ///
    /// # async fn run() -> jsonrpc_peer::Result<()> {
    /// // Where the application keeps its current token (refreshed elsewhere).
    /// let token = Arc::new(Mutex::new(String::from("t1")));
    /// let client = Reconnecting::builder("ws://127.0.0.1:9000/rpc", Router::new())
    ///     .before_dial(move |mut request| {
    ///         let token = token.lock().map(|t| t.clone()).unwrap_or_default();
    ///         async move {
    ///             let value = HeaderValue::try_from(format!("Bearer {token}"))
    ///                 .map_err(|e| Error::Transport(Box::new(e)))?;
    ///             request.headers_mut().insert(AUTHORIZATION, value);
    ///             Ok(request)
    ///         }
    ///     })
    ///     .start();
    /// let who: String = client.call("whoami", ()).await?;
    /// # Ok(()) }
    /// ```
    pub fn before_dial<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(crate::http::Request<()>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<crate::http::Request<()>>> + Send + 'static,
    {
        self.before_dial = Some(Arc::new(move |request| Box::pin(hook(request))));
        self
    }

    /// Starts dialing in the background (within a tokio runtime). The client stops when
    /// every handle of it is dropped: keep the one returned while the client is used
    /// (by the [`TopicEvents`](crate::TopicEvents) of its topics too).
    #[must_use = "the client stops as soon as every handle of it is dropped"]
    pub fn start(self) -> Reconnecting {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (current_tx, current_rx) = watch::channel(None);
        let (state_tx, state_rx) = watch::channel(LinkState::Connecting { attempt: 0 });
        let call_timeout = self.config.call_timeout;
        let last_error = LastError::default();
        let base = Arc::new(Mutex::new(self.request));
        let link = Link {
            router: Arc::new(self.router),
            config: self.config,
            backoff: self.backoff,
            on_connect: self.on_connect,
            before_dial: self.before_dial,
            base: base.clone(),
            stop: stop_rx,
            current: current_tx,
            state: state_tx,
            last_error: last_error.clone(),
        };
        tokio::spawn(link.run());
        Reconnecting {
            stop: Arc::new(stop_tx),
            current: current_rx,
            state: state_rx,
            last_error,
            base,
            call_timeout,
            turn: Default::default(),
        }
    }
}

/// The client's task and what it owns.
struct Link<S> {
    router: Arc<Router<S>>,
    config: PeerConfig,
    backoff: Backoff,
    on_connect: Vec<ConnectHook>,
    before_dial: Option<DialHook>,
    base: BaseRequest,
    stop: watch::Receiver<bool>,
    current: watch::Sender<Option<Peer>>,
    state: watch::Sender<LinkState>,
    last_error: LastError,
}

/// How one attempt ended.
enum Attempt {
    /// The connection was up for at least the longest wait and ended: the count starts
    /// again (the wait of attempt 0).
    Lost,
    /// It failed, or the connection ended sooner: back off.
    Failed,
    /// The server refused the handshake for now and asked for this wait first
    /// (`Retry-After`): back off after it.
    FailedAsked(Duration),
    /// Stopped: by the handle, a refusal for good, or a request that cannot be made.
    Done,
}

impl<S: Send + Sync + 'static> Link<S> {
    async fn run(mut self) {
        let mut attempt = 0u32;
        loop {
            self.state.send_replace(LinkState::Connecting { attempt });
            let asked = match self.attempt().await {
                Attempt::Done => break,
                Attempt::Lost => {
                    attempt = 0;
                    Duration::ZERO
                }
                Attempt::Failed => Duration::ZERO,
                Attempt::FailedAsked(wait) => wait,
            };
            // At least what the server asked for; the backoff's jitter on top, so that
            // the clients it refused together do not all come back together.
            let retry_in =
                crate::deadline::capped(asked.saturating_add(self.backoff.delay(attempt)));
            attempt = attempt.saturating_add(1);
            self.state
                .send_replace(LinkState::Waiting { attempt, retry_in });
            tokio::select! {
                biased;
                _ = self.stopped() => break,
                _ = tokio::time::sleep(retry_in) => {}
            }
        }
        self.current.send_replace(None);
        if !self.state.borrow().is_final() {
            self.state.send_replace(LinkState::Stopped);
        }
    }

    /// Resolves when close() is called or every handle is gone.
    fn stopped(&self) -> impl Future<Output = ()> + 'static {
        let mut stop = self.stop.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    }

    fn remember(&self, error: Error) {
        *lock(&self.last_error) = Some(Arc::new(error));
    }

    /// This attempt's request: the base one, with a fresh key, through the hook.
    async fn request(&self) -> Result<Request, Attempt> {
        let base = match &*lock(&self.base) {
            Ok(request) => again(request),
            Err(e) => {
                tracing::warn!(error = %e, "reconnecting client: the request is not valid; stopped");
                *lock(&self.last_error) = Some(e.clone());
                return Err(Attempt::Done);
            }
        };
        let Some(hook) = &self.before_dial else {
            return Ok(base);
        };
        // A hook that hangs must not stall the client: it has the connect timeout. One
        // that panics (in the closure or in its future) fails this attempt, not the
        // client's task.
        let limit = self.config.connect_timeout;
        let made = async {
            use futures_util::FutureExt;
            let run = std::panic::AssertUnwindSafe(async { hook(base).await }).catch_unwind();
            match tokio::time::timeout(limit, run).await {
                Ok(Ok(made)) => made,
                Ok(Err(_)) => Err(Error::Transport(Box::new(std::io::Error::other(
                    "the before_dial hook panicked",
                )))),
                Err(_) => Err(Error::timeout(None, limit)),
            }
        };
        tokio::select! {
            biased;
            _ = self.stopped() => Err(Attempt::Done),
            made = made => made.map_err(|e| {
                tracing::debug!(error = %e, "the before_dial hook failed");
                self.remember(e);
                Attempt::Failed
            }),
        }
    }

    /// One dial, and the connection's life if it succeeds.
    async fn attempt(&mut self) -> Attempt {
        let request = match self.request().await {
            Ok(request) => request,
            Err(ended) => return ended,
        };
        let url = request.uri().to_string();
        let dial = connect_shared(request, self.router.clone(), &self.config);
        let connected = tokio::select! {
            biased;
            _ = self.stopped() => return Attempt::Done,
            connected = dial => connected,
        };
        let failed = match connected {
            Ok(peer) => return self.serve(peer, &url).await,
            Err(failed) => failed,
        };
        if failed.for_good {
            tracing::warn!(%url, error = %failed.error, "reconnecting client: the request cannot be dialed; stopped");
            self.remember(failed.error);
            return Attempt::Done;
        }
        match failed.error {
            Error::Refused { status, body } if !retry_refusal(status) => {
                tracing::warn!(%url, %status, body = body.as_deref().unwrap_or(""), "the server refused the handshake; not trying again");
                self.remember(Error::Refused { status, body });
                self.current.send_replace(None);
                self.state.send_replace(LinkState::Refused { status });
                Attempt::Done
            }
            e => {
                tracing::debug!(%url, error = %e, retry_after = ?failed.retry_after, "connect failed");
                self.remember(e);
                match failed.retry_after {
                    Some(wait) => Attempt::FailedAsked(wait),
                    None => Attempt::Failed,
                }
            }
        }
    }

    /// Runs the hooks, offers the connection to calls until it ends.
    async fn serve(&mut self, peer: Peer, url: &str) -> Attempt {
        let opened = tokio::time::Instant::now();
        let hooks = async {
            use futures_util::FutureExt;
            for hook in &self.on_connect {
                // Called inside: a closure that panics before it returns its future is
                // caught as one whose future panics.
                if std::panic::AssertUnwindSafe(async { hook(peer.clone()).await })
                    .catch_unwind()
                    .await
                    .is_err()
                {
                    return false;
                }
            }
            true
        };
        tokio::select! {
            biased;
            _ = self.stopped() => { peer.close().await; return Attempt::Done }
            ok = hooks => if !ok {
                tracing::error!(%url, "an on_connect hook panicked; closing the link");
                peer.close_with(1011, "on_connect hook panicked").await;
                self.remember(Error::Closed(peer.closed().await));
                return Attempt::Failed;
            }
        }
        // Up again: what failed before is no longer the state of the link.
        *lock(&self.last_error) = None;
        // The peer first: whoever sees `Connected` (a `watch_state` woken on another
        // thread) finds it in `peer()`.
        self.current.send_replace(Some(peer.clone()));
        self.state.send_replace(LinkState::Connected);
        let ended = tokio::select! {
            biased;
            _ = self.stopped() => None,
            reason = peer.closed() => Some(reason),
        };
        self.current.send_replace(None);
        match ended {
            // A link lost sooner than the longest wait is no success: a server that
            // accepts and closes at once (shedding load) is dialed with growing waits, at
            // the pace of a server that is down, not every `initial` for ever.
            Some(reason) if opened.elapsed() < self.backoff.max => {
                tracing::debug!(%url, %reason, "link lost soon after it opened; backing off");
                self.remember(Error::Closed(reason));
                Attempt::Failed
            }
            Some(reason) => {
                tracing::info!(%url, %reason, "link lost; reconnecting");
                self.remember(Error::Closed(reason));
                Attempt::Lost
            }
            None => {
                peer.close().await;
                Attempt::Done
            }
        }
    }
}
