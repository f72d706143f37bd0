//! Incoming cancels: the calls that can still be stopped, and stopping one.
//!
//! A call is in the map from the moment it waits (on its own task, queued in a lane,
//! or read as a call of a batch) until it has an answer. Whoever takes its entry out
//! decides what is sent: the call's task when it finishes (its answer), or a cancel
//! (`-32800`, or nothing in the MCP form). So a cancel racing the call's end gives one
//! answer, never two. A call that finished in its first poll on the connection's task
//! was answered there and was never in the map: a cancel for it, or for any id not in
//! the map, changes nothing and is not answered. A call of a batch is answered in the
//! batch's one array: a cancel that takes it leaves its answer there (`-32800`; none
//! in the MCP form).
//!
//! The map is bounded by what bounds running and queued calls (`max_in_flight` and
//! one batch, the notification queue), and keyed by the id's raw text, as the other
//! side wrote it in the request and writes it again in the cancel.

use std::future::Future;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use futures_util::future::{AbortHandle, Abortable};
use futures_util::FutureExt;
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::cancel::CancelToken;
use crate::config::CancelStyle;
use crate::error::RpcError;
use crate::message;
use crate::peer::Peer;
use crate::router::HandlerFuture;
use crate::sync::lock;

use super::run::panicked;
use crate::transport::Text;

struct Entry {
    serial: u64,
    abort: AbortHandle,
    /// Set for cooperative handlers: they are told, not stopped.
    token: Option<Arc<CancelToken>>,
    /// Set for a call of a batch: a cancel leaves its answer (`-32800`, or none in
    /// the MCP form) here, for the batch's one array, instead of sending it alone.
    batch: Option<BatchSlot>,
}

/// Where a cancel leaves the answer of a call of a batch it took.
type BatchSlot = Arc<OnceLock<Option<String>>>;

/// The incoming calls of one connection that a cancel can still reach.
#[derive(Default)]
pub(crate) struct Running {
    map: Mutex<FxHashMap<Box<str>, Entry>>,
    next: AtomicU64,
}

/// A registered call: what its task needs to claim its answer.
pub(super) struct Ticket {
    id: Box<str>,
    /// `None` when another call with the same id was already registered: this one
    /// cannot be cancelled, and always sends its answer.
    serial: Option<u64>,
    /// For a call of a batch: the answer a cancel made for it, once one took it.
    batch: Option<BatchSlot>,
}

impl Ticket {
    /// For a call of a batch that a cancel took: the answer the cancel made for the
    /// batch's array (`None` in the MCP form, or when no cancel took it).
    pub(super) fn cancelled_answer(&self) -> Option<String> {
        self.batch.as_ref()?.get().cloned().flatten()
    }
}

