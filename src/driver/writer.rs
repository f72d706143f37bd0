//! The connection's writing: the one place where frames enter the sink.
//!
//! The writer owns what writing needs and nothing else: the transport (one stream and
//! sink, never split, so the connection reads through it too), the batch of queued
//! frames it took out under one lock (`queue.rs`), how many frames were fed since the
//! last flush, the first write that failed, and the answers that wait for
//! room. Those are answers made on the connection's task that found the outgoing queue
//! full: they wait here, oldest first, and move into the queue as writing makes room,
//! so reading never waits on writing. They count as running calls, and in bytes
//! against the queue's byte bound: reading pauses while they hold it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context as TaskContext, Poll};

use crate::peer::Shared;
use crate::queue::{Batch, OutQueue, Outgoing, TrySendError};
use crate::transport::{Frame, Transport, TransportError};

/// Longest run of frames fed before one flush, so the other side gets a steady stream
/// while the queue is never empty. As many as the outgoing queue holds by default
/// (`PeerConfig::outgoing_queue`): a handler that floods a connection gets one flush
/// per queue it fills, not four. Large frames reach tungstenite's write buffer size
/// (64 KiB, set in `PeerConfig::websocket`) first, and tungstenite writes them out
/// then. At 256, the rpc bench's (d) made 4,332 `sendto` per 1.1 million
/// notifications against the baseline's 918 (PERF-NOTES.md, "Stop 52"), and ran 1%
/// to 2% slower (PERF-NOTES.md, "Stop 55").
const MAX_COALESCE: usize = 1024;

pub(super) struct Writer<T> {
    transport: T,
    /// Whose outgoing queue this writer empties: other tasks fill it.
    shared: Arc<Shared>,
    /// Frames taken out of the queue under one lock, fed one by one.
    batch: Batch,
    /// Frames fed to the sink since it was last flushed.
    unflushed: usize,
    /// The first write that failed; the connection ends with it as the cause. Boxed:
    /// only a failing connection has one.
    error: Option<Box<TransportError>>,
    /// Answers made on the connection's task that found the queue full. `None` until
    /// the other side first reads slower than it calls, then kept: an idle connection
    /// holds one pointer here (see `Ahead` for why its task counts every word).
    waiting: Option<Box<Backlog>>,
}

/// Answers waiting for room in the queue, oldest first, and their bytes.
#[derive(Default)]
struct Backlog {
    frames: VecDeque<Outgoing>,
    bytes: usize,
}

impl Backlog {
    fn push_back(&mut self, frame: Outgoing) {
        self.bytes += frame.len();
        self.frames.push_back(frame);
    }

    fn push_front(&mut self, frame: Outgoing) {
        self.bytes += frame.len();
        self.frames.push_front(frame);
    }

    fn pop_front(&mut self) -> Option<Outgoing> {
        let frame = self.frames.pop_front()?;
        self.bytes -= frame.len();
        Some(frame)
    }
}

impl<T> Writer<T> {
    fn queue(&self) -> &OutQueue {
        self.shared.queue()
    }

    /// The connection ends: nothing more goes into the queue. What it holds, and the
    /// answers waiting for room, still go out ([`poll_drain`](Self::poll_drain)),
    /// unless `discard` (the slow-peer close: the queue is what the other side does not
    /// read, and the close frame goes next).
    pub(super) fn close_queue(&mut self, discard: bool) {
        self.queue().close();
        if discard {
            self.shared.queue().discard(&mut self.batch);
            self.waiting = None;
        }
    }
}

impl<T: Transport> Writer<T> {
    pub(super) fn new(transport: T, shared: Arc<Shared>) -> Self {
        Writer {
            transport,
            shared,
            batch: Batch::default(),
            unflushed: 0,
            error: None,
            waiting: None,
        }
    }

    fn sink(&mut self) -> Pin<&mut T> {
        Pin::new(&mut self.transport)
    }

