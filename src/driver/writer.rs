//! The connection's writing: the one place where frames enter the sink.

use std::pin::Pin;
use std::task::{ready, Context as TaskContext, Poll};

use super::Connection;
use crate::queue::Outgoing;
use crate::transport::{Frame, Transport, TransportError};

/// Longest run of frames fed before one flush, so the other side gets a steady stream
/// while the queue is never empty.
const MAX_COALESCE: usize = 256;

impl<T: Transport, S: Send + Sync + 'static> Connection<T, S> {
    pub(super) fn sink(&mut self) -> Pin<&mut T> {
        Pin::new(&mut self.transport)
    }

    fn feed(&mut self, frame: Frame) -> Result<(), TransportError> {
        self.unflushed += 1;
        self.sink().start_send(frame)
    }

    /// Feeds what is queued into the sink and flushes once the queue is momentarily
    /// empty. Never waits: when the sink is full, the sink wakes the task when it has
    /// room.
    pub(super) fn poll_write(&mut self, cx: &mut TaskContext<'_>) -> Result<(), TransportError> {
        loop {
            if self.unflushed >= MAX_COALESCE {
                if self.sink().poll_flush(cx)?.is_pending() {
                    return Ok(());
                }
                self.unflushed = 0;
            }
            // Ready first, so nothing is taken from the queue that the sink cannot take.
            if self.sink().poll_ready(cx)?.is_pending() {
                return Ok(());
            }
            match self.dispatch.peer().shared.out.poll_next(cx) {
                Poll::Ready(Some(next)) => self.feed(next.into_frame())?,
                // `None` cannot come while the connection's handles live, and they live
                // as long as this task. Empty: the answers waiting for room go next.
                Poll::Ready(None) | Poll::Pending => {
                    if !self.dispatch.feed_later() {
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
    /// once; otherwise it joins the queue, and when even the queue is full, a task
    /// waits for room so that reading does not.
    pub(super) fn answer(&mut self, cx: &mut TaskContext<'_>, answer: String) {
        let frame = Outgoing::Frame(answer.into());
        if let Some(frame) = self.write_now(cx, frame) {
            self.dispatch.queue(frame);
        }
    }

    /// Feeds the queue, then `frame`, into the sink while it is ready. Returns the
    /// frame if the sink was not.
    fn write_now(&mut self, cx: &mut TaskContext<'_>, frame: Outgoing) -> Option<Outgoing> {
        let result = loop {
            match self.sink().poll_ready(cx) {
                Poll::Pending => return Some(frame),
                Poll::Ready(Err(e)) => break Err(e),
                Poll::Ready(Ok(())) => {}
            }
            // What was queued before this frame goes first.
            match self.dispatch.peer().shared.out.try_next() {
                Some(queued) => {
                    if let Err(e) = self.feed(queued.into_frame()) {
                        break Err(e);
                    }
                }
                // Earlier answers waiting for room go before this one.
                None if self.dispatch.feed_later() => {}
                None => break self.feed(frame.into_frame()),
            }
        };
        if let Err(e) = result {
            self.write_error.get_or_insert(e);
        }
        None
    }

    /// The end of writing: what was queued goes out first (answers of calls that
    /// finished during a graceful close, above all), then our close frame, then the
    /// sink closes.
    pub(super) fn poll_finish(
        &mut self,
        cx: &mut TaskContext<'_>,
        close: &mut Option<Frame>,
        queue_done: &mut bool,
    ) -> Poll<Result<(), TransportError>> {
        while !*queue_done {
            ready!(self.sink().poll_ready(cx))?;
            match self.dispatch.peer().shared.out.try_next() {
                Some(next) => self.feed(next.into_frame())?,
                // The queue is closed: the answers that waited for room go after it.
                None => match self.dispatch.pop_later() {
                    Some(next) => self.feed(next.into_frame())?,
                    None => *queue_done = true,
                },
            }
        }
        if close.is_some() {
            ready!(self.sink().poll_ready(cx))?;
            if let Some(frame) = close.take() {
                self.feed(frame)?;
            }
        }
        self.sink().poll_close(cx)
    }
}
