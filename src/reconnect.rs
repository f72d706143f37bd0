//! A client that reconnects: exponential backoff with jitter (`backoff.rs`), a request
//! made afresh for each attempt and a hook after each (re)connect (`link.rs`, the
//! client's task), and calls that wait for the link up to their timeout (here). Topics
//! it follows resume from their last position after each reconnect (`topics.rs`).

mod backoff;
mod link;
mod topics;

pub use backoff::Backoff;
pub use link::{LinkState, ReconnectingBuilder};
pub use topics::{TopicEvent, TopicEvents, TopicOptions};

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::call::{CallOptions, Caller, Reply, Request};
use crate::client::client_request;
use crate::config::PeerConfig;
use crate::error::{Error, Result};
use crate::peer::Peer;
use crate::router::Router;
use crate::sync::lock;
use link::{BaseRequest, LastError};

/// A client connection that comes back: when the link drops it dials again with
/// [`Backoff`], runs the `on_connect` hook (to subscribe again, say), and carries on.
///
/// Calls in flight when the link drops end with [`Error::Closed`]; calls made while it
/// is down wait for the next connection, up to their timeout, and go out on it in the
/// order they were made. Cheap to clone; the client stops when [`close`](Self::close)
/// is called or every clone is dropped, and when the server refuses it for good
/// ([`LinkState::Refused`]: a 401 or 403 is not retried forever).
///
/// The request may carry headers, as with [`connect`](crate::connect): every attempt
/// sends them (with a fresh `Sec-WebSocket-Key`). A token that expires is made afresh
/// for each attempt by [`ReconnectingBuilder::before_dial`], and
/// [`set_request`](Self::set_request) changes what the next attempts send.
///
/// Calls and notifications go through [`Caller`], as for a [`Peer`]: on the current
/// connection, waiting for one if the link is down (the call's timeout covers the
/// wait).
///
/// ```no_run
/// use jsonrpc_peer::{Caller, Reconnecting, Router};
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
    last_error: LastError,
    base: BaseRequest,
    call_timeout: Duration,
    /// Whose turn it is to wait for the link and queue a frame.
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Reconnecting {
    /// A client of `request` serving `router`, with default settings until
    /// [`start`](ReconnectingBuilder::start).
    ///
    /// `request` is a URL or a handshake request with headers, as [`connect`](crate::connect)
    /// takes; one that is not valid, or that no attempt can dial (`http://`, `wss://`
    /// without TLS support), stops the client at once ([`LinkState::Stopped`], the
    /// reason in [`last_error`](Self::last_error)).
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
            before_dial: None,
            gaps: None,
        }
    }

    /// The last failure since the link was last up: to connect (an
    /// [`Error::Refused`], an [`Error::Transport`]...) or of the link ([`Error::Closed`]
    /// with why it closed). `None` while the link is up: a reconnect that succeeds
    /// clears it.
    pub fn last_error(&self) -> Option<Arc<Error>> {
        lock(&self.last_error).clone()
    }

    /// Replaces the handshake request that the next attempts send (a new token in its
    /// headers, say): the connection that is up now stays as it is, and the next redial
    /// sends `request` (through [`before_dial`](ReconnectingBuilder::before_dial), if
    /// set). A client that has stopped for good ([`LinkState::is_final`]: closed, or
    /// [`Refused`](LinkState::Refused)) makes no more attempts, whatever the request:
    /// build another one with the new request.
    ///
    /// # Errors
    ///
    /// [`Error::Transport`] when `request` is not a valid request; the one before stays.
    pub fn set_request(&self, request: impl IntoClientRequest) -> Result<()> {
        let request = client_request(request)?;
        *lock(&self.base) = Ok(request);
        Ok(())
    }

    /// Where the link stands now. [`LinkState::Stopped`] once the client's task is gone,
    /// also when the runtime it was started in shut down under it. Once it says
    /// [`LinkState::Connected`], [`peer`](Self::peer) has the link's peer (unless the link
    /// was lost since: the state says so a moment after the peer closes); once
    /// [`connected`](Self::connected) returns a peer, it says `Connected`.
    pub fn state(&self) -> LinkState {
        let now = self.state.borrow().clone();
        if self.ended() && !now.is_final() {
            return LinkState::Stopped;
        }
        now
    }

    /// A receiver that sees each change of [`state`](Self::state) (the latest, when
    /// several came at once); its `changed` fails once the client's task is gone.
    pub fn watch_state(&self) -> watch::Receiver<LinkState> {
        self.state.clone()
    }

    /// The current connection, if the link is up.
    pub fn peer(&self) -> Option<Peer> {
        if self.ended() {
            return None;
        }
        self.current.borrow().clone().filter(|p| !p.is_closed())
    }

    /// Whether the client's task is gone: it stopped, or the runtime it was started in
    /// shut down (then its connection's task went too, unmarked: its peer would look open).
    fn ended(&self) -> bool {
        self.state.has_changed().is_err()
    }

    /// Waits until the link is up (at most `timeout`) and returns its peer.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`]; [`Error::Refused`] once the server refused the handshake
    /// for good ([`LinkState::Refused`]); [`Error::Closed`] once the client is stopped
    /// (also by the shutdown of the runtime it was started in).
    pub async fn connected(&self, timeout: Duration) -> Result<Peer> {
        tokio::time::timeout(timeout, self.up())
            .await
            .map_err(|_| Error::timeout(None, timeout))?
    }

    /// Waits until the link is up, as long as it takes.
    async fn up(&self) -> Result<Peer> {
        let mut current = self.current.clone();
        let mut state = self.state.clone();
        loop {
            let ended = state.has_changed().is_err();
            let now = state.borrow_and_update().clone();
            // Up when the state says so too: the link task puts the peer in place
            // first, so whoever sees either finds the other.
            if let Some(peer) = current.borrow_and_update().clone() {
                if !peer.is_closed() && !ended && now == LinkState::Connected {
                    return Ok(peer);
                }
            }
            if let LinkState::Refused { status } = now {
                let body = match self.last_error().as_deref() {
                    Some(Error::Refused { body, .. }) => body.clone(),
                    _ => None,
                };
                return Err(Error::Refused { status, body });
            }
            if now == LinkState::Stopped || ended {
                return Err(stopped());
            }
            tokio::select! {
                changed = current.changed() => if changed.is_err() { return Err(stopped()) },
                changed = state.changed() => if changed.is_err() { return Err(stopped()) },
            }
        }
    }

    /// Stops reconnecting and closes the current connection: calls waiting for the link
    /// end with [`Error::Closed`], and a dial or a wait under way ends at once. Returns
    /// when [`state`](Self::state) is final, the connection closed (within
    /// [`PeerConfig::close_timeout`]).
    pub async fn close(&self) {
        self.stop.send_replace(true);
        let mut state = self.state.clone();
        let _ = state.wait_for(LinkState::is_final).await;
    }
}

