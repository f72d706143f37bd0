//! The state a connection's handles share with its task: the outgoing queue, the
//! pending calls, the incoming calls a cancel can reach, the progress sinks, the close
//! signals, and the few settings the handles read. Everything else the connection's
//! task owns (`driver.rs`). The fields are private: handles and the task go through
//! the methods below, which say which side each is for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

use super::info::ConnectionInfo;
use crate::config::{CancelStyle, PeerConfig, SlowPeer};
use crate::driver::Running;
use crate::error::{CloseReason, Error, Result};
use crate::layer::Stack;
use crate::pending::{Due, Pending, Registered, Swept, LATER_MAX};
use crate::progress::Sinks;
use crate::queue::{OutQueue, Outgoing, TrySendError};
use crate::sync::lock;
use crate::transport::Text;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// The code of a close frame without a status: RFC 6455 7.1.5 has the other side read
/// 1005 for it.
pub(crate) const NO_STATUS: u16 = 1005;

/// A close asked for by this side.
#[derive(Clone, Debug)]
pub(crate) struct CloseRequest {
    pub(crate) code: u16,
    pub(crate) reason: String,
    /// Let calls already running finish (until this instant) before closing; calls
    /// that arrive meanwhile are refused.
    pub(crate) drain_until: Option<tokio::time::Instant>,
    /// Drop what is queued and send the close frame next: the slow-peer close, where
    /// the queue is what the other side does not read, and waiting behind it would
    /// hide the code from a client that reads again.
    pub(crate) discard_queued: bool,
}

impl CloseRequest {
    /// A close with `code` and `reason` once what is queued has gone out. The reason
    /// is cut to 123 bytes (at a character's end): a close frame's payload is at most
    /// 125 (RFC 6455 5.5), and the other side takes a longer one for a protocol error.
    ///
    /// A code a close frame may not carry (RFC 6455 7.4: below 1000, 1004 to 1006,
    /// 1015 to 2999, 5000 and above; also 1014, which tungstenite does not take)
    /// becomes [`NO_STATUS`]: a close frame without a code or reason, which the
    /// other side reads as 1005. Sent as it was, the other side took it for a protocol
    /// error (1002), and a browser fails the connection (1006).
    pub(crate) fn new(code: u16, reason: &str) -> Self {
        if !CloseCode::from(code).is_allowed() {
            tracing::debug!(
                code,
                "a close frame may not carry this code; sent without one"
            );
            return CloseRequest {
                code: NO_STATUS,
                reason: String::new(),
                drain_until: None,
                discard_queued: false,
            };
        }
        let mut end = reason.len().min(123);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        CloseRequest {
            code,
            reason: reason[..end].to_owned(),
            drain_until: None,
            discard_queued: false,
        }
    }
}

/// What the handles read of the connection's settings (the task's own are its own).
#[derive(Clone, Copy, Debug)]
struct Settings {
    call_timeout: Duration,
    slow_peer: SlowPeer,
    /// The cancel sent for a call given up; `None` sends none.
    cancel_style: Option<CancelStyle>,
}

/// The state one connection's handles share with its task.
pub(crate) struct Shared {
    out: OutQueue,
    pending: Pending,
    /// Incoming calls a cancel can still stop.
    running: Running,
    /// Where the progress of our calls that asked for it goes.
    progress: Sinks,
    next_id: AtomicU64,
    /// Empty while open; the cause once closed. A `OnceLock` and a `Notify` rather than
    /// a watch channel, which costs about 350 bytes on every connection; the cause
    /// boxed, as an open connection has none (16 bytes here, not 40).
    closed: OnceLock<Box<CloseReason>>,
    /// Wakes [`closed`](Self::closed) waiters once `closed` is set.
    closed_notify: Notify,
    /// A close asked for by this side (the first one wins). The connection's task is its
    /// only waiter, and checks it on every pass: a `OnceLock` read and an `AtomicWaker`
    /// cost a load each, where polling a `Notify` takes its lock. Boxed, as most
    /// connections never ask (16 bytes here, not 56).
    close_request: OnceLock<Box<CloseRequest>>,
    /// The connection's task, registered on every pass: woken for a close request, and
    /// for a call whose deadline its timer does not cover yet (`pending.rs`).
    task_waker: AtomicWaker,
    /// Run once when the connection ends; `None` once they have run.
    on_close: Mutex<Option<Vec<OnClose>>>,
    cancels_skipped: AtomicU64,
    /// The call layers and the rate limit; `None` (one check per call) without them.
    layers: Option<Box<Stack>>,
    info: ConnectionInfo,
    id: u64,
    settings: Settings,
}