impl Running {
    fn map(&self) -> MutexGuard<'_, FxHashMap<Box<str>, Entry>> {
        lock(&self.map)
    }

    /// How many incoming calls wait or run where a cancel can reach them.
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether a call with the raw id `id` waits or runs where a cancel can reach it.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.map().contains_key(id)
    }

    /// Forgets every call: the connection has ended.
    pub(crate) fn clear(&self) {
        self.map().clear();
    }

    /// Makes `fut` stoppable by a cancel for `id`. For a call of a batch (`batch`),
    /// a cancel leaves its answer in the ticket rather than sending it alone.
    pub(super) fn register<F: Future>(
        &self,
        id: &str,
        fut: F,
        token: Option<Arc<CancelToken>>,
        batch: bool,
    ) -> (Abortable<F>, Ticket) {
        let (abort, registration) = AbortHandle::new_pair();
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = batch.then(BatchSlot::default);
        let mut map = self.map();
        let serial = (!map.contains_key(id)).then(|| {
            map.insert(
                id.into(),
                Entry {
                    serial,
                    abort,
                    token,
                    batch: slot.clone(),
                },
            );
            serial
        });
        drop(map);
        let ticket = Ticket {
            id: id.into(),
            serial,
            batch: slot,
        };
        (Abortable::new(fut, registration), ticket)
    }

    /// The call's end: true when its answer is still to be sent (no cancel took it).
    pub(super) fn finish(&self, ticket: &Ticket) -> bool {
        let Some(serial) = ticket.serial else {
            return true;
        };
        let mut map = self.map();
        match map.get(&*ticket.id) {
            Some(entry) if entry.serial == serial => {
                map.remove(&*ticket.id);
                true
            }
            _ => false,
        }
    }

    /// Handles a cancel for the call whose raw id is `id`. Returns the answer to send
    /// for it, if any.
    pub(super) fn cancel(&self, id: &str, style: CancelStyle) -> Option<String> {
        let mut map = self.map();
        let entry = map.get(id)?;
        if let Some(token) = &entry.token {
            token.cancel();
            // LSP: the cooperative handler's own answer is the answer. MCP: none is
            // sent, so its answer is no longer wanted.
            if style == CancelStyle::Mcp {
                if let Some(slot) = map.remove(id).and_then(|entry| entry.batch) {
                    let _ = slot.set(None);
                }
            }
            return None;
        }
        let entry = map.remove(id)?;
        drop(map);
        entry.abort.abort();
        let answer = cancel_answer(id, style);
        match entry.batch {
            // The batch answers it, in its array.
            Some(slot) => {
                let _ = slot.set(answer);
                None
            }
            None => answer,
        }
    }
}

#[derive(Deserialize)]
struct LspParams<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct McpParams<'a> {
    #[serde(borrow)]
    request_id: &'a RawValue,
}

/// Handles an incoming cancel notification of `style` whose params are `params`.
/// Returns the answer to write for the cancelled call, if any.
pub(super) fn on_cancel(peer: &Peer, style: CancelStyle, params: Option<&str>) -> Option<String> {
    crate::metrics::cancel_received();
    let id = named(style, params)?;
    let answer = peer.shared.running().cancel(&id, style);
    if answer.is_none() {
        tracing::debug!(id = &*id, "cancel handled without an answer");
    }
    answer
}

/// The raw id of the call a cancel of `style` with `params` names, if it can be read.
pub(super) fn named(style: CancelStyle, params: Option<&str>) -> Option<Box<str>> {
    let params = params?;
    let id = match style {
        CancelStyle::Lsp => serde_json::from_str::<LspParams<'_>>(params).map(|p| p.id),
        CancelStyle::Mcp => serde_json::from_str::<McpParams<'_>>(params).map(|p| p.request_id),
    };
    match id {
        Ok(id) => Some(id.get().into()),
        Err(_) => {
            tracing::debug!(params, "cancel without a readable id; ignored");
            None
        }
    }
}

/// The answer to a call a cancel took: `-32800` in the LSP form, none in the MCP
/// form.
pub(super) fn cancel_answer(id: &str, style: CancelStyle) -> Option<String> {
    (style == CancelStyle::Lsp)
        .then(|| message::error_response(Some(id), &RpcError::request_cancelled()))
}

/// The rest of a call that did not finish in its first poll, made stoppable: it runs
/// to its answer and sends it, unless a cancel took it first. A panic answers -32603.
pub(super) fn stoppable_call(
    peer: &Peer,
    fut: HandlerFuture<String>,
    (id_frame, id): (Text, Range<usize>),
    method: &str,
    token: Option<Arc<CancelToken>>,
) -> impl Future<Output = ()> + Send + 'static {
    let method = Box::<str>::from(method);
    let (fut, ticket) = peer
        .shared
        .running()
        .register(&id_frame[id.clone()], fut, token, false);
    let peer = peer.clone();
    async move {
        let answer = match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(Ok(answer)) => answer,
            // Cancelled: the cancel answered (or, MCP, chose not to).
            Ok(Err(_aborted)) => return,
            Err(_) => panicked(Some(&id_frame[id]), &method, peer.id()).unwrap_or_default(),
        };
        if peer.shared.running().finish(&ticket) {
            peer.shared.send_answer(answer).await;
        }
    }
}
