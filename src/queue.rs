//! The outgoing queue: frames other tasks hand a connection for its socket, bounded in
//! frames ([`PeerConfig::outgoing_queue`]) and in bytes
//! ([`PeerConfig::outgoing_queue_bytes`]).
//!
//! A deque under a mutex, inside the connection's shared state, rather than a tokio
//! channel: a bounded `mpsc` allocates about 1.5 KB per connection up front (its first
//! block of 32 slots and a cache-padded header), which was a quarter of what an idle
//! connection cost. The deque allocates on its first frame and gives its room back
//! after a burst: at the connection's next keepalive tick that finds it empty, or (a
//! connection without keepalive) whenever it runs empty. Not at every emptying: a
//! handler that floods a connection fills the queue and the writer empties it over
//! and over, and growing the deque again from nothing each time cost about 200
//! instructions a frame (callgrind, the rpc bench's (d)). One lock per frame each way, and the connection's task is woken only
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
    /// Whether the room goes back as soon as the queue runs empty (no keepalive tick
    /// calls [`give_back_room`](Self::give_back_room)).
    trim_when_empty: bool,
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
    /// A queue of at most `max_frames` frames and `max_bytes` bytes. With
    /// `trim_when_empty`, it gives its room back whenever it runs empty; without, only
    /// when [`give_back_room`](Self::give_back_room) finds it empty.
    pub(crate) fn new(max_frames: usize, max_bytes: usize, trim_when_empty: bool) -> Self {
        OutQueue {
            state: Mutex::default(),
            reader: AtomicWaker::new(),
            room: Notify::new(),
            max_frames: max_frames.max(1),
            max_bytes: max_bytes.max(1),
            trim_when_empty,
        }
    }

    /// Gives the room of a past burst back if the queue is empty now (the connection's
    /// keepalive tick).
    pub(crate) fn give_back_room(&self) {
        let mut state = self.state();
        if state.frames.is_empty() && state.frames.capacity() > KEEP_CAPACITY {
            state.frames = VecDeque::new();
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
        if self.trim_when_empty
            && state.frames.is_empty()
            && state.frames.capacity() > KEEP_CAPACITY
        {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Outgoing {
        Outgoing::Frame("{}".into())
    }

    /// Fills the queue past [`KEEP_CAPACITY`] and empties it.
    fn burst(queue: &OutQueue) {
        for _ in 0..KEEP_CAPACITY * 4 {
            assert!(queue.try_send(frame()).is_ok());
        }
        while queue.try_next().is_some() {}
    }

    fn capacity(queue: &OutQueue) -> usize {
        queue.state().frames.capacity()
    }

    #[test]
    fn with_keepalive_a_burst_keeps_its_room_until_the_tick_finds_the_queue_empty() {
        let queue = OutQueue::new(1024, 1 << 20, false);
        burst(&queue);
        let room = capacity(&queue);
        assert!(room >= KEEP_CAPACITY * 4, "kept between fills");
        burst(&queue);
        assert_eq!(capacity(&queue), room, "the next fill grows nothing");
        queue.try_send(frame()).ok().unwrap();
        queue.give_back_room();
        assert_eq!(capacity(&queue), room, "not while a frame waits");
        queue.try_next().unwrap();
        queue.give_back_room();
        assert_eq!(capacity(&queue), 0);
    }

    #[test]
    fn without_keepalive_the_room_goes_back_whenever_the_queue_runs_empty() {
        let queue = OutQueue::new(1024, 1 << 20, true);
        burst(&queue);
        assert_eq!(capacity(&queue), 0);
    }
}