type OnClose = Box<dyn FnOnce() + Send + 'static>;

/// The next connection's id. It counts up from the moment this process made its first
/// connection, in microseconds since the Unix epoch, so a restarted process starts above
/// every id the one before it gave (unless that one made more connections than
/// microseconds passed between the two starts, or the clock went back): an address from
/// before a restart names no one after it. Below 2^53 until the year 2255, so
/// JavaScript reads it exactly.
static NEXT_PEER_ID: LazyLock<AtomicU64> = LazyLock::new(|| AtomicU64::new(first_peer_id()));

fn first_peer_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
        .clamp(1, (1 << 53) - (1 << 40))
}

impl Shared {
    pub(crate) fn new(config: &PeerConfig, info: ConnectionInfo) -> Self {
        Shared {
            out: OutQueue::new(
                config.outgoing_queue,
                config.outgoing_queue_bytes,
                config.ping_interval.is_none(),
            ),
            pending: Pending::new(),
            running: Running::default(),
            progress: Sinks::default(),
            next_id: AtomicU64::new(1),
            closed: OnceLock::new(),
            closed_notify: Notify::new(),
            close_request: OnceLock::new(),
            task_waker: AtomicWaker::new(),
            on_close: Mutex::new(Some(Vec::new())),
            cancels_skipped: AtomicU64::new(0),
            layers: Stack::new(&config.layers, config.rate_limit),
            info,
            id: NEXT_PEER_ID.fetch_add(1, Ordering::Relaxed),
            settings: Settings {
                call_timeout: config.call_timeout,
                slow_peer: config.slow_peer,
                cancel_style: config.cancel_on_drop.then_some(config.cancel_style),
            },
        }
    }

    /// The outgoing queue: handles fill it, the connection's writer empties it.
    pub(crate) fn queue(&self) -> &OutQueue {
        &self.out
    }

    /// This side's calls waiting for their answers.
    pub(crate) fn pending(&self) -> &Pending {
        &self.pending
    }

    /// The other side's calls a cancel can still stop.
    pub(crate) fn running(&self) -> &Running {
        &self.running
    }

    /// Where the progress values of this side's calls go.
    pub(crate) fn progress(&self) -> &Sinks {
        &self.progress
    }

    /// The call layers (and the rate limit) of this connection, if it has any.
    #[inline]
    pub(crate) fn layers(&self) -> Option<&Stack> {
        self.layers.as_deref()
    }

    pub(crate) fn info(&self) -> &ConnectionInfo {
        &self.info
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The timeout of a call that names none.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.settings.call_timeout
    }

    /// A fresh id for an outgoing call.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues the cancel of our call `id`, if this side sends cancels, without waiting:
    /// when the queue is full it is skipped, and counted.
    pub(crate) fn send_cancel(&self, id: u64) {
        let Some(style) = self.settings.cancel_style else {
            return;
        };
        let frame = Outgoing::Frame(Text::from(style.frame(id)));
        match self.out.try_send(frame) {
            Ok(_) => crate::metrics::cancel_sent(true),
            Err(TrySendError::Full(_)) => {
                self.cancels_skipped.fetch_add(1, Ordering::Relaxed);
                crate::metrics::cancel_sent(false);
                tracing::debug!(id, "outgoing queue full; cancel not sent");
            }
            Err(TrySendError::Closed(_)) => {}
        }
    }

    /// How many cancels were skipped for a full queue.
    pub(crate) fn cancels_skipped(&self) -> u64 {
        self.cancels_skipped.load(Ordering::Relaxed)
    }