    /// The next frame the other side sent. The connection reads through the writer
    /// because the transport is one stream and sink, used whole.
    pub(super) fn poll_read(
        &mut self,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame, TransportError>>> {
        Pin::new(&mut self.transport).poll_next(cx)
    }

    /// The next frame of the queue: from the batch, or from a new batch.
    fn next_queued(&mut self) -> Option<Outgoing> {
        if let Some(frame) = self.batch.pop() {
            return Some(frame);
        }
        self.shared.queue().take(&mut self.batch);
        self.batch.pop()
    }

    /// As [`next_queued`](Self::next_queued), or `Pending` (and a wake-up when a frame
    /// is queued); `Ready(None)` once the queue is closed and empty.
    fn poll_queued(&mut self, cx: &mut TaskContext<'_>) -> Poll<Option<Outgoing>> {
        if let Some(frame) = self.batch.pop() {
            return Poll::Ready(Some(frame));
        }
        match self.shared.queue().poll_take(cx, &mut self.batch) {
            Poll::Ready(true) => Poll::Ready(self.batch.pop()),
            Poll::Ready(false) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Gives the room of a past burst back, in the queue and in the batch, if both are
    /// empty (the connection's keepalive tick).
    pub(super) fn give_back_room(&mut self) {
        self.queue().give_back_room();
        self.batch.give_back_room();
    }

    /// The sink takes nothing more for now: what it took of the batch leaves the
    /// queue's count, so senders get that room while the task waits.
    fn sink_busy(&mut self) {
        self.shared.queue().release(&mut self.batch);
    }

    /// The sink's `poll_ready`, releasing a fed batch when it is not ready.
    ///
    /// Always inlined: out of line, its 32-byte `Poll<Result<(), TransportError>>` went
    /// back through memory for every frame, written in 8 bytes and copied in 16, and
    /// the copy waited for the store (perf, the rpc bench's (d): 108 of the server's
    /// 2,411 samples on that one load). `#[inline]` had stopped being enough.
    #[inline(always)]
    fn poll_sink_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), TransportError>> {
        let ready = self.sink().poll_ready(cx);
        if ready.is_pending() {
            self.sink_busy();
        }
        ready
    }

    #[inline]
    fn feed(&mut self, frame: Frame) -> Result<(), TransportError> {
        self.unflushed += 1;
        self.sink().start_send(frame)
    }

    /// Whether a write failed: the connection ends.
    pub(super) fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The write that failed, for the cause of the end.
    pub(super) fn take_error(&mut self) -> Option<TransportError> {
        self.error.take().map(|e| *e)
    }

    /// How many answers wait for room.
    pub(super) fn waiting(&self) -> usize {
        self.waiting
            .as_ref()
            .map_or(0, |waiting| waiting.frames.len())
    }

    /// Whether the answers waiting for room hold the byte bound.
    pub(super) fn waiting_full(&self) -> bool {
        // Past the queue's byte bound, reading pauses.
        let bytes = self.waiting.as_ref().map_or(0, |waiting| waiting.bytes);
        bytes >= self.queue().max_bytes()
    }

    /// Whether the outgoing queue is at one of its bounds.
    pub(super) fn queue_full(&self) -> bool {
        self.queue().is_full()
    }

    /// Queues a keepalive ping, unless the queue is full (then the link is busy, and the
    /// silence is timed anyway).
    pub(super) fn ping(&self) {
        self.queue().try_ping();
    }

    /// Feeds what is queued into the sink and flushes once the queue is momentarily
    /// empty. Never waits: when the sink is full, the sink wakes the task when it has
    /// room. A failure is kept ([`failed`](Self::failed)). Returns whether the sink took
    /// a frame: with the sink full, a sign that the other side reads.
    #[inline]
    pub(super) fn poll_write(&mut self, cx: &mut TaskContext<'_>) -> bool {
        let mut fed = false;
        if let Err(e) = self.try_poll_write(cx, &mut fed) {
            self.error.get_or_insert_with(|| Box::new(e));
        }
        fed
    }

    fn try_poll_write(
        &mut self,
        cx: &mut TaskContext<'_>,
        fed: &mut bool,
    ) -> Result<(), TransportError> {
        loop {
            if self.unflushed >= MAX_COALESCE {
                if self.sink().poll_flush(cx)?.is_pending() {
                    self.sink_busy();
                    return Ok(());
                }
                self.unflushed = 0;
            }
            // Ready first, so nothing is taken from the queue that the sink cannot take.
            if self.poll_sink_ready(cx)?.is_pending() {
                return Ok(());
            }
            match self.poll_queued(cx) {
                Poll::Ready(Some(next)) => {
                    self.feed(next.into_frame())?;
                    *fed = true;
                }
                // `None` cannot come while the connection's handles live, and they live
                // as long as this task. Empty: the answers waiting for room go next.
                Poll::Ready(None) | Poll::Pending => {
                    if !self.feed_waiting() {
                        break;
                    }
                }
            }
        }
        if self.unflushed > 0 && self.sink().poll_flush(cx)?.is_ready() {
            self.unflushed = 0;
        }
        Ok(())
    }

    /// Writes an answer made on this task. Frames keep the order they were made in: it
    /// goes into the sink after whatever the queue holds, when the sink takes it at
    /// once; otherwise it joins the queue, and when even the queue is full, it waits
    /// here for room so that reading does not.
    #[inline]
    pub(super) fn answer(&mut self, cx: &mut TaskContext<'_>, answer: String) {
        let frame = Outgoing::Frame(answer.into());
        if let Some(frame) = self.write_now(cx, frame) {
            self.wait(frame);
        }
    }

    /// Feeds the queue, then `frame`, into the sink while it is ready. Returns the
    /// frame if the sink was not.
    #[inline]
    fn write_now(&mut self, cx: &mut TaskContext<'_>, frame: Outgoing) -> Option<Outgoing> {
        let result = loop {
            match self.poll_sink_ready(cx) {
                Poll::Pending => return Some(frame),
                Poll::Ready(Err(e)) => break Err(e),
                Poll::Ready(Ok(())) => {}
            }
            // What was queued before this frame goes first.
            match self.next_queued() {
                Some(queued) => {
                    if let Err(e) = self.feed(queued.into_frame()) {
                        break Err(e);
                    }
                }
                // Earlier answers waiting for room go before this one.
                None if self.feed_waiting() => {}
                None => break self.feed(frame.into_frame()),
            }
        };
        if let Err(e) = result {
            self.error.get_or_insert_with(|| Box::new(e));
        }
        None
    }

    /// An answer the sink could not take: into the queue when it has room (and no
    /// earlier answer waits), else behind the answers waiting for room.
    fn wait(&mut self, frame: Outgoing) {
        let frame = if self.waiting() == 0 {
            match self.queue().try_send(frame) {
                Ok(_) | Err(TrySendError::Closed(_)) => return,
                Err(TrySendError::Full(frame)) => frame,
            }
        } else {
            frame
        };
        self.waiting.get_or_insert_default().push_back(frame);
    }

    /// Moves the answers waiting for room into the queue, oldest first, while it has
    /// room. Returns whether any moved.
    fn feed_waiting(&mut self) -> bool {
        let mut moved = false;
        let Some(waiting) = self.waiting.as_deref_mut() else {
            return false;
        };
        while let Some(frame) = waiting.pop_front() {
            match self.shared.queue().try_send(frame) {
                Ok(_) | Err(TrySendError::Closed(_)) => moved = true,
                Err(TrySendError::Full(frame)) => {
                    waiting.push_front(frame);
                    break;
                }
            }
        }
        moved
    }

    /// Feeds everything still to write into the sink: the closed queue, then the
    /// answers that waited for room. Ready once both are empty.
    pub(super) fn poll_drain(
        &mut self,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Result<(), TransportError>> {
        loop {
            ready!(self.poll_sink_ready(cx))?;
            let next = match self.next_queued() {
                Some(next) => next,
                None => match self.waiting.as_deref_mut().and_then(Backlog::pop_front) {
                    Some(next) => next,
                    None => return Poll::Ready(Ok(())),
                },
            };
            self.feed(next.into_frame())?;
        }
    }

    /// Feeds the frame in `slot`, if any, once the sink takes it.
    pub(super) fn poll_feed(
        &mut self,
        cx: &mut TaskContext<'_>,
        slot: &mut Option<Frame>,
    ) -> Poll<Result<(), TransportError>> {
        if slot.is_some() {
            ready!(self.poll_sink_ready(cx))?;
            if let Some(frame) = slot.take() {
                self.feed(frame)?;
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Flushes and closes the sink.
    pub(super) fn poll_close(
        &mut self,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Result<(), TransportError>> {
        self.sink().poll_close(cx)
    }
}
