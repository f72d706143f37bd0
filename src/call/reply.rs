//! The result of a call as it arrived: raw JSON text, read when the caller wants.

use std::ops::Range;

use serde::de::DeserializeOwned;

use crate::error::{Error, RpcError};
use crate::message::Outcome;
use crate::transport::Text;

/// The result of one call, still raw JSON text: read it with the caller's own type
/// ([`decode`](Self::decode)), or pass it on unparsed ([`get`](Self::get)).
#[derive(Clone)]
pub struct Reply {
    frame: Text,
    range: Range<usize>,
}

impl Reply {
    pub(crate) fn new(frame: Text, range: Range<usize>) -> Self {
        Reply { frame, range }
    }

    /// The `result` member as raw JSON text, exactly as received.
    pub fn get(&self) -> &str {
        &self.frame[self.range.clone()]
    }

    /// Reads the result as `R`.
    ///
    /// # Errors
    ///
    /// [`Error::Serialization`] when the result does not fit `R`.
    pub fn decode<R: DeserializeOwned>(&self) -> Result<R, Error> {
        Ok(serde_json::from_str(self.get())?)
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Reply").field(&self.get()).finish()
    }
}

impl Outcome<Reply> {
    /// The call's result; `method` is the method called, for an error to name it.
    pub(crate) fn into_result(self, method: &str) -> Result<Reply, Error> {
        match self {
            Outcome::Result(reply) => Ok(reply),
            Outcome::Error(error) => match serde_json::from_str::<RpcError>(error.get()) {
                Ok(error) => Err(Error::Rpc {
                    method: method.into(),
                    error,
                }),
                Err(e) => Err(Error::InvalidResponse(format!(
                    "malformed error object: {e}"
                ))),
            },
        }
    }
}
