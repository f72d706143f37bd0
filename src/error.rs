//! The two error types: [`RpcError`] travels on the wire, [`Error`] happens here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A `Result` whose error defaults to this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error code as it travels in an error object: an integer, with the
/// specification's codes (and this crate's one server error) as constants.
///
/// Application codes should stay outside `-32768..=-32000`, which the specification
/// reserves ([`is_reserved`](Self::is_reserved)). It compares with plain integers:
///
/// ```
/// use jsonrpc_peer::{ErrorCode, RpcError};
///
/// let e = RpcError::method_not_found();
/// assert_eq!(e.code, ErrorCode::METHOD_NOT_FOUND);
/// assert_eq!(e.code, -32601);
/// assert_eq!(ErrorCode::new(42).get(), 42);
/// assert!(ErrorCode::METHOD_NOT_FOUND.is_reserved() && !ErrorCode::new(42).is_reserved());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorCode(i64);

impl ErrorCode {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: ErrorCode = ErrorCode(-32700);
    /// The JSON sent is not a valid Request object.
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(-32600);
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: ErrorCode = ErrorCode(-32601);
    /// Invalid method parameter(s).
    pub const INVALID_PARAMS: ErrorCode = ErrorCode(-32602);
    /// Internal JSON-RPC error (a handler panicked, its result could not be serialized,
    /// or a call it made failed locally: see [`RpcError`]'s `From<Error>`).
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(-32603);
    /// A server error of this crate's (in the specification's `-32000..=-32099` range):
    /// the connection is closing gracefully and takes no new calls.
    pub const CLOSING: ErrorCode = ErrorCode(-32000);
    /// A server error of this crate's: a call past the connection's
    /// [`RateLimit`](crate::RateLimit) (the code Ethereum's JSON-RPC servers use for
    /// "limit exceeded"). See [`RpcError::rate_limited`].
    pub const RATE_LIMITED: ErrorCode = ErrorCode(-32005);

    /// The code `code`.
    pub const fn new(code: i64) -> Self {
        ErrorCode(code)
    }

    /// The code as an integer.
    pub const fn get(self) -> i64 {
        self.0
    }

    /// Whether the specification reserves this code (`-32768..=-32000`).
    pub const fn is_reserved(self) -> bool {
        self.0 >= -32768 && self.0 <= -32000
    }
}

impl From<i64> for ErrorCode {
    fn from(code: i64) -> Self {
        ErrorCode(code)
    }
}

impl From<i32> for ErrorCode {
    fn from(code: i32) -> Self {
        ErrorCode(code.into())
    }
}

impl From<ErrorCode> for i64 {
    fn from(code: ErrorCode) -> Self {
        code.0
    }
}

impl PartialEq<i64> for ErrorCode {
    fn eq(&self, other: &i64) -> bool {
        self.0 == *other
    }
}

impl PartialEq<i32> for ErrorCode {
    fn eq(&self, other: &i32) -> bool {
        self.0 == i64::from(*other)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// An error object as it travels on the wire: `{"code": .., "message": .., "data": ..}`.
///
/// Handlers return it to answer a call with an error; [`Error::Rpc`] carries the one
/// the other side answered with.
///
/// The constructors follow one rule: an error about what a call asked for
/// ([`invalid_params`](Self::invalid_params), [`internal_error`](Self::internal_error))
/// takes the reason, which goes into `data`; an error about the message itself
/// ([`parse_error`](Self::parse_error), [`invalid_request`](Self::invalid_request),
/// [`method_not_found`](Self::method_not_found)), which the connection answers on its
/// own, takes none (the message says it all). [`with_data`](Self::with_data) sets `data`
/// on any of them.
///
/// ```
/// use jsonrpc_peer::RpcError;
///
/// let e = RpcError::new(42, "not enough fuel").with_data(serde_json::json!({"need": 3}));
/// assert_eq!(
///     serde_json::to_string(&e).unwrap(),
///     r#"{"code":42,"message":"not enough fuel","data":{"need":3}}"#
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The error code: one of [`ErrorCode`]'s constants, or the application's own.
    pub code: ErrorCode,
    /// A short description of the error.
    pub message: String,
    /// Additional information, left out of the wire form when `None`. A `"data":
    /// null` received is `Some(Value::Null)`, and is sent on as such.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub data: Option<serde_json::Value>,
}

/// A member that is there, `null` included, is `Some`; an absent one is `None` (by
/// `default`).
fn present<'de, D: serde::Deserializer<'de>>(
    de: D,
) -> std::result::Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(de).map(Some)
}

impl RpcError {
    /// An error with this code and message and no data.
    pub fn new(code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        RpcError {
            code: code.into(),
            message: message.into(),
            data: None,
        }
    }

    /// Attaches `data` to the error.
    pub fn with_data(mut self, data: impl Into<serde_json::Value>) -> Self {
        self.data = Some(data.into());
        self
    }

