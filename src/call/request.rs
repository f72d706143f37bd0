//! A request or notification on its way out, written once: its method and params as
//! the start of its frame, which the connection finishes with the id it gives it.

use std::ops::Range;

use serde::Serialize;

use crate::error::Result;
use crate::message;

/// Room left at the end of a request's text for what the connection adds:
/// `,"id":N` and `,"progressToken":N` (each number at most 20 digits) and `}`.
const TAIL: usize = 64;

/// A request object (JSON-RPC's name for a call and for a notification alike) on its
/// way out: the method and the params, serialized once, as the start of the frame
/// that goes on the wire. The connection that sends it adds the id (a notification
/// has none); a [`Caller`](crate::Caller) gets it ready-made, so the params are
/// written once whichever handle sends them.
///
/// ```
/// use jsonrpc_peer::Request;
///
/// let call = Request::call("subtract", [42, 23]).unwrap();
/// assert_eq!((call.method(), call.params()), ("subtract", Some("[42,23]")));
/// assert!(!call.is_notification());
/// let note = Request::notification("ping", ()).unwrap();
/// assert_eq!(note.params(), None);
/// assert!(Request::call("bad", 5).is_err(), "params are an array or an object");
/// ```
#[derive(Debug)]
pub struct Request<'a> {
    method: &'a str,
    /// `{"jsonrpc":"2.0","method":M` and `,"params":P` when there are params.
    head: String,
    params: Option<Range<usize>>,
    kind: Kind,
}

/// A call or a notification. Eight bytes, not a `bool`: the request is moved into
/// the future that sends it, and a `bool`'s seven bytes of padding were copied with
/// it as two overlapping 4-byte moves, which the reload of the first cannot be
/// forwarded from (perf, the rpc bench's (d): a tenth of the handler's loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
enum Kind {
    Call,
    Notification,
}

impl<'a> Request<'a> {
    /// A call of `method` with `params`, which must serialize to a JSON array or object;
    /// `()` (or `None`) sends none.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParams`](crate::Error::InvalidParams) for params of another
    /// shape, [`Error::Serialization`](crate::Error::Serialization) when they cannot be
    /// written.
    #[inline]
    pub fn call(method: &'a str, params: impl Serialize) -> Result<Self> {
        Self::write(method, &params, false)
    }

    /// A notification of `method` with `params` (as for [`call`](Self::call)): no
    /// answer comes.
    ///
    /// # Errors
    ///
    /// As for [`call`](Self::call).
    #[inline]
    pub fn notification(method: &'a str, params: impl Serialize) -> Result<Self> {
        Self::write(method, &params, true)
    }

    #[inline(always)]
    fn write(method: &'a str, params: &impl Serialize, notification: bool) -> Result<Self> {
        // A notification's frame ends with `}` alone: made to its exact length, its
        // `Bytes` on the wire needs no shrinking and no header of its own.
        let (tail, kind) = match notification {
            true => (1, Kind::Notification),
            false => (TAIL, Kind::Call),
        };
        let (head, params) = message::request_head(method, params, tail)?;
        Ok(Request {
            method,
            head,
            params,
            kind,
        })
    }

    /// The method, as given.
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The params as raw JSON text, as they go on the wire; `None` when there are none.
    pub fn params(&self) -> Option<&str> {
        self.params.clone().map(|range| &self.head[range])
    }

    /// Whether it is a notification (no id, no answer).
    pub fn is_notification(&self) -> bool {
        self.kind == Kind::Notification
    }

    /// The frame that goes on the wire: with `id` for a call, and the caller's progress
    /// token (the id again) when it asked for progress. Appended in place: the text
    /// was made with room for it.
    #[inline]
    pub(crate) fn into_frame(self, id: Option<u64>, progress: bool) -> String {
        message::finish_request(self.head, id, progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_finished_in_place_and_a_notification_s_is_exactly_its_length() {
        let note = Request::notification("tick", [7])
            .unwrap()
            .into_frame(None, false);
        assert_eq!(note, r#"{"jsonrpc":"2.0","method":"tick","params":[7]}"#);
        // Its `Bytes` on the wire then takes the buffer as it is, with no header.
        assert_eq!(note.len(), note.capacity());
        let call = Request::call("add", [1, 2]).unwrap();
        let text = call.into_frame(Some(u64::MAX), true);
        assert_eq!(
            text,
            format!(
                r#"{{"jsonrpc":"2.0","method":"add","params":[1,2],"id":{0},"progressToken":{0}}}"#,
                u64::MAX
            )
        );
    }
}
