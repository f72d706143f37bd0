//! Outgoing calls awaiting their answers, keyed by id.
//!
//! One map per connection, so connections never contend on it. An entry leaves the map
//! in exactly one of three ways: its answer arrives, its caller gives up (the guard's
//! drop, on timeout or cancellation), or the connection ends (`fail_all`).
//!
//! The map is a plain `Mutex<HashMap>` with the router's Fx hasher, not the `DashMap`
//! design first named: it is per connection, touched by the calling tasks and the
//! reader for a few nanoseconds each (an insert or a remove, never held across a send
//! or an await), so shards buy nothing, while they cost a SipHash per lookup, a
//! reader-writer lock per shard and about 200 bytes on every idle connection.

use serde::de::DeserializeOwned;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

use crate::error::{CloseReason, Error, RpcError};
use crate::message::Outcome;
use crate::router::FxHashMap;
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

/// What the reader hands a waiting call: the response's member, or the reason it is
/// not a valid response ([`Error::InvalidResponse`]).
pub(crate) type Answer = Result<Outcome<Reply>, Error>;

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

type Slot = oneshot::Sender<Answer>;

#[derive(Default)]
pub(crate) struct Pending {
    map: Mutex<FxHashMap<u64, Slot>>,
    closed: AtomicBool,
}

impl Pending {
    pub(crate) fn new() -> Self {
        Pending::default()
    }

    /// The map. No code panics while holding it, but a poisoned lock is still usable:
    /// its data is a plain map, consistent after every single operation.
    fn map(&self) -> MutexGuard<'_, FxHashMap<u64, Slot>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a call. The returned guard removes the entry if the call gives up.
    pub(crate) fn register(
        &self,
        id: u64,
        closed_reason: impl FnOnce() -> CloseReason,
    ) -> Result<(Guard<'_>, oneshot::Receiver<Answer>), Error> {
        let (tx, rx) = oneshot::channel();
        self.map().insert(id, tx);
        // Checked after inserting: `fail_all` sets the flag before draining, so either
        // it drains this entry or we see the flag here. Either way nothing is left.
        if self.closed.load(Ordering::SeqCst) {
            self.map().remove(&id);
            return Err(Error::Closed(closed_reason()));
        }
        Ok((
            Guard {
                pending: self,
                id,
                armed: true,
            },
            rx,
        ))
    }

    /// Hands an answer to the call waiting for `id`. False when none waits (a late
    /// answer to a call that timed out, or an id we never sent).
    pub(crate) fn complete(&self, id: u64, answer: Answer) -> bool {
        // The lock is released before the send, which may wake the caller.
        let slot = self.map().remove(&id);
        match slot {
            // The caller may have just given up: a failed send is then fine.
            Some(tx) => {
                let _ = tx.send(answer);
                true
            }
            None => false,
        }
    }

    /// Ends every waiting call with `Error::Closed`; later registrations fail at once.
    pub(crate) fn fail_all(&self, reason: &CloseReason) {
        self.closed.store(true, Ordering::SeqCst);
        let slots = std::mem::take(&mut *self.map());
        for tx in slots.into_values() {
            let _ = tx.send(Err(Error::Closed(reason.clone())));
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

/// Removes a call's entry when the call ends without its answer.
pub(crate) struct Guard<'a> {
    pending: &'a Pending,
    id: u64,
    armed: bool,
}

impl Guard<'_> {
    /// The answer arrived, so the reader already removed the entry.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.pending.map().remove(&self.id);
        }
    }
}
