//! A batch: calls and notifications sent together as one JSON array, on the call path
//! of a single call (`peer/send.rs`: register, queue, wait; cancelled when dropped).

use std::time::Duration;

use serde::Serialize;

use crate::contract::Method;
use crate::error::{Error, Result};
use crate::message;
use crate::peer::{Peer, Reply, Waiting};
use crate::pending::Due;

/// Calls and notifications sent as one JSON array; see [`Peer::batch`].
///
/// Its calls are made as single calls are: each waits for its answer up to the timeout,
/// and when the batch's future is dropped (or a call times out) after the batch went
/// out, the other side is told that each call without an answer was given up.
#[derive(Debug)]
pub struct Batch<'p> {
    peer: &'p Peer,
    buf: String,
    ids: Vec<u64>,
    /// The method of each call, in the order of `ids`, for errors to name.
    methods: Vec<Box<str>>,
    len: usize,
    timeout: Option<Duration>,
}

impl<'p> Batch<'p> {
    pub(crate) fn new(peer: &'p Peer) -> Self {
        Batch {
            peer,
            buf: String::new(),
            ids: Vec::new(),
            methods: Vec::new(),
            len: 0,
            timeout: None,
        }
    }

    /// Adds a call. Its outcome comes back from [`send`](Self::send) in the order added.
    ///
    /// # Errors
    ///
    /// The params errors of [`Caller::call`](crate::Caller::call).
    pub fn call(&mut self, method: &str, params: impl Serialize) -> Result<&mut Self> {
        let id = self.peer.shared.next_id();
        self.push(method, &params, Some(id))?;
        self.ids.push(id);
        self.methods.push(method.into());
        Ok(self)
    }

    /// Adds a call of the method `M`: [`call`](Self::call) with the name and the params
    /// type taken from the contract (read its answer with `Reply::decode::<M::Result>`).
    ///
    /// # Errors
    ///
    /// As for [`call`](Self::call).
    pub fn request<M: Method>(&mut self, _method: M, params: &M::Params) -> Result<&mut Self> {
        self.call(M::NAME, crate::message::typed(params))
    }

    /// Adds a notification.
    ///
    /// # Errors
    ///
    /// The params errors of [`Caller::call`](crate::Caller::call).
    pub fn notify(&mut self, method: &str, params: impl Serialize) -> Result<&mut Self> {
        self.push(method, &params, None)?;
        Ok(self)
    }

    /// Waits at most `timeout` for each call's answer, instead of the connection's
    /// call timeout.
    pub fn timeout(&mut self, timeout: Duration) -> &mut Self {
        self.timeout = Some(timeout);
        self
    }

    fn push(&mut self, method: &str, params: &impl Serialize, id: Option<u64>) -> Result<()> {
        let mark = self.buf.len();
        self.buf.push(if self.len == 0 { '[' } else { ',' });
        if let Err(e) = message::write_request(&mut self.buf, method, params, id) {
            self.buf.truncate(mark);
            return Err(e);
        }
        self.len += 1;
        Ok(())
    }

    /// Sends the batch and waits for every call's outcome, in the order the calls were
    /// added, each within the call timeout. A batch of notifications only returns as
    /// soon as it is sent; an empty batch sends nothing. When the other side refuses
    /// the batch whole (one `-32600` or `-32700` with `id: null`: too long for it, say)
    /// while it is the only batch of this peer's waiting, each call's outcome is that
    /// error; with other batches waiting, which was refused cannot be told, and they
    /// wait for their timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] when the batch cannot be sent; each call's own failure is in
    /// its place in the returned list.
    pub async fn send(mut self) -> Result<Vec<Result<Reply>>> {
        if self.len == 0 {
            return Ok(Vec::new());
        }
        self.buf.push(']');
        let shared = &*self.peer.shared;
        let timeout = self.timeout.unwrap_or_else(|| shared.call_timeout());
        if let Some(layers) = shared.layers() {
            layers.on_batch(crate::layer::Direction::Made, self.len);
        }
        let frame = std::mem::take(&mut self.buf);
        // One deadline for every call of the batch; the connection's sweep keeps it
        // for each call it fits (see `pending.rs`), the others wait on a timer.
        // A timeout too long to be an instant (`Duration::MAX`) has no deadline.
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        let due = match (shared.due(timeout), deadline) {
            (Due::Own, _) | (_, None) => Due::Own,
            (_, Some(deadline)) => Due::At(deadline),
        };
        let mut calls = Vec::with_capacity(self.ids.len());
        for &id in &self.ids {
            calls.push(Waiting::register(shared, id, due)?);
        }
        // Marked before it goes: its refusal may come back before this task runs again.
        let _sent = shared.pending().batch_sent(&self.ids);
        shared
            .send_by(frame, deadline)
            .await
            .ok_or_else(|| Error::timeout(None, timeout))??;
        for call in &calls {
            call.queued();
        }
        let mut outcomes = Vec::with_capacity(calls.len());
        for (call, method) in calls.iter_mut().zip(&self.methods) {
            let answer = match call.swept() {
                Some(_) => call.answer(shared).await,
                None => match deadline {
                    Some(deadline) => tokio::time::timeout_at(deadline, call.answer(shared))
                        .await
                        .ok()
                        .flatten(),
                    None => call.answer(shared).await,
                },
            };
            outcomes.push(match answer {
                Some(answer) => answer.and_then(|outcome| outcome.into_result(method)),
                None => Err(Error::timeout(Some(method), timeout)),
            });
        }
        Ok(outcomes)
    }
}
