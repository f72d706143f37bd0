//! Progress of long calls: values a handler reports to a caller that asked for them.
//!
//! The wire form follows the Language Server Protocol's `$/progress`. The caller asks
//! by putting a top-level `"progressToken"` member in its request (its value is the
//! caller's choice; this crate uses the call's own id, see
//! [`Call::with_progress`](crate::Call::with_progress)):
//!
//! ```json
//! {"jsonrpc":"2.0","method":"export","params":{"rows":100000},"id":7,"progressToken":7}
//! ```
//!
//! and the handler then sends any number of notifications before its answer:
//!
//! ```json
//! {"jsonrpc":"2.0","method":"$/progress","params":{"token":7,"value":{"done":40,"of":100}}}
//! ```
//!
//! A member beside `params` rather than inside it, because `params` belongs to the
//! method's own type: positional params have no room for it, and a strict params type
//! would reject it. A caller that did not ask gets no progress at all, and a request
//! without the member is an ordinary request; a peer that knows nothing of progress
//! ignores the member (unknown members are ignored by most implementations, this one
//! included) and simply sends none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::call::Reply;
use crate::error::{Error, Result};
use crate::message::span;
use crate::router::Context;
use crate::sync::lock;
use crate::transport::Text;

/// The method of a progress notification.
pub(crate) const METHOD: &str = "$/progress";

/// Where progress values go: one sender per call that asked, by token (the call's id).
#[derive(Default)]
pub(crate) struct Sinks {
    map: Mutex<FxHashMap<u64, mpsc::Sender<Reply>>>,
}

impl Sinks {
    fn map(&self) -> MutexGuard<'_, FxHashMap<u64, mpsc::Sender<Reply>>> {
        lock(&self.map)
    }

    /// Registers call `id`'s sink; the guard removes it when the call ends.
    pub(crate) fn register(&self, id: u64, tx: mpsc::Sender<Reply>) -> SinkGuard<'_> {
        self.map().insert(id, tx);
        SinkGuard { sinks: self, id }
    }

    /// Hands a `$/progress` notification's value to its call. False when the token is
    /// not one of ours (then the notification is an ordinary one).
    pub(crate) fn deliver(&self, frame: &Text, params: Option<&str>) -> bool {
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(borrow)]
            token: &'a RawValue,
            #[serde(borrow)]
            value: &'a RawValue,
        }
        let Some(Ok(params)) = params.map(serde_json::from_str::<Params<'_>>) else {
            return false;
        };
        let Ok(token) = params.token.get().parse::<u64>() else {
            return false;
        };
        let map = self.map();
        let Some(tx) = map.get(&token) else {
            return false;
        };
        let reply = Reply::new(frame.clone(), span(frame, params.value.get()));
        if tx.try_send(reply).is_err() {
            tracing::debug!(token, "progress value dropped: the caller's queue is full");
        }
        true
    }
}

/// Removes a call's progress sink when the call ends, however it ends.
pub(crate) struct SinkGuard<'a> {
    sinks: &'a Sinks,
    id: u64,
}

impl Drop for SinkGuard<'_> {
    fn drop(&mut self) {
        self.sinks.map().remove(&self.id);
    }
}

/// The caller's progress token (raw JSON, as it sent it) for one call served, and
/// whether that call has ended. Made only for a call whose caller asked.
pub(crate) struct Token {
    raw: Box<str>,
    ended: AtomicBool,
}

impl Token {
    pub(crate) fn new(raw: &str) -> Arc<Self> {
        Arc::new(Token {
            raw: raw.into(),
            ended: AtomicBool::new(false),
        })
    }
}

/// Held by the future that runs a call to its answer: when it goes (the answer made,
/// the call cancelled, its handler panicked), the call's progress is over, whatever
/// clones of its context live on.
pub(crate) struct Ends(Option<Arc<Token>>);

impl Ends {
    pub(crate) fn of<S>(cx: &Context<S>) -> Self {
        Ends(cx.progress.clone())
    }
}

impl Drop for Ends {
    fn drop(&mut self) {
        if let Some(token) = &self.0 {
            token.ended.store(true, Ordering::Release);
        }
    }
}

impl<S> Context<S> {
    /// Whether the caller asked for progress. Without it, [`progress`](Self::progress)
    /// sends nothing.
    pub fn wants_progress(&self) -> bool {
        self.progress.is_some()
    }

    /// Reports a progress value to the caller, if it asked for progress (see
    /// [`Call::with_progress`](crate::Call::with_progress)); does nothing
    /// otherwise. Values reach the caller in the order they were sent, and before the
    /// call's answer: once the call has ended (answered, cancelled, or its handler
    /// panicked), a clone of its context kept past it sends nothing either. Waits
    /// while the outgoing queue is full.
    ///
    /// # Errors
    ///
    /// [`Error::Serialization`] when `value` cannot be written, [`Error::Closed`] when
    /// the connection has ended.
    pub async fn progress(&self, value: impl Serialize) -> Result<()> {
        let Some(token) = &self.progress else {
            return Ok(());
        };
        if token.ended.load(Ordering::Acquire) {
            return Ok(());
        }
        let token = &token.raw;
        let value = serde_json::to_string(&value).map_err(Error::from)?;
        let frame = format!(
            r#"{{"jsonrpc":"2.0","method":"{METHOD}","params":{{"token":{token},"value":{value}}}}}"#
        );
        self.peer().shared.send(frame).await
    }
}