    /// `-32700 Parse error`.
    pub fn parse_error() -> Self {
        Self::new(ErrorCode::PARSE_ERROR, "Parse error")
    }

    /// `-32600 Invalid Request`.
    pub fn invalid_request() -> Self {
        Self::new(ErrorCode::INVALID_REQUEST, "Invalid Request")
    }

    /// `-32601 Method not found`.
    pub fn method_not_found() -> Self {
        Self::new(ErrorCode::METHOD_NOT_FOUND, "Method not found")
    }

    /// `-32602 Invalid params`, with the reason in `data`.
    pub fn invalid_params(reason: impl fmt::Display) -> Self {
        Self::new(ErrorCode::INVALID_PARAMS, "Invalid params").with_data(reason.to_string())
    }

    /// `-32603 Internal error`, with the reason in `data`, as
    /// [`invalid_params`](Self::invalid_params) has it: in a handler,
    /// `.map_err(RpcError::internal_error)?` answers with the local failure's text.
    ///
    /// ```
    /// use jsonrpc_peer::RpcError;
    ///
    /// let e = RpcError::internal_error("the disk is full");
    /// assert_eq!((e.code.get(), e.message.as_str()), (-32603, "Internal error"));
    /// assert_eq!(e.data, Some(serde_json::json!("the disk is full")));
    /// ```
    pub fn internal_error(reason: impl fmt::Display) -> Self {
        Self::new(ErrorCode::INTERNAL_ERROR, "Internal error").with_data(reason.to_string())
    }

    /// `-32005 Rate limited`, with `{"retry_after_ms": N}` in `data`: how long until
    /// the connection's [`RateLimit`](crate::RateLimit) admits a call again.
    pub fn rate_limited(retry_after_ms: u64) -> Self {
        Self::new(ErrorCode::RATE_LIMITED, "Rate limited")
            .with_data(serde_json::json!({ "retry_after_ms": retry_after_ms }))
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)?;
        if let Some(data) = &self.data {
            write!(f, ": {data}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RpcError {}

/// Why a connection ended. [`Peer::closed`](crate::Peer::closed) resolves with it and
/// every call that was waiting ends with [`Error::Closed`] carrying it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum CloseReason {
    /// This side closed the connection, with this close code and reason
    /// (1000 for [`Peer::close`](crate::Peer::close), 1009 for a message over the size
    /// limit, 1008 for a policy such as a full outgoing queue).
    Local {
        /// The WebSocket close code sent.
        code: u16,
        /// The reason sent with it.
        reason: String,
    },
    /// The other side sent a close frame (code 1005 when it gave none).
    Remote {
        /// The WebSocket close code received.
        code: u16,
        /// The reason received with it.
        reason: String,
    },
    /// The transport ended without a closing handshake: the TCP connection was reset or
    /// reached its end, or the other side broke the WebSocket protocol.
    Transport(Arc<dyn std::error::Error + Send + Sync>),
    /// The stream ended without a close frame and without an error.
    Eof,
    /// Nothing arrived from the other side within the keepalive timeout.
    KeepaliveTimeout,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Local { code, reason } => {
                write!(f, "closed by this side ({code}{})", spaced(reason))
            }
            CloseReason::Remote { code, reason } => {
                write!(f, "closed by the other side ({code}{})", spaced(reason))
            }
            CloseReason::Transport(e) => write!(f, "transport failed: {e}"),
            CloseReason::Eof => f.write_str("the other side went away without a close frame"),
            CloseReason::KeepaliveTimeout => f.write_str("the other side stopped answering pings"),
        }
    }
}

/// A close reason as it follows the code: nothing when empty, else a space and the text.
fn spaced(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(" {reason}")
    }
}