    /// Queues an already serialized frame without waiting. A full queue means the other
    /// side does not keep up: the [`SlowPeer`] policy applies to it alone.
    pub(crate) fn push(&self, frame: Text) -> bool {
        match self.out.try_send(Outgoing::Frame(frame)) {
            Ok(_) => true,
            Err(TrySendError::Full(_)) => {
                self.fell_behind("outgoing queue full");
                false
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }

    /// Applies the [`SlowPeer`] policy: with `Close`, closes with 1008 and `reason`,
    /// dropping what is queued; with `Drop`, only logs (the caller drops the message).
    /// Returns whether the connection is being closed.
    pub(crate) fn fell_behind(&self, reason: &str) -> bool {
        let remote = self.info.remote_addr;
        match self.settings.slow_peer {
            SlowPeer::Close => {
                tracing::debug!(?remote, reason, "slow peer; closing with 1008");
                let first = self.ask_close(CloseRequest {
                    discard_queued: true,
                    ..CloseRequest::new(1008, reason)
                });
                if first {
                    crate::metrics::slow_peer(true);
                }
                true
            }
            SlowPeer::Drop => {
                crate::metrics::slow_peer(false);
                tracing::debug!(?remote, reason, "slow peer; message dropped");
                false
            }
        }
    }

    /// Whether the connection is ending: its `on_close` callbacks have been taken (they
    /// run before the peer reads as closed), so a registry that adds the peer now must
    /// remove it itself.
    pub(crate) fn is_ending(&self) -> bool {
        lock(&self.on_close).is_none()
    }

    /// Asks the connection's task to close (the first request wins); false if one was
    /// asked for already.
    pub(crate) fn ask_close(&self, request: CloseRequest) -> bool {
        let first = self.close_request.set(Box::new(request)).is_ok();
        if first {
            self.task_waker.wake();
        }
        first
    }

    /// Ready once a close is asked for, with the request. For the connection's task.
    pub(crate) fn poll_close_request(&self, cx: &mut TaskContext<'_>) -> Poll<CloseRequest> {
        if let Some(request) = self.close_request.get() {
            return Poll::Ready(CloseRequest::clone(request));
        }
        // Registered, then checked again: a close asked for in between is not missed.
        self.task_waker.register(cx.waker());
        match self.close_request.get() {
            Some(request) => Poll::Ready(CloseRequest::clone(request)),
            None => Poll::Pending,
        }
    }

    /// Registers the connection's task for its wake-ups, when it does not look at the
    /// close request (while draining).
    pub(crate) fn register_task(&self, cx: &mut TaskContext<'_>) {
        self.task_waker.register(cx.waker());
    }

    /// Wakes the connection's task.
    pub(crate) fn wake_task(&self) {
        self.task_waker.wake();
    }

    /// Registers an outgoing call in the pending map, and wakes the connection's task
    /// when its timer must be set for the call's deadline. A call the task is to stamp
    /// ([`Swept::Later`]) is left to [`try_send_call`](Self::try_send_call): the
    /// request it queues next most often wakes the task anyway.
    pub(crate) fn register(
        &self,
        id: u64,
        due: Due,
        waker: Option<std::task::Waker>,
    ) -> Result<Registered<'_>> {
        let registered = self
            .pending
            .register(id, due, waker, || self.close_reason())?;
        if registered.wake && registered.deadline != Some(Swept::Later) {
            self.task_waker.wake();
        }
        Ok(registered)
    }

    /// How the pending map keeps the deadline of a call with `timeout`: the
    /// connection's sweep for timeouts up to the connection's own (later deadlines
    /// would hold the deque's order back for the calls that use the default), a timer of
    /// the call's own for longer ones. The connection's own timeout is stamped by its
    /// task, with no clock read for the call ([`Due::Later`]).
    pub(crate) fn due(&self, timeout: Duration) -> Due {
        let own = self.settings.call_timeout;
        if timeout == own && own <= LATER_MAX {
            Due::Later
        } else if timeout <= own {
            Due::After(timeout)
        } else {
            Due::Own
        }
    }

    /// Why the connection ended; `Eof` while it has not (for a send that found the
    /// queue closed in between).
    pub(crate) fn close_reason(&self) -> CloseReason {
        self.ended().cloned().unwrap_or(CloseReason::Eof)
    }

    /// Why the connection ended, once it has.
    pub(crate) fn ended(&self) -> Option<&CloseReason> {
        self.closed.get().map(|reason| &**reason)
    }

    /// Resolves when the connection has ended, with the cause.
    pub(crate) async fn closed(&self) -> CloseReason {
        loop {
            // Registered before the check: `notify_waiters` keeps no permit, so a close
            // between the check and the wait would otherwise be missed.
            let mut notified = std::pin::pin!(self.closed_notify.notified());
            notified.as_mut().enable();
            if let Some(reason) = self.ended() {
                return reason.clone();
            }
            notified.await;
        }
    }

    /// Records why the connection ended (the first cause wins), ends every call, then
    /// wakes whoever waits in [`closed`](Self::closed): a call that sees the connection
    /// closed has already ended. For the connection's task.
    pub(crate) fn mark_closed(&self, reason: CloseReason) {
        let _ = self.closed.set(Box::new(reason));
        self.pending.fail_all(&self.close_reason());
        self.closed_notify.notify_waiters();
    }

    /// Runs `callback` once when the connection ends (at once if it already has).
    pub(crate) fn on_close(&self, callback: OnClose) {
        let mut callback = Some(callback);
        if let Some(list) = lock(&self.on_close).as_mut() {
            list.extend(callback.take());
        }
        if let Some(callback) = callback {
            callback();
        }
    }

    /// Runs the `on_close` callbacks, once. For the connection's task. Each is the
    /// application's code (or a registry's): one that panics is logged, and the others
    /// still run, so every registry forgets the peer and the connection still ends.
    pub(crate) fn run_on_close(&self) {
        let callbacks = lock(&self.on_close).take();
        for callback in callbacks.into_iter().flatten() {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(callback)).is_err() {
                tracing::error!("an on_close callback panicked");
            }
        }
    }