impl Caller for Reconnecting {
    /// On the current connection, waiting for one if the link is down: the timeout
    /// covers the wait (for a notification too).
    async fn send_request(
        &self,
        request: Request<'_>,
        options: CallOptions,
    ) -> Result<Option<Reply>> {
        let method = request.method();
        let timeout = options.timeout.unwrap_or(self.call_timeout);
        let deadline = Instant::now().checked_add(timeout);
        // Calls and notifications leave in the order they were made, those that waited
        // for the link too: each takes its turn (a fair lock, first come first served)
        // for the wait and until its frame is queued, which the first poll of the
        // peer's send does when the queue has room.
        let turn = async {
            let turn = self.turn.lock().await;
            self.up().await.map(|peer| (turn, peer))
        };
        let (turn, peer) = tokio::time::timeout(timeout, turn)
            .await
            .map_err(|_| Error::timeout(Some(method), timeout))?
            .map_err(|e| e.in_call(method))?;
        let left = deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
        let send = peer.send_request(
            request,
            CallOptions {
                timeout: Some(left),
                ..options
            },
        );
        let mut send = std::pin::pin!(send);
        let sent = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
        drop(turn);
        let sent = match sent {
            Poll::Ready(sent) => sent,
            Poll::Pending => send.await,
        };
        sent.map_err(|e| match e {
            Error::Timeout { .. } => Error::timeout(Some(method), timeout),
            other => other,
        })
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
