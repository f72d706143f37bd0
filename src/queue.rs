//! The outgoing queue: frames other tasks hand a connection for its socket, bounded in
//! frames ([`PeerConfig::outgoing_queue`]) and in bytes
//! ([`PeerConfig::outgoing_queue_bytes`]).
//!
//! A deque under a mutex, inside the connection's shared state, rather than a tokio
//! channel: a bounded `mpsc` allocates about 1.5 KB per connection up front (its first
//! block of 32 slots and a cache-padded header), which was a quarter of what an idle
//! connection cost. The deque allocates on its first frame and gives its room back
//! after a burst. One lock per frame each way, and the connection's task is woken only
//! when the queue goes from empty to not empty (it drains it until empty or the sink
//! is full, and the sink wakes it for the rest).
//!
//! A frame goes in while the queue holds fewer frames than the frame bound and fewer
//! bytes than the byte bound, so one frame larger than the byte bound still goes when
//! the queue is nearly empty, and the queue never holds more than the byte bound plus
//! one frame. Senders that wait for room wait on a [`Notify`], woken when the queue
//! goes from full to not full and when it closes; their order among themselves is not
//! kept (they are different tasks).
//!
//! Answers the connection's own task made that found the queue full wait beside it, in
//! that task's writer (`driver/writer.rs`), so reading goes on; their bytes are counted
//! against the same bound, and reading pauses while they exceed it, as it pauses while
//! too many calls run.
//!
//! [`PeerConfig::outgoing_queue`]: crate::PeerConfig::outgoing_queue
//! [`PeerConfig::outgoing_queue_bytes`]: crate::PeerConfig::outgoing_queue_bytes

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

use crate::sync::lock;
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

/// Why a frame was not queued; it comes back with the error.
pub(crate) enum TrySendError {
    /// The queue is at one of its bounds.
    Full(Outgoing),
    /// The connection has ended.
    Closed(Outgoing),
}

/// Past this capacity, a queue that runs empty gives its room back (32 KiB after a
/// burst of 1,024 frames would otherwise stay with the connection).
const KEEP_CAPACITY: usize = 64;

/// A connection's outgoing queue, shared by its handles and its task.
pub(crate) struct OutQueue {
    state: Mutex<State>,
    /// The connection's task, when it found the queue empty.
    reader: AtomicWaker,
    /// Senders waiting for room.
    room: Notify,
    max_frames: usize,
    max_bytes: usize,
}

#[derive(Default)]
struct State {
    frames: VecDeque<Outgoing>,
    bytes: usize,
    closed: bool,
}

impl State {
    fn full(&self, max_frames: usize, max_bytes: usize) -> bool {
        self.frames.len() >= max_frames || self.bytes >= max_bytes
    }

    /// Over half of either bound: a replay waits below it before the subscriber goes
    /// live, so the first live publications find room (`topics/log.rs`).
    fn over_half(&self, max_frames: usize, max_bytes: usize) -> bool {
        self.frames.len() > max_frames / 2 || self.bytes > max_bytes / 2
    }
}

impl OutQueue {
    pub(crate) fn new(max_frames: usize, max_bytes: usize) -> Self {
        OutQueue {
            state: Mutex::default(),
            reader: AtomicWaker::new(),
            room: Notify::new(),
            max_frames: max_frames.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Queues `frame` if the queue has room for it now, in frames and in bytes.
    pub(crate) fn try_send(&self, frame: Outgoing) -> Result<(), TrySendError> {
        let mut state = self.state();
        if state.closed {
            return Err(TrySendError::Closed(frame));
        }
        if state.full(self.max_frames, self.max_bytes) {
            return Err(TrySendError::Full(frame));
        }
        state.bytes += frame.len();
        crate::metrics::queue_bytes(frame.len() as i64);
        state.frames.push_back(frame);
        let first = state.frames.len() == 1;
        drop(state);
        if first {
            self.reader.wake();
        }
        Ok(())
    }

    /// Queues `frame`, waiting for room. Fails only when the connection has ended.
    pub(crate) async fn send(&self, mut frame: Outgoing) -> Result<(), Outgoing> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before trying, so room made in between is not missed.
            room.as_mut().enable();
            match self.try_send(frame) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(back)) => return Err(back),
                Err(TrySendError::Full(back)) => frame = back,
            }
            room.await;
        }
    }

    /// Queues a keepalive ping unless the queue is full (a full queue means the link is
    /// busy: the silence is timed anyway).
    pub(crate) fn try_ping(&self) {
        let _ = self.try_send(Outgoing::Ping);
    }

    /// For the connection's task: the next frame, or `Pending` (and a wake-up when one
    /// comes) if there is none. `Ready(None)` once closed and empty.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Outgoing>> {
        if let Some(frame) = self.try_next() {
            return Poll::Ready(Some(frame));
        }
        self.reader.register(cx.waker());
        // Looked at again: a frame queued before the registration woke nobody.
        match self.try_next() {
            Some(frame) => Poll::Ready(Some(frame)),
            None if self.state().closed => Poll::Ready(None),
            None => Poll::Pending,
        }
    }

    /// For the connection's task: the next frame, if any.
    pub(crate) fn try_next(&self) -> Option<Outgoing> {
        let mut state = self.state();
        let was_full = state.full(self.max_frames, self.max_bytes);
        let was_over_half = state.over_half(self.max_frames, self.max_bytes);
        let frame = state.frames.pop_front()?;
        state.bytes -= frame.len();
        crate::metrics::queue_bytes(-(frame.len() as i64));
        if state.frames.is_empty() && state.frames.capacity() > KEEP_CAPACITY {
            state.frames = VecDeque::new();
        }
        // Waiters for room, and for the queue to be half empty (`wait_half_empty`):
        // each crossing happens once per fill, so waking both costs nothing per frame.
        let room = (was_full && !state.full(self.max_frames, self.max_bytes))
            || (was_over_half && !state.over_half(self.max_frames, self.max_bytes));
        drop(state);
        if room {
            self.room.notify_waiters();
        }
        Some(frame)
    }

    /// For the connection's task: nothing more goes in; what is queued can still be
    /// taken out. Waiting senders give up.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.room.notify_waiters();
    }

    /// For the connection's task: drops what is queued (the slow-peer close).
    pub(crate) fn discard(&self) {
        let mut state = self.state();
        let frames = std::mem::take(&mut state.frames);
        crate::metrics::queue_bytes(-(state.bytes as i64));
        state.bytes = 0;
        drop(state);
        drop(frames);
    }

    /// Resolves once the queue holds at most half of each bound (true), or has closed
    /// (false).
    pub(crate) async fn wait_half_empty(&self) -> bool {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before looking, so a drain in between is not missed.
            room.as_mut().enable();
            {
                let state = self.state();
                if state.closed {
                    return false;
                }
                if !state.over_half(self.max_frames, self.max_bytes) {
                    return true;
                }
            }
            room.await;
        }
    }

    /// Whether the queue holds at most half of each bound.
    pub(crate) fn half_empty(&self) -> bool {
        !self.state().over_half(self.max_frames, self.max_bytes)
    }

    /// Bytes in the queue now.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.state().bytes
    }
}

impl Drop for OutQueue {
    /// What a connection's queue still held at its end leaves the process-wide count.
    fn drop(&mut self) {
        let bytes = self.state().bytes;
        if bytes > 0 {
            crate::metrics::queue_bytes(-(bytes as i64));
        }
    }
}
