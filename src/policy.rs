//! Who may open a connection: the connection and handshake limits, the Origin
//! allow-list, and an authentication hook, all decided at the WebSocket handshake.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_tungstenite::tungstenite::http::{header, Request, StatusCode};

use crate::limit::{AddressSlot, Addresses};
use crate::peer::Attached;

/// Why a handshake is refused: the HTTP status and a short text for the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status (401, 403, 503...). A status that is not an error (1xx-3xx) is
    /// sent as 403.
    pub status: StatusCode,
    /// The response body.
    pub reason: String,
}

impl Refusal {
    /// A refusal with this status and reason.
    pub fn new(status: StatusCode, reason: impl Into<String>) -> Self {
        Refusal {
            status,
            reason: reason.into(),
        }
    }

    /// `401 Unauthorized`: no credentials, or wrong ones.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        Refusal::new(StatusCode::UNAUTHORIZED, reason)
    }

    /// `403 Forbidden`: known, but not allowed.
    pub fn forbidden(reason: impl Into<String>) -> Self {
        Refusal::new(StatusCode::FORBIDDEN, reason)
    }
}

impl Refusal {
    /// The status to answer with: a refusal is a client or server error, so any other
    /// status is sent as `403 Forbidden`.
    pub(crate) fn http_status(&self) -> StatusCode {
        if self.status.is_client_error() || self.status.is_server_error() {
            self.status
        } else {
            StatusCode::FORBIDDEN
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.reason)
    }
}

type AuthFn = Arc<dyn Fn(&Request<()>) -> Result<Attached, Refusal> + Send + Sync>;

/// The handshake policy of a [`Server`](crate::Server) or an axum
/// `Endpoint` (feature `axum`): who may connect, how many, and how long a handshake
/// may take. Plain limits are public fields, each with a setter of the same name.
///
/// ```
/// use std::time::Duration;
/// use jsonrpc_peer::{HandshakePolicy, Refusal};
///
/// struct User(String);
///
/// let policy = HandshakePolicy::default()
///     .max_connections(5_000)
///     .handshake_timeout(Duration::from_secs(5))
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
/// assert_eq!(policy.max_connections, 5_000);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct HandshakePolicy {
    /// How many connections may be open at once (default 10,000). A connection counts
    /// once its handshake succeeds; the next one is refused with
    /// `503 Service Unavailable`.
    pub max_connections: usize,
    /// How many connections one remote address may have open at once (default `None`:
    /// no limit, as behind a proxy or load balancer every connection comes from its
    /// address). IPv6 addresses count per /64. The next one is refused with
    /// `429 Too Many Requests`. The axum endpoint reads the address from
    /// `ConnectInfo<SocketAddr>` (serve the app with
    /// `into_make_service_with_connect_info`); without it every handshake is refused
    /// with `500`, not let through unbounded.
    pub max_connections_per_address: Option<usize>,
    /// How many connections may be in their handshake at once (default 1,000), not
    /// counted in [`max_connections`](Self::max_connections). When one more arrives,
    /// the oldest still in handshake is dropped once it is
    /// [`handshake_grace`](Self::handshake_grace) old: connections that send nothing
    /// (a slowloris) cannot lock real clients out. Until then the newcomer waits,
    /// accepted but not read from, for a handshake to end (first come, first served;
    /// at most as many wait as [`max_connections`](Self::max_connections) has room
    /// for, the next ones wait in the listen queue). Its
    /// [`handshake_timeout`](Self::handshake_timeout) runs from when it was accepted.
    /// [`Server`](crate::Server) only: for the axum endpoint, the HTTP server reads
    /// the request. 0 counts as 1 (0 would never let a client in).
    pub max_handshakes: usize,
    /// How long a handshake is safe from being dropped for a newer one when
    /// [`max_handshakes`](Self::max_handshakes) are under way (default 2 s). A herd of
    /// clients coming back at once (a restarted server) fills the handshakes with
    /// real clients that the server itself has not served yet: dropping them only
    /// makes them dial again. [`Server`](crate::Server) only.
    pub handshake_grace: Duration,
    /// How long a handshake may take, TLS included (default 10 s); past it the
    /// connection is dropped. For the axum endpoint: from the `101` answer until the
    /// upgraded connection is handed over (the HTTP server reads the request).
    pub handshake_timeout: Duration,
    /// The largest handshake request (request line and headers), in bytes (default
    /// 16 KiB; at most 64 headers). A larger one is answered with
    /// `431 Request Header Fields Too Large`. [`Server`](crate::Server) only.
    pub max_handshake_size: usize,
    /// Whether a handshake without an `Origin` header (a client that is not a
    /// browser) may connect when an allow-list is set (default true).
    pub allow_missing_origin: bool,
    /// Whether each peer keeps the handshake's headers in its
    /// [`ConnectionInfo`](crate::ConnectionInfo) for its whole life (default false:
    /// they cost memory on every connection). The authentication hook and the
    /// `on_connect` hook always see them; keep them when handlers need them later.
    pub keep_headers: bool,
    origins: Option<Arc<HashSet<String>>>,
    auth: Option<AuthFn>,
}

impl Default for HandshakePolicy {
    fn default() -> Self {
        HandshakePolicy {
            max_connections: 10_000,
            max_connections_per_address: None,
            max_handshakes: 1_000,
            handshake_grace: Duration::from_secs(2),
            handshake_timeout: Duration::from_secs(10),
            max_handshake_size: 16 * 1024,
            allow_missing_origin: true,
            keep_headers: false,
            origins: None,
            auth: None,
        }
    }
}

impl HandshakePolicy {
    /// Sets [`Self::max_connections`].
    pub fn max_connections(mut self, value: usize) -> Self {
        self.max_connections = value;
        self
    }

