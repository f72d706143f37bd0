//! The outgoing queue: frames other tasks hand a connection for its socket, bounded in
//! frames ([`PeerConfig::outgoing_queue`]) and in bytes
//! ([`PeerConfig::outgoing_queue_bytes`]).
//!
//! The frame bound is the channel's capacity. The byte bound sits beside it: a count
//! of the bytes in the channel, taken before a frame goes in and given back when the
//! connection's task takes it out. A frame goes in while the count is under the bound,
//! so one frame larger than the bound still goes (when the queue is nearly empty), and
//! the queue never holds more than the bound plus one frame. Waiting for bytes costs a
//! [`Notify`] that is woken only when the count falls back under the bound; the common
//! path is two atomic operations per frame.
//!
//! Answers the connection's own task made that found the queue full wait beside it, on
//! that task (`Dispatch::queue`), so reading goes on; their bytes are counted against
//! the same bound, and reading pauses while they exceed it, as it pauses while too
//! many calls run.
//!
//! [`PeerConfig::outgoing_queue`]: crate::PeerConfig::outgoing_queue
//! [`PeerConfig::outgoing_queue_bytes`]: crate::PeerConfig::outgoing_queue_bytes

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::Notify;

use crate::transport::Text;

/// What the connection is asked to send by other tasks.
pub(crate) enum Outgoing {
    Frame(Text),
    /// A keepalive ping.
    Ping,
}

impl Outgoing {
    pub(crate) fn into_frame(self) -> crate::transport::Frame {
        match self {
            Outgoing::Frame(text) => crate::transport::Frame::Text(text),
            Outgoing::Ping => crate::transport::Frame::Ping(bytes::Bytes::new()),
        }
    }

    /// What the frame counts against the byte bound.
    pub(crate) fn len(&self) -> usize {
        match self {
            Outgoing::Frame(text) => text.len(),
            Outgoing::Ping => 0,
        }
    }
}

/// The sending side of a connection's outgoing queue, shared by all its handles.
pub(crate) struct OutQueue {
    tx: mpsc::Sender<Outgoing>,
    /// Bytes of the frames in the channel.
    bytes: AtomicUsize,
    limit: usize,
    /// Woken when `bytes` falls under `limit`, and when the queue closes.
    room: Notify,
}

impl OutQueue {
    pub(crate) fn new(tx: mpsc::Sender<Outgoing>, limit: usize) -> Self {
        OutQueue {
            tx,
            bytes: AtomicUsize::new(0),
            limit: limit.max(1),
            room: Notify::new(),
        }
    }

    /// Takes `n` bytes of the bound if the queue is under it.
    fn take(&self, n: usize) -> bool {
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.limit).then(|| used.saturating_add(n))
            })
            .is_ok()
    }

    /// Gives `n` bytes back; wakes the waiters when that brings the queue under the bound.
    fn give_back(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.bytes.fetch_sub(n, Ordering::AcqRel);
        if before >= self.limit && before - n < self.limit {
            self.room.notify_waiters();
        }
    }

    /// Queues `frame` if the queue has room for it now, in frames and in bytes.
    pub(crate) fn try_send(&self, frame: Outgoing) -> Result<(), TrySendError<Outgoing>> {
        if self.tx.is_closed() {
            return Err(TrySendError::Closed(frame));
        }
        let n = frame.len();
        if !self.take(n) {
            return Err(TrySendError::Full(frame));
        }
        self.tx.try_send(frame).inspect_err(|_| self.give_back(n))
    }

    /// Queues `frame`, waiting for room. Fails only when the connection has ended.
    pub(crate) async fn send(&self, frame: Outgoing) -> Result<(), Outgoing> {
        let n = frame.len();
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before looking, so a wake in between is not missed.
            room.as_mut().enable();
            if self.tx.is_closed() {
                return Err(frame);
            }
            if self.take(n) {
                break;
            }
            room.await;
        }
        match self.tx.send(frame).await {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendError(frame)) => {
                self.give_back(n);
                Err(frame)
            }
        }
    }

    /// Queues a keepalive ping if a slot is free; it counts no bytes.
    pub(crate) fn try_ping(&self) {
        let _ = self.tx.try_send(Outgoing::Ping);
    }

    /// For the connection's task: `frame` has left the queue.
    pub(crate) fn taken(&self, frame: &Outgoing) {
        self.give_back(frame.len());
    }

    /// For the connection's task: the queue has closed; waiters for bytes give up.
    pub(crate) fn closed(&self) {
        self.room.notify_waiters();
    }

    /// Bytes in the queue now.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}
