//! Cancellation on the wire: telling the other side that a call was given up, and what
//! a handler sees when the other side gives up on it.
//!
//! The caller's side: a call whose future is dropped, or whose timeout fires, after its
//! request went into the outgoing queue, queues a cancel notification for its id
//! ([`CancelStyle`] says which one). It never waits for room: a full queue skips the
//! cancel and counts it ([`Peer::cancels_skipped`]), since a `Drop` cannot await and a
//! caller past its deadline must not be held up by the notice of it.
//!
//! The callee's side is in the engine (`driver/cancel.rs`); a cooperative handler sees
//! the cancellation through [`Context::cancelled`] and [`Context::is_cancelled`].

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tokio::sync::Notify;

use crate::config::CancelStyle;
use crate::error::{ErrorCode, RpcError};
use crate::peer::{Peer, Shared};
use crate::router::Context;

/// The LSP form's method.
pub(crate) const LSP_METHOD: &str = "$/cancelRequest";
/// The MCP form's method.
pub(crate) const MCP_METHOD: &str = "notifications/cancelled";

impl CancelStyle {
    /// The style of an incoming notification, if it is a cancel.
    pub(crate) fn of_method(method: &str) -> Option<CancelStyle> {
        match method {
            LSP_METHOD => Some(CancelStyle::Lsp),
            MCP_METHOD => Some(CancelStyle::Mcp),
            _ => None,
        }
    }

    /// The cancel notification for our call `id`.
    pub(crate) fn frame(self, id: u64) -> String {
        match self {
            CancelStyle::Lsp => {
                format!(r#"{{"jsonrpc":"2.0","method":"{LSP_METHOD}","params":{{"id":{id}}}}}"#)
            }
            CancelStyle::Mcp => format!(
                r#"{{"jsonrpc":"2.0","method":"{MCP_METHOD}","params":{{"requestId":{id}}}}}"#
            ),
        }
    }
}

impl ErrorCode {
    /// The call was cancelled by its caller (`-32800`, the Language Server Protocol's
    /// `RequestCancelled`).
    pub const REQUEST_CANCELLED: i64 = -32800;
}

impl RpcError {
    /// `-32800 Request cancelled`: the answer to a call its caller cancelled.
    pub fn request_cancelled() -> Self {
        Self::new(ErrorCode::REQUEST_CANCELLED, "Request cancelled")
    }
}

const QUEUED: u8 = 1;
const ANSWERED: u8 = 2;

/// Queues the cancel for a call that is given up after its request was queued.
pub(crate) struct CancelOnDrop<'a> {
    shared: &'a Shared,
    id: u64,
    /// 0 while the request is not queued yet, then `QUEUED`, then `ANSWERED` once
    /// anything came back (the answer, or the end of the connection). Atomic only so
    /// that the call's future stays `Send`; one task touches it.
    state: AtomicU8,
}

impl<'a> CancelOnDrop<'a> {
    pub(crate) fn new(shared: &'a Shared, id: u64) -> Self {
        CancelOnDrop {
            shared,
            id,
            state: AtomicU8::new(0),
        }
    }

    /// The request is in the outgoing queue: from now on, giving up tells the other side.
    pub(crate) fn queued(&self) {
        self.state.store(QUEUED, Ordering::Relaxed);
    }

    /// The call ended on its own: nothing to cancel.
    pub(crate) fn answered(&self) {
        self.state.store(ANSWERED, Ordering::Relaxed);
    }

    /// Tells the other side now, if the request went out and nothing came back yet
    /// (then not again on drop). Returns whether it did.
    pub(crate) fn cancel_now(&self) -> bool {
        if self.state.load(Ordering::Relaxed) != QUEUED {
            return false;
        }
        self.shared.send_cancel(self.id);
        self.answered();
        true
    }
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.state.load(Ordering::Relaxed) != QUEUED {
            return;
        }
        self.shared.send_cancel(self.id);
    }
}

impl Peer {
    /// How many cancels this side did not send because the outgoing queue was full
    /// when a call was given up. The other side then runs that call to its end, and
    /// its late answer is ignored.
    pub fn cancels_skipped(&self) -> u64 {
        self.shared.cancels_skipped()
    }

    /// How many calls from the other side are running on a task of their own, waiting
    /// in a lane, or running in a batch (each of its calls): the calls a cancel can
    /// still stop. (Calls answered at once are never counted.) Zero once the connection
    /// has ended.
    pub fn calls_running(&self) -> usize {
        self.shared.running().len()
    }
}

/// What a cooperative handler watches: set once when its caller cancels the call.
#[derive(Default)]
pub(crate) struct CancelToken {
    cancelled: AtomicBool,
    notify: Notify,
}

impl CancelToken {
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}

impl<S> Context<S> {
    /// Whether the caller has cancelled this call. Only handlers registered with
    /// [`MethodOptions::cooperative`](crate::MethodOptions::cooperative) see it: any
    /// other handler is simply stopped (its future dropped) when its call is cancelled,
    /// so for it this is always `false`.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|t| t.is_cancelled())
    }

    /// Resolves when the caller cancels this call (never, for a handler that is not
    /// [`cooperative`](crate::MethodOptions::cooperative), or for a notification).
    ///
    /// A cooperative handler may then return early with a partial result: with the
    /// LSP form of cancel it is the answer the caller gets; with the MCP form no answer
    /// is sent.
    ///
    /// ```
    /// use jsonrpc_peer::{Context, MethodOptions, Router, RpcError};
    ///
    /// let router = Router::new().method_with(
    ///     "count",
    ///     MethodOptions::new().cooperative(),
    ///     |cx: Context, (n,): (u64,)| async move {
    ///         let mut done = 0;
    ///         while done < n {
    ///             tokio::select! {
    ///                 _ = cx.cancelled() => break,
    ///                 _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => done += 1,
    ///             }
    ///         }
    ///         Ok::<_, RpcError>(done)
    ///     },
    /// );
    /// assert!(router.has_method("count"));
    /// ```
    pub async fn cancelled(&self) {
        let Some(token) = &self.cancel else {
            return std::future::pending().await;
        };
        loop {
            let mut notified = std::pin::pin!(token.notify.notified());
            notified.as_mut().enable();
            if token.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}
