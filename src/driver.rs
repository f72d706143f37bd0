//! One connection, one task: it reads, writes, keeps the connection alive and closes it.
//!
//! The task polls, in one hand-written pass, every source the connection has: a close
//! asked for by this side, the grace period of a graceful close, the handlers it
//! started, the transport as a stream (reading), the outgoing queue and the transport
//! as a sink (writing), and the keepalive timer. The transport is used whole, as both
//! `Stream` and `Sink`: not split into halves, and no second task writes.
//!
//! Why one task rather than a reader and a writer task:
//! - **Cost per frame.** A frame sent by the connection itself (an answer made on it,
//!   see [`dispatch`]) goes straight into the sink after whatever the queue already
//!   holds, with no queue, no wake-up of another task, and no lock on a split half
//!   (which a split transport takes on every poll of either half). Frames from other
//!   tasks (calls, notifications, broadcasts) still come through the bounded queue, and
//!   cost one wake-up of this task per burst, not per frame.
//! - **Memory per connection.** No writer task (its future and its header), no lock
//!   shared by the halves, no channel to stop the writer.
//! - **One writer still.** Every write goes through this task, so frames go out in the
//!   order they were made, and writes are coalesced: everything queued is fed into the
//!   sink, then it is flushed once, when the queue is momentarily empty (or after
//!   256 frames), so a burst of answers costs one system call, not one each.
//!
//! Neither direction waits on the other, because nothing in the pass *awaits*:
//! - Reading goes on while the sink is full (a peer that does not read must not stop us
//!   reading, or two peers that both write could deadlock): an answer that the sink
//!   cannot take at once goes to the queue, and when the queue is full, to a small task
//!   that waits for room and counts as a running call, so at worst reading pauses for
//!   the in-flight bound, as it would for slow handlers.
//! - Writing goes on while reading is paused by back-pressure (too many calls running,
//!   or the notification handler behind): the queue is drained on every pass.
//! - A full queue is the slow-peer signal: senders wait for room, pushes apply the
//!   [`SlowPeer`](crate::SlowPeer) policy.

mod cancel;
mod dispatch;
mod lanes;
mod ordered;
mod writer;

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use crate::config::PeerConfig;
use crate::error::CloseReason;
use crate::peer::{CloseRequest, Outgoing, Peer, Shared};
use crate::router::Router;
use crate::transport::{Frame, Transport, TransportError};
pub(crate) use cancel::Running;
use dispatch::Dispatch;

/// Starts the connection's task and returns its handle.
pub(crate) fn spawn<T: Transport, S: Send + Sync + 'static>(
    transport: T,
    router: Arc<Router<S>>,
    config: &PeerConfig,
    info: crate::peer::ConnectionInfo,
    hooks: Hooks,
) -> Peer {
    let (out_tx, out_rx) = mpsc::channel(config.outgoing_queue.max(1));
    let peer = Peer {
        shared: Arc::new(Shared::new(out_tx, config, info)),
    };
    if let Some(on_start) = hooks.on_start {
        on_start(&peer);
    }
    let on_end = hooks.on_end;
    let connection = Connection {
        transport,
        out: out_rx,
        dispatch: Dispatch::new(router, peer.clone(), config),
        unflushed: 0,
        write_error: None,
        // Only what the loop needs of the config: its task lives as long as the
        // connection, so every byte here is paid by every idle connection.
        timing: Timing {
            ping_interval: config.ping_interval,
            keepalive_timeout: config.keepalive_timeout,
            close_timeout: config.close_timeout,
        },
    };
    tokio::spawn(async move {
        let peer = connection.run().await;
        if let Some(on_end) = on_end {
            on_end(&peer);
        }
    });
    peer
}

pub(crate) type OnStart = Box<dyn FnOnce(&Peer) + Send + 'static>;

/// What the owner of a connection (the server's registry) runs around its life.
#[derive(Default)]
pub(crate) struct Hooks {
    /// Runs before the connection reads its first frame.
    pub(crate) on_start: Option<OnStart>,
    /// Runs once the connection's tasks are all gone.
    pub(crate) on_end: Option<OnStart>,
}

/// The connection's share of the config.
struct Timing {
    ping_interval: Option<Duration>,
    keepalive_timeout: Duration,
    close_timeout: Duration,
}

