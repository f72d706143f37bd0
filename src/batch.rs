//! A batch: calls and notifications sent together as one JSON array.

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::message;
use crate::peer::{Peer, Reply};
use crate::pending::{Due, Registered};

/// Calls and notifications sent as one JSON array; see [`Peer::batch`].
#[derive(Debug)]
pub struct Batch<'p> {
    peer: &'p Peer,
    buf: Vec<u8>,
    ids: Vec<u64>,
    /// The method of each call, in the order of `ids`, for errors to name.
    methods: Vec<Box<str>>,
    len: usize,
}

impl<'p> Batch<'p> {
    pub(crate) fn new(peer: &'p Peer) -> Self {
        Batch {
            peer,
            buf: Vec::new(),
            ids: Vec::new(),
            methods: Vec::new(),
            len: 0,
        }
    }

    /// Adds a call. Its outcome comes back from [`send`](Self::send) in the order added.
    ///
    /// # Errors
    ///
    /// The params errors of [`Peer::call`].
    pub fn call(&mut self, method: &str, params: impl Serialize) -> Result<&mut Self> {
        let id = self.peer.next_id();
        self.push(method, &params, Some(id))?;
        self.ids.push(id);
        self.methods.push(method.into());
        Ok(self)
    }

    /// Adds a notification.
    ///
    /// # Errors
    ///
    /// The params errors of [`Peer::call`].
    pub fn notify(&mut self, method: &str, params: impl Serialize) -> Result<&mut Self> {
        self.push(method, &params, None)?;
        Ok(self)
    }

    fn push(&mut self, method: &str, params: &impl Serialize, id: Option<u64>) -> Result<()> {
        let mark = self.buf.len();
        self.buf.push(if self.len == 0 { b'[' } else { b',' });
        if let Err(e) = message::write_request(&mut self.buf, method, params, id) {
            self.buf.truncate(mark);
            return Err(e);
        }
        self.len += 1;
        Ok(())
    }

    /// Sends the batch and waits for every call's outcome, in the order the calls were
    /// added, each within the connection's call timeout. A batch of notifications only
    /// returns as soon as it is sent; an empty batch sends nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] when the batch cannot be sent; each call's own failure is in
    /// its place in the returned list.
    pub async fn send(self) -> Result<Vec<Result<Reply>>> {
        let timeout = self.peer.shared.call_timeout();
        self.send_with_timeout(timeout).await
    }

    /// [`send`](Self::send) with its own timeout.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn send_with_timeout(mut self, timeout: Duration) -> Result<Vec<Result<Reply>>> {
        if self.len == 0 {
            return Ok(Vec::new());
        }
        self.buf.push(b']');
        let shared = &*self.peer.shared;
        if let Some(layers) = shared.layers() {
            layers.on_batch(crate::layer::Direction::Made, self.len);
        }
        let frame = String::from_utf8(std::mem::take(&mut self.buf))
            .map_err(|_| message::invalid_utf8())?;
        // One deadline for every call of the batch; the connection's sweep keeps it
        // for each call it fits (see `pending.rs`), the others wait on a timer.
        let deadline = tokio::time::Instant::now() + timeout;
        let due = match shared.due(timeout) {
            Due::Own => Due::Own,
            _ => Due::At(deadline),
        };
        let mut waiting = Vec::with_capacity(self.ids.len());
        for &id in &self.ids {
            waiting.push(shared.register(id, due)?);
        }
        shared
            .send_by(frame, Some(deadline))
            .await
            .ok_or_else(|| Error::timeout(None, timeout))??;
        let mut outcomes = Vec::with_capacity(waiting.len());
        for (registered, method) in waiting.into_iter().zip(&self.methods) {
            let Registered {
                mut guard,
                rx,
                deadline: swept,
                ..
            } = registered;
            let answer = match swept {
                Some(_) => Ok(rx.await),
                None => tokio::time::timeout_at(deadline, rx).await,
            };
            let outcome = match answer {
                Err(_) => Err(Error::timeout(Some(method), timeout)),
                Ok(Err(_)) => Err(Error::Closed(shared.close_reason())),
                Ok(Ok(answer)) => {
                    // The reader, the sweep or the connection's end removed the entry.
                    guard.disarm();
                    match answer {
                        Some(answer) => answer.and_then(|outcome| outcome.into_result(method)),
                        None => Err(Error::timeout(Some(method), timeout)),
                    }
                }
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }
}