    /// Sets [`Self::max_connections_per_address`].
    pub fn max_connections_per_address(mut self, value: Option<usize>) -> Self {
        self.max_connections_per_address = value;
        self
    }

    /// Sets [`Self::max_handshakes`].
    pub fn max_handshakes(mut self, value: usize) -> Self {
        self.max_handshakes = value;
        self
    }

    /// Sets [`Self::handshake_grace`].
    pub fn handshake_grace(mut self, value: Duration) -> Self {
        self.handshake_grace = value;
        self
    }

    /// Sets [`Self::handshake_timeout`].
    pub fn handshake_timeout(mut self, value: Duration) -> Self {
        self.handshake_timeout = value;
        self
    }

    /// Sets [`Self::max_handshake_size`].
    pub fn max_handshake_size(mut self, value: usize) -> Self {
        self.max_handshake_size = value;
        self
    }

    /// Sets [`Self::allow_missing_origin`].
    pub fn allow_missing_origin(mut self, value: bool) -> Self {
        self.allow_missing_origin = value;
        self
    }

    /// Sets [`Self::keep_headers`].
    pub fn keep_headers(mut self, value: bool) -> Self {
        self.keep_headers = value;
        self
    }

    /// Only browsers on these origins (`scheme://host[:port]`, compared without regard
    /// to case; `https://host:443` is `https://host`, as browsers write it) may
    /// connect; any other `Origin` is refused with `403 Forbidden`.
    /// By default every origin may.
    pub fn allowed_origins<I, T>(mut self, origins: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let set = origins
            .into_iter()
            .map(|o| normalize_origin(o.as_ref()))
            .collect();
        self.origins = Some(Arc::new(set));
        self
    }

    /// Runs `check` on every handshake request (path, query, headers). It accepts by
    /// returning a value, which handlers read with [`Peer::auth`](crate::Peer::auth),
    /// or refuses with a status (401, 403...). No handler runs for a refused request.
    /// It runs after the origin check and before the connection limits, so a client
    /// whose credentials are refused hears why even from a full server (a `503`
    /// would have it dial again); a value it returns for a request that the limits
    /// then refuse is dropped.
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

    /// Decides one handshake: the Origin first (it needs no work), then the hook.
    pub(crate) fn check(&self, request: &Request<()>) -> Result<Option<Attached>, Refusal> {
        if let Some(allowed) = &self.origins {
            match request.headers().get(header::ORIGIN) {
                Some(origin) => {
                    let origin = normalize_origin(origin.to_str().unwrap_or_default());
                    if !allowed.contains(&origin) {
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

/// An origin as the allow-list compares it: lower case, without a trailing `/`, and
/// without its scheme's default port (a browser's `Origin` never has one: `:443` of
/// `https`, `:80` of `http`), so `https://host:443` and `https://host` are one origin.
fn normalize_origin(origin: &str) -> String {
    let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    let default_port = if origin.starts_with("https://") {
        ":443"
    } else if origin.starts_with("http://") {
        ":80"
    } else {
        return origin;
    };
    match origin.strip_suffix(default_port) {
        Some(rest) => rest.to_owned(),
        None => origin,
    }
}

impl fmt::Debug for HandshakePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandshakePolicy")
            .field("max_connections", &self.max_connections)
            .field(
                "max_connections_per_address",
                &self.max_connections_per_address,
            )
            .field("max_handshakes", &self.max_handshakes)
            .field("handshake_grace", &self.handshake_grace)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("max_handshake_size", &self.max_handshake_size)
            .field("origins", &self.origins)
            .field("allow_missing_origin", &self.allow_missing_origin)
            .field("authenticate", &self.auth.is_some())
            .field("keep_headers", &self.keep_headers)
            .finish()
    }
}

/// Connection slots: one permit per open connection (and one in its address's count,
/// when there is a bound per address), held until it ends.
#[derive(Clone)]
pub(crate) struct Slots {
    open: Arc<Semaphore>,
    addresses: Option<Arc<Addresses>>,
}

/// One open connection's place in the limits, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _open: OwnedSemaphorePermit,
    _address: Option<AddressSlot>,
}

impl Slots {
    pub(crate) fn new(policy: &HandshakePolicy) -> Self {
        Slots {
            open: Arc::new(Semaphore::new(
                policy.max_connections.min(Semaphore::MAX_PERMITS),
            )),
            addresses: policy.max_connections_per_address.map(Addresses::new),
        }
    }

    /// How many more connections may open before [`HandshakePolicy::max_connections`].
    pub(crate) fn room(&self) -> usize {
        self.open.available_permits()
    }

    /// A place for one more connection, from `remote` if the address is known.
    pub(crate) fn take(&self, remote: Option<IpAddr>) -> Result<Slot, Refusal> {
        let address = match (&self.addresses, remote) {
            (Some(addresses), Some(ip)) => Some(addresses.take(ip).ok_or_else(|| {
                Refusal::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many connections from this address",
                )
            })?),
            // Not skipped for want of the address: an axum app served without
            // `into_make_service_with_connect_info` would let one address open any number.
            (Some(_), None) => {
                tracing::error!("a bound per address is set but the remote address is unknown: serve the axum app with into_make_service_with_connect_info::<SocketAddr>()");
                return Err(Refusal::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the remote address is unknown",
                ));
            }
            (None, _) => None,
        };
        let open =
            self.open.clone().try_acquire_owned().map_err(|_| {
                Refusal::new(StatusCode::SERVICE_UNAVAILABLE, "too many connections")
            })?;
        Ok(Slot {
            _open: open,
            _address: address,
        })
    }
}