struct Connection<T, S> {
    transport: T,
    /// Frames from other tasks: calls, notifications, answers of handlers that run on
    /// their own task, broadcasts.
    out: mpsc::Receiver<Outgoing>,
    dispatch: Dispatch<S>,
    /// Frames fed to the sink since it was last flushed.
    unflushed: usize,
    /// A write that failed while reading; the loop ends with it.
    write_error: Option<TransportError>,
    timing: Timing,
}

/// What ended a pass, when the loop itself has to act on it.
enum Event {
    Close(CloseRequest),
    GraceOver,
    WriteFailed(TransportError),
    /// The end of the stream, an error, or a close frame.
    Frame(Option<Result<Frame, TransportError>>),
    KeepaliveTick(Instant),
    /// State changed (a handler ended, reading paused): look again.
    Again,
}

impl<T: Transport, S: Send + Sync + 'static> Connection<T, S> {
    /// Runs the connection to its end; returns its handle for the `on_end` hook.
    async fn run(mut self) -> Peer {
        let shared = self.dispatch.peer.shared.clone();
        // A close is asked for at most once: once seen, it is not looked at again.
        let mut close_seen = false;
        // Keepalive: a ping every interval; a ping unanswered past the timeout (nothing at
        // all heard since it was sent) means the other side is gone. Checked on one timer
        // of the shorter of the two, so a silence is caught within interval + timeout.
        let timeout = self.timing.keepalive_timeout;
        let interval = self.timing.ping_interval;
        let period = interval.map(|i| i.min(timeout).max(Duration::from_millis(1)));
        let mut keepalive = pin!(tokio::time::sleep(period.unwrap_or(Duration::ZERO)));
        let mut last_ping = Instant::now();
        // When the oldest ping still without an answer was sent.
        let mut unanswered: Option<Instant> = None;
        // A graceful close waiting for running calls, and its grace period.
        let mut draining: Option<(CloseRequest, Pin<Box<Sleep>>)> = None;

        let reason = loop {
            if let Some((request, _)) = &draining {
                if self.dispatch.handlers.is_empty() {
                    break CloseReason::Local {
                        code: request.code,
                        reason: request.reason.clone(),
                    };
                }
            }
            // One pass over every source, in priority order. Written by hand rather than
            // with `select!` so that no future is re-created per pass: the loop makes a
            // pass for nearly every frame, so this is on every call's path.
            let event = std::future::poll_fn(|cx| {
                if !close_seen {
                    if let Poll::Ready(request) = shared.poll_close_request(cx) {
                        close_seen = true;
                        return Poll::Ready(Event::Close(request));
                    }
                }
                if let Some((_, grace)) = &mut draining {
                    if grace.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Event::GraceOver);
                    }
                }
                if self.dispatch.poll_progress(cx).is_ready() {
                    return Poll::Ready(Event::Again);
                }
                // Every frame already there is handled in this pass.
                while self.dispatch.reading() {
                    match Pin::new(&mut self.transport).poll_next(cx) {
                        Poll::Pending => break,
                        Poll::Ready(Some(Ok(frame))) => {
                            unanswered = None;
                            match frame {
                                Frame::Text(text) => {
                                    if let Some(answer) = self.dispatch.on_text(text) {
                                        self.answer(cx, answer);
                                    }
                                }
                                Frame::Binary(_) => {
                                    tracing::debug!("binary frame ignored: JSON-RPC is text");
                                }
                                Frame::Ping(_) | Frame::Pong(_) => {}
                                Frame::Close(frame) => {
                                    return Poll::Ready(Event::Frame(Some(Ok(Frame::Close(
                                        frame,
                                    )))));
                                }
                            }
                            if let Some(e) = self.write_error.take() {
                                return Poll::Ready(Event::WriteFailed(e));
                            }
                        }
                        Poll::Ready(other) => return Poll::Ready(Event::Frame(other)),
                    }
                    if !self.dispatch.reading() {
                        // Reading paused: the waits that resume it are set up next pass.
                        return Poll::Ready(Event::Again);
                    }
                }
                // After reading, so the answers to everything just read go out in one
                // flush.
                if let Err(e) = self.poll_write(cx) {
                    return Poll::Ready(Event::WriteFailed(e));
                }
                if period.is_some() && keepalive.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Event::KeepaliveTick(keepalive.deadline()));
                }
                Poll::Pending
            })
            .await;
            match event {
                Event::Again => {}
                Event::Close(request) => match request.drain_until {
                    Some(until) if !self.dispatch.handlers.is_empty() => {
                        self.dispatch.draining = true;
                        draining = Some((request, Box::pin(tokio::time::sleep_until(until))));
                    }
                    _ => {
                        break CloseReason::Local {
                            code: request.code,
                            reason: request.reason,
                        }
                    }
                },
                Event::GraceOver => {
                    if let Some((request, _)) = draining.take() {
                        tracing::debug!("grace period over; stopping the calls still running");
                        break CloseReason::Local {
                            code: request.code,
                            reason: request.reason,
                        };
                    }
                }
                Event::WriteFailed(e) => {
                    // `end` makes it the cause, and knows not to write any more.
                    self.write_error = Some(e);
                    break CloseReason::Eof;
                }
                Event::KeepaliveTick(now) => {
                    let (Some(period), Some(interval)) = (period, interval) else {
                        continue;
                    };
                    keepalive.as_mut().reset(now + period);
                    // Silence only counts while we read: paused reading is our own doing.
                    if !self.dispatch.reading() {
                        unanswered = None;
                        continue;
                    }
                    if unanswered.is_some_and(|sent| now - sent >= timeout) {
                        break CloseReason::KeepaliveTimeout;
                    }
                    if unanswered.is_none() && now - last_ping >= interval {
                        // A full queue means the link is busy: the silence is timed anyway.
                        let _ = shared.out.try_send(Outgoing::Ping);
                        last_ping = now;
                        unanswered = Some(now);
                    }
                }
                Event::Frame(frame) => match frame {
                    Some(Ok(Frame::Close(frame))) => {
                        let (code, reason) = frame.unwrap_or((1005, String::new()));
                        break CloseReason::Remote { code, reason };
                    }
                    Some(Ok(_)) => {}
                    Some(Err(TransportError::MessageTooBig { size, max })) => {
                        tracing::debug!(size, max, "message too big; closing with 1009");
                        break CloseReason::Local {
                            code: 1009,
                            reason: format!("message exceeds {max} bytes"),
                        };
                    }
                    Some(Err(TransportError::Other(e))) => {
                        break CloseReason::Transport(Arc::from(e))
                    }
                    None => break CloseReason::Eof,
                },
            }
        };
        self.end(reason).await;
        self.dispatch.peer
    }

    /// Tears the connection down once the loop has ended with `reason`.
    async fn end(&mut self, reason: CloseReason) {
        let write_failed = self.write_error.is_some();
        let reason = match self.write_error.take() {
            Some(e) => CloseReason::Transport(Arc::from(
                Box::<dyn std::error::Error + Send + Sync>::from(e),
            )),
            None => reason,
        };
        tracing::debug!(%reason, "connection closing");
        let shared = self.dispatch.peer.shared.clone();
        // Registries forget the peer first, so whoever sees it closed (below) also
        // sees it gone from them. Then calls waiting on us end, and handlers serving
        // the other side stop.
        shared.run_on_close();
        shared.mark_closed(reason.clone());
        self.dispatch.stop();
        // What is queued now still goes out; nothing more is taken.
        self.out.close();

        let mut close = match &reason {
            CloseReason::Local { code, reason } => {
                Some(Frame::Close(Some((*code, reason.clone()))))
            }
            _ => None,
        };
        // After our close frame, read until the other side answers it, so the
        // connection ends with a complete closing handshake.
        let mut echoed = close.is_none();
        let mut written = write_failed;
        let mut queue_done = false;
        let deadline = Instant::now() + self.timing.close_timeout;
        let _ = tokio::time::timeout_at(
            deadline,
            std::future::poll_fn(|cx| {
                if !written {
                    if let Poll::Ready(result) = self.poll_finish(cx, &mut close, &mut queue_done) {
                        if let Err(e) = result {
                            tracing::debug!(error = %e, "closing the transport failed");
                        }
                        written = true;
                    }
                }
                while !echoed {
                    match Pin::new(&mut self.transport).poll_next(cx) {
                        Poll::Pending => break,
                        Poll::Ready(Some(Ok(Frame::Close(_)))) | Poll::Ready(None) => {
                            echoed = true;
                        }
                        Poll::Ready(Some(Err(_))) => echoed = true,
                        Poll::Ready(Some(Ok(_))) => {}
                    }
                }
                if written && echoed {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }),
        )
        .await;
        // Handler tasks were aborted above; wait until they are gone, so nothing of
        // this connection outlives it.
        while self.dispatch.handlers.join_next().await.is_some() {}
    }
}
