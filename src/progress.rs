//! Progress of long calls: values a handler reports to a caller that asked for them.
//!
//! The wire form follows the Language Server Protocol's `$/progress`. The caller asks
//! by putting a top-level `"progressToken"` member in its request (its value is the
//! caller's choice; this crate uses the call's own id):
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

use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll};

use std::future::Future;
use std::time::Duration;

use rustc_hash::FxHashMap;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::message::span;
use crate::peer::{Peer, Reply};
use crate::router::Context;
use crate::sync::lock;
use crate::transport::Text;

/// The method of a progress notification.
pub(crate) const METHOD: &str = "$/progress";

/// The progress values of one call, in the order the handler sent them; the stream
/// ends when the call does.
///
/// Values wait here until read, up to
/// [`PeerConfig::progress_queue`](crate::PeerConfig::progress_queue) of them: the
/// connection never waits for a slow reader, so values that arrive while the queue is
/// full are dropped (the answer is never affected).
#[derive(Debug)]
pub struct Progress {
    rx: mpsc::Receiver<Reply>,
}

impl Progress {
    /// The next value, raw (read it with [`Reply::decode`]); `None` once the call has
    /// ended and every value was read.
    pub async fn next(&mut self) -> Option<Reply> {
        self.rx.recv().await
    }
}

impl futures_util::Stream for Progress {
    type Item = Reply;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Reply>> {
        self.rx.poll_recv(cx)
    }
}

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

/// A request frame with the caller's progress token added.
pub(crate) fn with_token(mut frame: String, id: u64) -> String {
    debug_assert!(frame.ends_with('}'));
    frame.pop();
    frame.push_str(",\"progressToken\":");
    frame.push_str(&id.to_string());
    frame.push('}');
    frame
}

impl Peer {
    /// [`call_with_timeout`](Peer::call_with_timeout), asking the other side for
    /// progress: the values its handler reports come through the returned
    /// [`Progress`] while the call runs. The call is sent when its future is first
    /// polled; the stream ends once the call has.
    ///
    /// ```no_run
    /// # async fn run(peer: jsonrpc_peer::Peer) -> jsonrpc_peer::Result<()> {
    /// use std::time::Duration;
    ///
    /// let (mut progress, call) =
    ///     peer.call_with_progress::<String>("export", [100_000], Duration::from_secs(60));
    /// let watch = async {
    ///     while let Some(value) = progress.next().await {
    ///         println!("progress: {}", value.get());
    ///     }
    /// };
    /// let (answer, ()) = tokio::join!(call, watch);
    /// println!("{}", answer?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The call's, as for [`call`](Peer::call).
    pub fn call_with_progress<'a, R: DeserializeOwned + 'a>(
        &'a self,
        method: &'a str,
        params: impl Serialize + 'a,
        timeout: Duration,
    ) -> (Progress, impl Future<Output = Result<R>> + 'a) {
        let (tx, rx) = mpsc::channel(self.shared.progress_queue().max(1));
        let call = async move {
            self.call_inner(method, params, timeout, Some(tx))
                .await?
                .decode()
        };
        (Progress { rx }, call)
    }
}

impl<S> Context<S> {
    /// Whether the caller asked for progress. Without it, [`progress`](Self::progress)
    /// sends nothing.
    pub fn wants_progress(&self) -> bool {
        self.progress.is_some()
    }

    /// Reports a progress value to the caller, if it asked for progress (see
    /// [`Peer::call_with_progress`](crate::Peer::call_with_progress)); does nothing
    /// otherwise. Values reach the caller in the order they were sent, and before the
    /// call's answer. Waits while the outgoing queue is full.
    ///
    /// # Errors
    ///
    /// [`Error::Serialization`] when `value` cannot be written, [`Error::Closed`] when
    /// the connection has ended.
    pub async fn progress(&self, value: impl Serialize) -> Result<()> {
        let Some(token) = &self.progress else {
            return Ok(());
        };
        let value = serde_json::to_string(&value).map_err(Error::from)?;
        let frame = format!(
            r#"{{"jsonrpc":"2.0","method":"{METHOD}","params":{{"token":{token},"value":{value}}}}}"#
        );
        self.peer().shared.send(frame).await
    }
}
