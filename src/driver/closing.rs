//! The end of a connection, as a state of its own: the closing handshake.
//!
//! Two halves, each done once: writing (what is queued goes out first, the answers of
//! calls that finished during a graceful close above all, then our close frame, then
//! the sink closes) and, after a close frame of ours, reading until the other side
//! answers it, so the connection ends with a complete handshake. The connection polls
//! it under the close timeout, which holds whatever the queues hold: past it the
//! transport is dropped with whatever is left unwritten.

use std::task::{ready, Context as TaskContext, Poll};

use super::writer::Writer;
use crate::error::CloseReason;
use crate::peer::NO_STATUS;
use crate::transport::{Frame, Transport, TransportError};

pub(super) struct Closing {
    /// Our close frame, until it is fed to the sink. `None` when the other side closed
    /// (the WebSocket layer answers its close frame) or the transport ended.
    close: Option<Frame>,
    /// What was queued has gone into the sink.
    drained: bool,
    /// Writing is over: the sink is closed, or a write failed.
    written: bool,
    /// The other side answered our close frame, its stream ended, or none is awaited.
    echoed: bool,
}

impl Closing {
    /// The handshake that ends a connection closed for `reason`; `write_failed` when
    /// nothing more can be written.
    pub(super) fn new(reason: &CloseReason, write_failed: bool) -> Self {
        let close = match reason {
            // A code a close frame may not carry (see `CloseRequest::new`): none.
            CloseReason::Local {
                code: NO_STATUS, ..
            } => Some(Frame::Close(None)),
            CloseReason::Local { code, reason } => {
                Some(Frame::Close(Some((*code, reason.clone()))))
            }
            // 1011: the other side stopped answering; the code says why we leave.
            CloseReason::KeepaliveTimeout => {
                Some(Frame::Close(Some((1011, "keepalive timeout".to_owned()))))
            }
            _ => None,
        };
        Closing {
            echoed: close.is_none(),
            close,
            drained: false,
            written: write_failed,
        }
    }

    /// Ready once both halves are done.
    pub(super) fn poll<T: Transport>(
        &mut self,
        cx: &mut TaskContext<'_>,
        writer: &mut Writer<T>,
    ) -> Poll<()> {
        if !self.written {
            if let Poll::Ready(result) = self.poll_write(cx, writer) {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "closing the transport failed");
                }
                self.written = true;
            }
        }
        while !self.echoed {
            match writer.poll_read(cx) {
                Poll::Pending => break,
                Poll::Ready(Some(Ok(Frame::Close(_))) | None | Some(Err(_))) => {
                    self.echoed = true;
                }
                Poll::Ready(Some(Ok(_))) => {}
            }
        }
        if self.written && self.echoed {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn poll_write<T: Transport>(
        &mut self,
        cx: &mut TaskContext<'_>,
        writer: &mut Writer<T>,
    ) -> Poll<Result<(), TransportError>> {
        if !self.drained {
            let drained = ready!(writer.poll_drain(cx));
            self.drained = true;
            if let Err(e) = drained {
                // Nothing more goes out, our close frame neither; but the sink is still
                // closed. When the other side closed first, the WebSocket layer refuses
                // what was queued, and closing its sink is what sends the answer it
                // owes to that side's close frame (and flushes what it took before).
                tracing::debug!(error = %e, "what was queued cannot be written");
                self.close = None;
            }
        }
        ready!(writer.poll_feed(cx, &mut self.close))?;
        writer.poll_close(cx)
    }
}