/// What can go wrong on this side: the connection, the clock, serialization, or the
/// other side's answer. Errors of a call name the method called.
///
/// ```
/// use jsonrpc_peer::{Error, RpcError};
///
/// let e = Error::Rpc { method: "divide".into(), error: RpcError::method_not_found() };
/// assert_eq!(e.to_string(), "`divide` was answered with an error: Method not found (-32601)");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection is closed (or closed while the call waited), and why.
    #[error("connection closed: {0}")]
    Closed(CloseReason),
    /// No answer arrived within the call's timeout. Without a method, a wait that was
    /// not one call's: connecting, a [`Reconnecting`](crate::Reconnecting) link that
    /// did not come up in time, a batch that found no room in the outgoing queue, the
    /// cluster's bus.
    #[error("{}no answer within {after:?}", called(method.as_deref()))]
    Timeout {
        /// The method called, if this was a call's timeout.
        method: Option<Box<str>>,
        /// How long was waited.
        after: Duration,
    },
    /// The other side answered a call with an error object.
    #[error("`{method}` was answered with an error: {error}")]
    Rpc {
        /// The method called.
        method: Box<str>,
        /// The error object, as received.
        error: RpcError,
    },
    /// Params could not be serialized, or a result could not be read as the asked type.
    #[error("serialization: {0}")]
    Serialization(#[from] serde_json::Error),
    /// Params that are not a JSON array or object (the specification allows nothing
    /// else), or `null`/`()` given where a batch needs params.
    #[error("params must serialize to a JSON array or object, not {0}")]
    InvalidParams(&'static str),
    /// The other side's answer was not a valid response object.
    #[error("invalid response: {0}")]
    InvalidResponse(String),
    /// Between the nodes of a cluster: a peer or node that is not there, the bus down.
    #[error("cluster: {0}")]
    Cluster(crate::addr::ClusterError),
    /// The server refused the WebSocket handshake with an HTTP status (401, 403, 503...).
    /// Distinct from [`Error::Transport`]: trying again unchanged will not help for a
    /// 4xx.
    #[error("the server refused the handshake: {status}{}", refusal_body(body.as_deref()))]
    Refused {
        /// The HTTP status of the refusal.
        status: crate::http::StatusCode,
        /// The response body, when it was small (at most 1 KiB) and text.
        body: Option<String>,
    },
    /// Connecting, binding or accepting failed (I/O, DNS, TLS, a broken handshake).
    #[error("transport: {0}")]
    Transport(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A topic's history: the topic keeps none, or a publication does not fit it.
    #[error("{0}")]
    History(#[from] crate::history::HistoryError),
    /// A topic's presence: not subscribed, or past one of its limits.
    #[error("{0}")]
    Presence(#[from] crate::presence::PresenceError),
}

fn called(method: Option<&str>) -> String {
    method.map(|m| format!("`{m}`: ")).unwrap_or_default()
}

fn refusal_body(body: Option<&str>) -> String {
    body.filter(|b| !b.is_empty())
        .map(|b| format!(" ({b})"))
        .unwrap_or_default()
}

impl Error {
    /// The remote error object, when the other side answered with one.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            Error::Rpc { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The method of the call that failed, when the error is a call's.
    pub fn method(&self) -> Option<&str> {
        match self {
            Error::Rpc { method, .. } => Some(method),
            Error::Timeout { method, .. } => method.as_deref(),
            _ => None,
        }
    }

    /// Whether the connection is closed.
    pub fn is_closed(&self) -> bool {
        matches!(self, Error::Closed(_))
    }

    /// Whether this is a timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// The HTTP status of a refused handshake.
    pub fn refused_status(&self) -> Option<crate::http::StatusCode> {
        match self {
            Error::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A timeout of a call of `method` (or of connecting, without one).
    pub(crate) fn timeout(method: Option<&str>, after: Duration) -> Self {
        Error::Timeout {
            method: method.map(Into::into),
            after,
        }
    }

    /// The same error, naming `name` as the method called where it names none yet.
    pub(crate) fn in_call(self, name: &str) -> Self {
        match self {
            Error::Timeout {
                method: None,
                after,
            } => Error::timeout(Some(name), after),
            Error::Rpc { method, error } if method.is_empty() => Error::Rpc {
                method: name.into(),
                error,
            },
            other => other,
        }
    }
}

/// What a local failure becomes when a handler returns it with `?`, so that
/// `cx.peer().call(..).await?` works in a handler:
///
/// - the other side's error object with an **application code** (outside the
///   specification's reserved `-32768..=-32000`) passes through unchanged: code, message
///   and data (a `null` data included; as `serde_json::Value` holds numbers, an integer
///   beyond 64 bits comes out as the nearest `f64`), so a handler that forwards a call
///   answers as the far side did;
/// - one with a **reserved code** (`-32601` for the call back's own method, say) would
///   misdescribe the call being answered, so it becomes `-32603 Internal error` with
///   `data: {"method": <the method called back>, "error": <the error object>}`;
/// - every other failure (a timeout, a closed connection, params or a result that did
///   not serialize, an invalid response) becomes `-32603 Internal error` with `data`
///   the local error's text, e.g. `"`ui.describe`: no answer within 10s"`.
///
/// ```
/// use jsonrpc_peer::{Caller, Context, Router, RpcError};
///
/// let router = Router::new().method("ask", |cx: Context, (): ()| async move {
///     let answer: String = cx.peer().call("describe", ()).await?;
///     Ok::<_, RpcError>(answer)
/// });
/// # let _ = router;
/// ```
impl From<Error> for RpcError {
    fn from(e: Error) -> Self {
        match e {
            Error::Rpc { error, .. } if !error.code.is_reserved() => error,
            Error::Rpc { method, error } => {
                RpcError::new(ErrorCode::INTERNAL_ERROR, "Internal error")
                    .with_data(serde_json::json!({ "method": &*method, "error": error }))
            }
            other => RpcError::internal_error(other),
        }
    }
}
