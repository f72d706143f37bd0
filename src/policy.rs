//! Who may open a connection: the connection limit, the Origin allow-list, and an
//! authentication hook, all decided at the WebSocket handshake.

use std::any::Any;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_tungstenite::tungstenite::http::{header, Request};

/// Why a handshake is refused: the HTTP status and a short text for the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status code (401, 403, 503...).
    pub status: u16,
    /// The response body.
    pub reason: String,
}

impl Refusal {
    /// A refusal with this status and reason.
    pub fn new(status: u16, reason: impl Into<String>) -> Self {
        Refusal {
            status,
            reason: reason.into(),
        }
    }

    /// `401 Unauthorized`: no credentials, or wrong ones.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        Refusal::new(401, reason)
    }

    /// `403 Forbidden`: known, but not allowed.
    pub fn forbidden(reason: impl Into<String>) -> Self {
        Refusal::new(403, reason)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.reason)
    }
}

/// What an authentication hook attached to a connection; read it with
/// [`Peer::auth`](crate::Peer::auth).
pub(crate) type Attached = Arc<dyn Any + Send + Sync>;

type AuthFn = Arc<dyn Fn(&Request<()>) -> Result<Attached, Refusal> + Send + Sync>;

/// The handshake policy of a [`Server`](crate::Server) or an axum
/// `Endpoint` (feature `axum`).
///
/// ```
/// use jsonrpc_peer::{HandshakePolicy, Refusal};
///
/// struct User(String);
///
/// let policy = HandshakePolicy::default()
///     .max_connections(5_000)
///     // Browsers on other sites may not open a connection (cross-site WebSocket
///     // hijacking); clients without an Origin header (not browsers) still may.
///     .allowed_origins(["https://app.example.com"])
///     .authenticate(|request| {
///         let token = request.uri().query().and_then(|q| q.strip_prefix("token="));
///         match token {
///             Some("s3cret") => Ok(User("alice".into())),
///             Some(_) => Err(Refusal::forbidden("unknown token")),
///             None => Err(Refusal::unauthorized("a token is needed")),
///         }
///     });
/// ```
#[derive(Clone)]
pub struct HandshakePolicy {
    pub(crate) max_connections: usize,
    origins: Option<Arc<HashSet<String>>>,
    allow_missing_origin: bool,
    auth: Option<AuthFn>,
    pub(crate) keep_headers: bool,
}

impl Default for HandshakePolicy {
    fn default() -> Self {
        HandshakePolicy {
            max_connections: 10_000,
            origins: None,
            allow_missing_origin: true,
            auth: None,
            keep_headers: false,
        }
    }
}

impl HandshakePolicy {
    /// How many connections may be open at once (default 10,000). The next one is
    /// refused at the handshake with `503 Service Unavailable`.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// Only browsers on these origins (`scheme://host[:port]`, compared without regard
    /// to case) may connect; any other `Origin` is refused with `403 Forbidden`.
    /// By default every origin may.
    pub fn allowed_origins<I, T>(mut self, origins: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let set = origins
            .into_iter()
            .map(|o| o.as_ref().trim_end_matches('/').to_ascii_lowercase())
            .collect();
        self.origins = Some(Arc::new(set));
        self
    }

    /// Whether a handshake without an `Origin` header (a client that is not a
    /// browser) may connect when an allow-list is set (default true).
    pub fn allow_missing_origin(mut self, allow: bool) -> Self {
        self.allow_missing_origin = allow;
        self
    }

    /// Runs `check` on every handshake request (path, query, headers). It accepts by
    /// returning a value, which handlers read with [`Peer::auth`](crate::Peer::auth),
    /// or refuses with a status (401, 403...). No handler runs for a refused request.
    pub fn authenticate<T, F>(mut self, check: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&Request<()>) -> Result<T, Refusal> + Send + Sync + 'static,
    {
        self.auth = Some(Arc::new(move |req: &Request<()>| {
            check(req).map(|value| Arc::new(value) as Attached)
        }));
        self
    }

    /// Whether each peer keeps the handshake's headers in its
    /// [`ConnectionInfo`](crate::ConnectionInfo) for its whole life (default false:
    /// they cost memory on every connection). The authentication hook and the
    /// `on_connect` hook always see them; keep them when handlers need them later.
    pub fn keep_headers(mut self, keep: bool) -> Self {
        self.keep_headers = keep;
        self
    }

    /// Decides one handshake: the Origin first (it needs no work), then the hook.
    pub(crate) fn check(&self, request: &Request<()>) -> Result<Option<Attached>, Refusal> {
        if let Some(allowed) = &self.origins {
            match request.headers().get(header::ORIGIN) {
                Some(origin) => {
                    let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
                    if !allowed.contains(origin.trim_end_matches('/')) {
                        return Err(Refusal::forbidden("origin not allowed"));
                    }
                }
                None if !self.allow_missing_origin => {
                    return Err(Refusal::forbidden("an Origin header is required"));
                }
                None => {}
            }
        }
        match &self.auth {
            Some(auth) => auth(request).map(Some),
            None => Ok(None),
        }
    }
}

impl fmt::Debug for HandshakePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandshakePolicy")
            .field("max_connections", &self.max_connections)
            .field("origins", &self.origins)
            .field("allow_missing_origin", &self.allow_missing_origin)
            .field("authenticate", &self.auth.is_some())
            .field("keep_headers", &self.keep_headers)
            .finish()
    }
}

/// Connection slots: one permit per open connection, held until it ends.
#[derive(Clone)]
pub(crate) struct Slots(Arc<Semaphore>);

impl Slots {
    pub(crate) fn new(max: usize) -> Self {
        Slots(Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))))
    }

    pub(crate) fn take(&self) -> Result<OwnedSemaphorePermit, Refusal> {
        self.0
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal::new(503, "too many connections"))
    }
}