    /// Queues an answer made on one of the connection's tasks, waiting for room; it is
    /// dropped if the connection ends first.
    pub(crate) async fn send_answer(&self, answer: String) {
        let _ = self.out.send(Outgoing::Frame(Text::from(answer))).await;
    }

    /// Queues `frame`, waiting for room.
    pub(crate) async fn send(&self, frame: impl Into<Text>) -> Result<()> {
        // Without a deadline it never gives up, so `None` does not come back.
        self.send_by(frame, None)
            .await
            .unwrap_or_else(|| Err(Error::Closed(self.close_reason())))
    }

    /// Queues `frame`, waiting for room until `deadline` (if any): `None` once it
    /// passes. Most sends find room: `try_send` skips the future that waits for it, and
    /// only a full queue makes a timer.
    pub(crate) async fn send_by(
        &self,
        frame: impl Into<Text>,
        deadline: Option<tokio::time::Instant>,
    ) -> Option<Result<()>> {
        match self.try_send(frame.into()) {
            Ok(None) => Some(Ok(())),
            // Boxed, as the rare path: the future of every send (and of every call,
            // which holds one) does not carry its timer.
            Ok(Some(frame)) => Box::pin(self.send_when_room(frame, deadline)).await,
            Err(closed) => Some(Err(closed)),
        }
    }

    /// Queues `frame` if the queue has room now: `Ok(None)` when it is queued, the frame
    /// back when the queue is full, [`Error::Closed`] when the connection has ended.
    /// What every send tries first, with no future of its own: a sender that finds room
    /// (most do) goes no further.
    #[inline]
    pub(crate) fn try_send(&self, frame: Text) -> Result<Option<Outgoing>> {
        match self.out.try_send(Outgoing::Frame(frame)) {
            Ok(_) => Ok(None),
            Err(TrySendError::Full(frame)) => Ok(Some(frame)),
            Err(TrySendError::Closed(_)) => Err(Error::Closed(self.close_reason())),
        }
    }

    /// As [`try_send`](Self::try_send), for a call's request. `stamp`: the call is the
    /// first the connection's task is to stamp ([`Due::Later`]); the task is woken for
    /// it, unless queueing the frame woke it (a task that waits for a writable sink
    /// takes the frame only then, and the call's deadline must not wait for that).
    #[inline]
    pub(crate) fn try_send_call(&self, frame: Text, stamp: bool) -> Result<Option<Outgoing>> {
        let unsent = match self.out.try_send(Outgoing::Frame(frame)) {
            Ok(true) => return Ok(None),
            Ok(false) => None,
            Err(TrySendError::Full(frame)) => Some(frame),
            Err(TrySendError::Closed(_)) => return Err(Error::Closed(self.close_reason())),
        };
        if stamp {
            self.task_waker.wake();
        }
        Ok(unsent)
    }

    /// Queues `frame` (which found the queue full) once there is room, until
    /// `deadline` (if any): `None` once it passes. The rare path: its callers box it.
    pub(crate) async fn send_when_room(
        &self,
        frame: Outgoing,
        deadline: Option<tokio::time::Instant>,
    ) -> Option<Result<()>> {
        let send = self.out.send(frame);
        let sent = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, send).await.ok()?,
            None => send.await,
        };
        Some(sent.map_err(|_| Error::Closed(self.close_reason())))
    }
}
