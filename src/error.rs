//! The two error types: [`RpcError`] travels on the wire, [`Error`] happens here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A `Result` whose error defaults to this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error codes the JSON-RPC 2.0 specification defines.
///
/// Codes are plain integers on the wire ([`RpcError::code`]); this type only gives the
/// specification's ones names. Application codes should stay outside `-32768..=-32000`,
/// which the specification reserves.
#[derive(Debug)]
pub enum ErrorCode {}

impl ErrorCode {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid Request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameter(s).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal JSON-RPC error (a handler panicked, or its result could not be serialized).
    pub const INTERNAL_ERROR: i64 = -32603;
}

/// An error object as it travels on the wire: `{"code": .., "message": .., "data": ..}`.
///
/// Handlers return it to answer a call with an error; [`Error::Rpc`] carries the one
/// the other side answered with.
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
    pub code: i64,
    /// A short description of the error.
    pub message: String,
    /// Additional information, left out of the wire form when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl RpcError {
    /// An error with this code and message and no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
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

    /// `-32603 Internal error`.
    pub fn internal_error() -> Self {
        Self::new(ErrorCode::INTERNAL_ERROR, "Internal error")
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
                write!(f, "closed by this side ({code} {reason})")
            }
            CloseReason::Remote { code, reason } => {
                write!(f, "closed by the other side ({code} {reason})")
            }
            CloseReason::Transport(e) => write!(f, "transport failed: {e}"),
            CloseReason::Eof => f.write_str("the other side went away without a close frame"),
            CloseReason::KeepaliveTimeout => f.write_str("the other side stopped answering pings"),
        }
    }
}

/// What can go wrong on this side: the connection, the clock, serialization, or the
/// other side's answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection is closed (or closed while the call waited), and why.
    #[error("connection closed: {0}")]
    Closed(CloseReason),
    /// No answer arrived within the call's timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The other side answered with an error object.
    #[error("the other side answered with an error: {0}")]
    Rpc(RpcError),
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
    Cluster(crate::cluster::ClusterError),
    /// Connecting, binding or accepting failed.
    #[error("transport: {0}")]
    Transport(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl Error {
    /// The remote error object, when the other side answered with one.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            Error::Rpc(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the connection is closed.
    pub fn is_closed(&self) -> bool {
        matches!(self, Error::Closed(_))
    }
}

impl From<RpcError> for Error {
    fn from(e: RpcError) -> Self {
        Error::Rpc(e)
    }
}
