//! One connection, one task: it reads, writes, keeps the connection alive and closes it.
//!
//! The task polls, in one hand-written pass, every source the connection has: a close
//! asked for by this side, the grace period of a graceful close, the handlers it
//! started, the transport as a stream (reading), the outgoing queue and the transport
//! as a sink (writing), the timer of this side's call deadlines and the keepalive
//! timer. The transport is used whole, as both `Stream` and `Sink`: not split into
//! halves, and no second task writes.
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
//!   cannot take at once goes to the queue, and when the queue is full, waits for room
//!   in the writer (`writer.rs`) and counts as a running call, so at worst reading
//!   pauses for the in-flight bound (or the queue's byte bound), as it would for slow
//!   handlers.
//! - Writing goes on while reading is paused by back-pressure (too many calls running,
//!   or the notification handler behind): the queue is drained on every pass.
//! - A full queue is the slow-peer signal: senders wait for room, pushes apply the
//!   [`SlowPeer`](crate::SlowPeer) policy.

mod ahead;
mod cancel;
mod closing;
mod deadlines;
mod dispatch;
mod in_flight;
mod keepalive;
mod lanes;
mod ordered;
mod run;
mod writer;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::config::PeerConfig;
use crate::error::CloseReason;
use crate::peer::{CloseRequest, Peer, Shared};
use crate::router::Router;
use crate::transport::{Frame, Transport, TransportError};
use ahead::Ahead;
pub(crate) use cancel::Running;
use closing::Closing;
use deadlines::CallTimer;
use dispatch::Dispatch;
use dispatch::Waits;
use keepalive::{Keepalive, Tick};
use writer::Writer;

/// Starts the connection's task and returns its handle.
pub(crate) fn spawn<T: Transport, S: Send + Sync + 'static>(
    transport: T,
    router: Arc<Router<S>>,
    config: &PeerConfig,
    info: crate::peer::ConnectionInfo,
    hooks: Hooks,
) -> Peer {
    let peer = prepare(config, info, hooks.on_start);
    run(peer, transport, router, config, hooks.on_end)
}

/// Makes a connection's handle and runs `on_start` with it, before the connection has
/// a transport: a server announces a peer this way before it answers the handshake, so
/// that a client whose connect has resolved is among the peers a broadcast reaches.
/// Frames sent meanwhile wait in the outgoing queue; [`run()`] starts the connection.
pub(crate) fn prepare(
    config: &PeerConfig,
    info: crate::peer::ConnectionInfo,
    on_start: Option<ConnectionHook>,
) -> Peer {
    let peer = Peer::handle(Arc::new(Shared::new(config, info)));
    if let Some(on_start) = on_start {
        on_start(&peer);
    }
    peer
}

/// Ends a connection made by [`prepare`] that will never [`run()`]: its close callbacks
/// run, its handles see it closed (the cause says why), and its queue is closed and
/// emptied.
pub(crate) fn end_unstarted(peer: &Peer) {
    let shared = &peer.shared;
    shared.run_on_close();
    shared.mark_closed(CloseReason::Transport(Arc::new(std::io::Error::other(
        "the connection was dropped before it started: its runtime shut down",
    ))));
    shared.queue().close();
    shared.queue().discard(&mut Default::default());
}

/// Starts the task of a connection made by [`prepare`], on `transport`.
pub(crate) fn run<T: Transport, S: Send + Sync + 'static>(
    peer: Peer,
    transport: T,
    router: Arc<Router<S>>,
    config: &PeerConfig,
    on_end: Option<ConnectionHook>,
) -> Peer {
    let connection = Connection::new(transport, router, &peer, config, on_end);
    let open = crate::metrics::connection_opened();
    // Everything the connection logs, and the handlers it runs, is inside this span.
    let span = tracing::info_span!(
        "connection",
        peer = peer.id(),
        remote = ?peer.info().remote_addr,
        path = peer.info().path.as_deref(),
    );
    tokio::spawn(tracing::Instrument::instrument(
        task(connection, open),
        span,
    ));
    peer
}

/// The connection's task: its loop, then the `on_end` hook.
// Not an `async fn`: its arguments would be moved into the future's locals, one more
// copy of the connection in every idle task (the unit test below measures it).
#[allow(clippy::manual_async_fn)]
fn task<T: Transport, S: Send + Sync + 'static>(
    mut connection: Connection<T, S>,
    open: crate::metrics::OpenConnection,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    async move {
        // The loop borrows the connection. Moved into the loop's own future, it would
        // also keep its room here (what an `async` block captures keeps its room for
        // the block's whole life).
        // The application's code runs on this task (a handler's first poll, the call
        // layers, a lane's key): each such place answers its panic with -32603. Should
        // one still get through, the connection ends here as any other does (its
        // registries forget it, its waiting calls end, `on_end` runs), rather than
        // leave a peer that nothing will ever close.
        let run = AssertUnwindSafe(connection.run()).catch_unwind().await;
        let peer = run.unwrap_or_else(|_| connection.panicked());
        // Counted closed before `on_end` runs. Dropped with the task if it never gets
        // here (its runtime shut down), counted closed all the same, and the
        // connection runs `on_end` as it is dropped.
        drop(open);
        connection.finish(&peer);
    }
}

/// A hook run once at the start or the end of a connection, with its handle.
pub(crate) type ConnectionHook = Box<dyn FnOnce(&Peer) + Send + 'static>;

/// What the owner of a connection (the server's registry) runs around its life.
#[derive(Default)]
pub(crate) struct Hooks {
    /// Runs before the connection reads its first frame.
    pub(crate) on_start: Option<ConnectionHook>,
    /// Runs once the connection's tasks are all gone.
    pub(crate) on_end: Option<ConnectionHook>,
}

/// The connection's task's state: each piece has one owner. Only what the loop needs
/// of the config is here: the task lives as long as the connection, so every byte is
/// paid by every idle connection.
struct Connection<T, S> {
    /// The transport, and everything on its way into it.
    writer: Writer<T>,
    /// What each incoming frame starts, and what runs.
    dispatch: Dispatch<S>,
    /// The task's side of the state its handles share: close requests, wake-ups, the
    /// pending calls' deadlines, the end.
    shared: Arc<Shared>,
    /// Messages read ahead while reading is paused, waiting for their turn.
    ahead: Ahead,
    /// `None` when no pings are sent.
    keepalive: Option<Keepalive>,
    call_timer: CallTimer,
    /// `PeerConfig::close_timeout` in whole milliseconds, rounded up (past
    /// `u32::MAX`, 49 days, that): 8 bytes fewer than a `Duration` in every
    /// connection's task, which sits at the end of one of tokio's 128-byte steps (the
    /// unit test below).
    close_timeout_ms: u32,
    /// The owner's hook, run once the connection is over; taken when it runs (see
    /// [`finish`](Self::finish)).
    on_end: Option<ConnectionHook>,
}

/// Dropped without its end (the task was dropped: its runtime shut down under it), the
/// connection still ends for its handles and its owner: waiting calls end with
/// [`Error::Closed`](crate::Error::Closed), `is_closed` says so, its topics forget it
/// (its `on_close` callbacks run), and it [finishes](Self::finish) (the server's registry
/// forgets it, and its `on_disconnect` hooks run). Otherwise a `Peer` kept past its
/// runtime would look open, a call on it would wait for ever (its timer was this
/// task's), and a server's handle kept past the runtime would go on counting it and
/// wait for it on shutdown.
/// (Its handlers' tasks and its transport go with the runtime.)
impl<T, S> Drop for Connection<T, S> {
    fn drop(&mut self) {
        if self.shared.ended().is_none() {
            self.end_where_it_stands(CloseReason::Transport(Arc::new(std::io::Error::other(
                "the connection's task was dropped: its runtime shut down",
            ))));
        }
        self.finish(&Peer::handle(self.shared.clone()));
    }
}

impl<T, S> Connection<T, S> {
    /// Runs the owner's `on_end` hook once the connection is over. Once: after the
    /// connection's loop, or, when its task is dropped before (its runtime shut down
    /// under it), as the connection is dropped.
    fn finish(&mut self, peer: &Peer) {
        if let Some(on_end) = self.on_end.take() {
            on_end(peer);
        }
    }

    /// Ends the connection without its closing steps, for `reason`: its calls' timer
    /// stops, the close callbacks run, its handles see it closed (waiting calls end),
    /// and its queue, which the handles share, is closed and emptied (nothing will
    /// write it: senders waiting for room, or coming later, are told the connection
    /// has ended). Its transport goes with its task.
    fn end_where_it_stands(&mut self, reason: CloseReason) {
        self.call_timer.stop();
        self.shared.run_on_close();
        self.shared.mark_closed(reason);
        self.writer.close_queue(true);
    }
}

/// What ended a pass, when the loop itself has to act on it.
enum Event {
    /// This side asked to close (at once, or after the running calls).
    Close(CloseRequest),
    /// The connection is over: the other side closed, the transport ended or failed, a
    /// write failed, or a graceful close is done.
    End(CloseReason),
    /// The keepalive timer fired.
    KeepaliveTick(Instant),
    /// State changed (a handler ended, reading paused): look again.
    Again,
}

impl<T: Transport, S: Send + Sync + 'static> Connection<T, S> {
    fn new(
        transport: T,
        router: Arc<Router<S>>,
        peer: &Peer,
        config: &PeerConfig,
        on_end: Option<ConnectionHook>,
    ) -> Self {
        Connection {
            writer: Writer::new(transport, peer.shared.clone()),
            dispatch: Dispatch::new(router, peer.clone(), config),
            shared: peer.shared.clone(),
            ahead: Ahead::new(config),
            keepalive: Keepalive::new(config.ping_interval, config.keepalive_timeout),
            call_timer: CallTimer::default(),
            close_timeout_ms: u32::try_from(config.close_timeout.as_nanos().div_ceil(1_000_000))
                .unwrap_or(u32::MAX),
            on_end,
        }
    }

    /// Runs the connection to its end; returns its handle for the `on_end` hook.
    async fn run(&mut self) -> Peer {
        let (reason, discard_queued) = loop {
            let event = std::future::poll_fn(|cx| self.poll_event(cx)).await;
            match event {
                Event::Again => {}
                Event::End(reason) => break (reason, false),
                Event::Close(request) => {
                    let discard = request.discard_queued;
                    if let Some(reason) = self.dispatch.close(request) {
                        break (reason, discard);
                    }
                }
                Event::KeepaliveTick(now) => {
                    // Silence is timed unless reading is paused by this side's own
                    // handlers: paused by answers the other side does not read, it is
                    // the other side that is silent (a sign of life then is that it
                    // takes frames again; see `poll_event`).
                    let reading = self.may_read() || self.writer.waiting() > 0;
                    let Some(keepalive) = &mut self.keepalive else {
                        continue;
                    };
                    // A burst's room in the outgoing queue goes back once it is over.
                    self.writer.give_back_room();
                    match keepalive.tick(now, reading) {
                        Tick::Wait => {}
                        // A full queue takes no ping: the silence is timed anyway, and
                        // the other side taking frames from it counts (`poll_event`).
                        Tick::Ping => self.writer.ping(),
                        Tick::TimedOut => break (CloseReason::KeepaliveTimeout, false),
                    }
                }
            }
        };
        // Boxed: the closing handshake's state is large and needed once, at the end; in
        // place, every idle connection's task would carry room for it.
        Box::pin(self.end(reason, discard_queued)).await;
        Peer::handle(self.shared.clone())
    }

    /// After a panic got out of [`run`](Self::run): ends the connection where it
    /// stands, with 1011, and stops its handlers' tasks.
    fn panicked(&mut self) -> Peer {
        tracing::error!("the connection's task panicked; the connection ends (1011)");
        self.end_where_it_stands(CloseReason::Local {
            code: 1011,
            reason: "the connection's task panicked".into(),
        });
        self.dispatch.stop();
        Peer::handle(self.shared.clone())
    }

    /// Whether to read more: not while too many calls run (the answers waiting for room
    /// count as running), those answers hold the byte bound, or notifications wait.
    fn may_read(&self) -> bool {
        !self.writer.waiting_full() && self.dispatch.may_read(self.writer.waiting())
    }

    /// One pass over every source, in priority order. Written by hand rather than with
    /// `select!` so that no future is re-created per pass: the loop makes a pass for
    /// nearly every frame, so this is on every call's path.
    fn poll_event(&mut self, cx: &mut TaskContext<'_>) -> Poll<Event> {
        // A close is asked for at most once: once draining, it is not looked at again.
        // Either way the task's waker is registered, for a call's deadline too.
        if !self.dispatch.draining() {
            if let Poll::Ready(request) = self.shared.poll_close_request(cx) {
                return Poll::Ready(Event::Close(request));
            }
        } else {
            self.shared.register_task(cx);
        }
        if let Poll::Ready(reason) = self.dispatch.poll_drained(cx) {
            return Poll::Ready(Event::End(reason));
        }
        if self.dispatch.poll_progress(cx).is_ready() {
            return Poll::Ready(Event::Again);
        }
        if let Poll::Ready(event) = self.poll_read(cx) {
            return Poll::Ready(event);
        }
        // Reading is held up by answers waiting for room, which only writing frees.
        let held_up = self.writer.waiting() > 0 && !self.may_read();
        // A ping waits for its answer with the outgoing queue full: the ping did not go
        // out (a full queue takes none), or waits behind frames the other side reads
        // slower than this side makes them. A side that only reads (a browser) has
        // nothing else to answer with. Looked at only while a ping waits: it locks.
        let backed_up = held_up
            || (self.keepalive.as_ref().is_some_and(Keepalive::awaiting)
                && self.writer.queue_full());
        // After reading, so the answers to everything just read go out in one flush.
        let fed = self.writer.poll_write(cx);
        if backed_up && fed {
            // Held up by a side that does not read what it asked for, this side cannot
            // read its pongs (they wait behind the calls not read yet); backed up, the
            // ping waits behind the queue. Either way, that the other side takes
            // frames again is its sign of life.
            if let Some(keepalive) = &mut self.keepalive {
                keepalive.heard();
            }
        }
        if self.writer.failed() {
            return Poll::Ready(Event::End(CloseReason::Eof));
        }
        // Writing made room for the answers that held reading up.
        if held_up && self.may_read() {
            return Poll::Ready(Event::Again);
        }
        if !self.may_read() {
            if let Poll::Ready(reason) = self.poll_ahead(cx) {
                return Poll::Ready(Event::End(reason));
            }
        }
        let later = self.shared.call_timeout();
        self.call_timer.poll(cx, self.shared.pending(), later);
        if let Some(keepalive) = &mut self.keepalive {
            if let Poll::Ready(now) = keepalive.poll_tick(cx) {
                return Poll::Ready(Event::KeepaliveTick(now));
            }
        }
        Poll::Pending
    }

    /// Reads and acts on every frame already there, while reading may go on. Ready
    /// when the loop has to act.
    #[inline]
    fn poll_read(&mut self, cx: &mut TaskContext<'_>) -> Poll<Event> {
        while self.may_read() {
            let (frame, waited) = match self.ahead.next() {
                Some(text) => (Frame::Text(text), true),
                None => match self.poll_frame(cx) {
                    Poll::Pending => break,
                    Poll::Ready(Ok(frame)) => (frame, false),
                    Poll::Ready(Err(reason)) => return Poll::Ready(Event::End(reason)),
                },
            };
            // Text, the frame of every message, is handled here; the rest below.
            match frame {
                Frame::Text(text) => {
                    if let Some(answer) = self.dispatch.on_text(text) {
                        self.writer.answer(cx, answer);
                    }
                    while let Some(answer) = self.dispatch.take_loose() {
                        self.writer.answer(cx, answer);
                    }
                    // Cancels read while a batch waited, for its calls, now started.
                    while let Some((id, style)) = waited.then(|| self.ahead.next_cancel()).flatten()
                    {
                        if let Some(answer) = self.dispatch.cancel_started(&id, style) {
                            self.writer.answer(cx, answer);
                        }
                    }
                }
                other => {
                    if let Some(reason) = on_control(other) {
                        return Poll::Ready(Event::End(reason));
                    }
                }
            }
            if self.writer.failed() {
                return Poll::Ready(Event::End(CloseReason::Eof));
            }
            if !self.may_read() {
                // Reading paused: the waits that resume it are set up next pass.
                return Poll::Ready(Event::Again);
            }
        }
        Poll::Pending
    }

    /// The next frame from the transport, or the cause of the end when there is none.
    /// Any frame counts as a sign of life.
    #[inline]
    fn poll_frame(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<Frame, CloseReason>> {
        let frame = match std::task::ready!(self.writer.poll_read(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Poll::Ready(Err(failed(e))),
            None => return Poll::Ready(Err(CloseReason::Eof)),
        };
        if let Some(keepalive) = &mut self.keepalive {
            keepalive.heard();
        }
        Poll::Ready(Ok(frame))
    }

    /// While reading is paused (too many calls running, notifications behind, answers
    /// waiting for room): reads on, keeping the messages that would start something in
    /// `ahead` for their turn, as long as it has room (`read_ahead` messages,
    /// `max_message_size` bytes). Answers to this side's calls start nothing and are
    /// routed at once: a running handler may be waiting for one (it called the other
    /// side back), and the pause would last until its call timed out. So are cancels:
    /// the call a cancel stops may be what holds reading up, and one that never ends
    /// on its own would hold it for good; a cancel for a call waiting in `ahead` takes
    /// it out. The end of the connection right behind what was read (a close frame,
    /// the transport's end or failure) is acted on now, not once reading resumes,
    /// which it never does if the other side does not read its answers (or this side's
    /// handlers wait on that side). What waits in `ahead` is dropped if the connection
    /// ends first: nothing could be answered after the other side's close. Pings,
    /// pongs and binary frames are not kept. Ready with the cause of the end.
    fn poll_ahead(&mut self, cx: &mut TaskContext<'_>) -> Poll<CloseReason> {
        while self.ahead.has_room() {
            match std::task::ready!(self.poll_frame(cx)) {
                Err(reason) => return Poll::Ready(reason),
                Ok(Frame::Text(text)) => match self.dispatch.starts_nothing(text) {
                    Ok(Some(answer)) => self.writer.answer(cx, answer),
                    Ok(None) => {}
                    Err(Waits::Turn(text)) => self.ahead.push(text),
                    Err(Waits::Cancel(id, style)) => {
                        let max_batch = self.dispatch.max_batch();
                        if let Some(answer) = self.ahead.cancel(&id, style, max_batch) {
                            self.writer.answer(cx, answer);
                            // Written on the next pass: nothing else wakes the task
                            // (no handler ended).
                            cx.waker().wake_by_ref();
                        }
                    }
                },
                Ok(frame) => {
                    if let Some(reason) = on_control(frame) {
                        return Poll::Ready(reason);
                    }
                }
            }
        }
        Poll::Pending
    }

    /// Tears the connection down once the loop has ended with `reason`; `discard_queued`
    /// for the slow-peer close, whose close frame goes ahead of what is queued.
    async fn end(&mut self, reason: CloseReason, discard_queued: bool) {
        let write_failed = self.writer.failed();
        let reason = match self.writer.take_error() {
            Some(e) => CloseReason::Transport(Arc::from(
                Box::<dyn std::error::Error + Send + Sync>::from(e),
            )),
            None => reason,
        };
        tracing::debug!(%reason, "connection closing");
        self.call_timer.stop();
        // Registries forget the peer first, so whoever sees it closed (below) also
        // sees it gone from them. Then calls waiting on us end, and handlers serving
        // the other side stop.
        self.shared.run_on_close();
        self.shared.mark_closed(reason.clone());
        self.dispatch.stop();
        // What is queued now still goes out; nothing more is taken. Unless the queue
        // is what the other side does not read: then the close frame goes next, so a
        // client that reads again sees its code, not a connection cut mid-stream.
        self.writer.close_queue(discard_queued);
        let mut closing = Closing::new(&reason, write_failed);
        let deadline = crate::deadline::after(Duration::from_millis(self.close_timeout_ms.into()));
        let handshake = std::future::poll_fn(|cx| closing.poll(cx, &mut self.writer));
        let _ = tokio::time::timeout_at(deadline, handshake).await;
        // What the close timeout left queued will never go out: its memory (and its
        // bytes in the metrics) goes now, not when the last handle does.
        self.writer.close_queue(true);
        // Handler tasks were aborted above; wait until they are gone, so nothing of
        // this connection outlives it.
        self.dispatch.stopped().await;
    }
}

/// Acts on a frame that is not text; returns the cause of the end when it ends the
/// connection (a close frame).
fn on_control(frame: Frame) -> Option<CloseReason> {
    match frame {
        Frame::Close(frame) => {
            let (code, reason) = frame.unwrap_or((1005, String::new()));
            Some(CloseReason::Remote { code, reason })
        }
        Frame::Binary(_) => {
            tracing::debug!("binary frame ignored: JSON-RPC is text");
            None
        }
        Frame::Text(_) | Frame::Ping(_) | Frame::Pong(_) => None,
    }
}

/// The cause of an end the transport reported.
fn failed(e: TransportError) -> CloseReason {
    match e {
        TransportError::MessageTooBig { size, max } => {
            tracing::debug!(size, max, "message too big; closing with 1009");
            CloseReason::Local {
                code: 1009,
                reason: format!("message exceeds {max} bytes"),
            }
        }
        TransportError::Protocol { code, reason } => {
            tracing::debug!(code, %reason, "protocol violation; closing");
            // A close frame's reason must fit in 123 bytes.
            let reason = if code == 1007 {
                "invalid UTF-8"
            } else {
                "protocol error"
            };
            CloseReason::Local {
                code,
                reason: reason.to_owned(),
            }
        }
        TransportError::Other(e) => CloseReason::Transport(Arc::from(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Caller;

    /// Every idle connection pays for its task's future: it must hold the connection
    /// once, and the closing handshake's state (boxed) not at all.
    #[tokio::test]
    async fn the_task_holds_one_connection_and_little_else() {
        let (end, _other) = crate::transport::pair();
        let config = PeerConfig::default();
        let peer = Peer::handle(Arc::new(Shared::new(&config, Default::default())));
        let router = Arc::new(Router::<()>::new());
        let connection = Connection::new(end, router, &peer, &config, None);
        let one = std::mem::size_of_val(&connection);
        let task = task(connection, crate::metrics::OpenConnection::uncounted());
        let size = std::mem::size_of_val(&task);
        assert!(
            size <= one + 64,
            "the task's future is {size} bytes for a connection of {one}"
        );
    }

    /// A server connection's task, its span included, fits in 768 bytes beside
    /// tokio's own part of a task (a header and a trailer, 96 bytes in tokio 1.54, and
    /// the tag of the stage the future is kept in). tokio aligns a task to 128 bytes,
    /// so a word past that costs every connection 128 bytes: the `rpc` bench's (f)
    /// went from 4.93 to 5.09 KiB an idle connection when the read-ahead queue took 16
    /// bytes more inline (stop 51). What is empty while a connection is idle is boxed
    /// on first use; a field that must sit here raises the bound knowingly.
    #[test]
    fn a_server_connections_task_fits_in_768_bytes_with_tokios_part() {
        type Ws = crate::transport::WebSocket<crate::transport::ReadAhead<tokio::net::TcpStream>>;
        fn output_size<A, B, R>(_: fn(A, B) -> R) -> usize {
            std::mem::size_of::<R>()
        }
        let spawned = output_size(task::<Ws, ()>) + std::mem::size_of::<tracing::Span>();
        assert!(
            spawned <= 768 - 96 - 8,
            "a connection's task is {spawned} bytes with its span: over 664, tokio \
             allocates 896 or more for it"
        );
    }

    use futures_util::{SinkExt, StreamExt};
    use std::time::Duration;

    use crate::error::Error;
    use crate::transport::Memory;

    /// The other end of a peer: reads every frame, answers the calls `answer` picks,
    /// and counts the cancels it sees.
    fn other_end(
        mut end: Memory,
        answer: impl Fn(&str) -> bool + Send + 'static,
    ) -> tokio::task::JoinHandle<usize> {
        tokio::spawn(async move {
            let mut cancels = 0;
            while let Some(Ok(frame)) = end.next().await {
                let Frame::Text(text) = frame else { continue };
                let value: serde_json::Value = serde_json::from_str(&text).unwrap();
                let method = value["method"].as_str().unwrap_or_default();
                if method == crate::cancel::LSP_METHOD {
                    cancels += 1;
                } else if answer(method) {
                    let reply =
                        serde_json::json!({"jsonrpc": "2.0", "result": 1, "id": value["id"]});
                    if end
                        .send(Frame::Text(reply.to_string().into()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
            cancels
        })
    }

    /// Calls with the connection's timeout that are never answered all end with
    /// `Error::Timeout` exactly at their deadline, send their cancels, and leave the
    /// pending map and the deadline deque empty.
    #[tokio::test(start_paused = true)]
    async fn unanswered_calls_time_out_on_the_connections_timer_exactly_on_time() {
        let (end, other) = crate::transport::pair();
        let config = PeerConfig::default();
        let peer = Peer::start(end, Router::new(), &config);
        let cancels = other_end(other, |_| false);
        let start = Instant::now();
        let mut calls = Vec::new();
        for wave in 0..10u64 {
            for _ in 0..100 {
                let peer = peer.clone();
                calls.push(tokio::spawn(async move {
                    let began = Instant::now();
                    let outcome = peer.call::<u64>("never", ()).await;
                    (began, Instant::now(), outcome)
                }));
            }
            tokio::time::sleep(Duration::from_millis(1500)).await;
            assert_eq!(
                Instant::now(),
                start + Duration::from_millis(1500 * (wave + 1))
            );
        }
        for call in calls {
            let (began, ended, outcome) = call.await.unwrap();
            assert_eq!(ended - began, config.call_timeout);
            match outcome {
                Err(Error::Timeout { method, after }) => {
                    assert_eq!(method.as_deref(), Some("never"));
                    assert_eq!(after, config.call_timeout);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(peer.pending_calls(), 0);
        assert_eq!(peer.shared.pending().deadlines_len(), 0);
        // Every call given up told the other side.
        peer.close().await;
        assert_eq!(cancels.await.unwrap(), 1000);
    }

    /// One call that hangs while 10,000 others are answered: the deque stays bounded,
    /// and the hanging call still times out on time.
    #[tokio::test(start_paused = true)]
    async fn one_hanging_call_does_not_make_the_deadline_deque_grow() {
        let (end, other) = crate::transport::pair();
        let config = PeerConfig::default();
        let peer = Peer::start(end, Router::new(), &config);
        let _other = other_end(other, |method| method != "hang");
        let start = Instant::now();
        let hanging = tokio::spawn({
            let peer = peer.clone();
            async move { peer.call::<u64>("hang", ()).await }
        });
        tokio::task::yield_now().await;
        let mut most = 0;
        for _ in 0..(10_000 / 50) {
            let burst: Vec<_> = (0..50)
                .map(|_| {
                    let peer = peer.clone();
                    tokio::spawn(async move { peer.call::<u64>("add", ()).await })
                })
                .collect();
            for call in burst {
                assert_eq!(call.await.unwrap().unwrap(), 1);
            }
            most = most.max(peer.shared.pending().deadlines_len());
        }
        assert!(most <= 2 * 51 + 32, "the deque held {most} entries");
        assert_eq!(peer.pending_calls(), 1);
        assert!(Instant::now() < start + config.call_timeout);
        let outcome = hanging.await.unwrap();
        assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
        assert_eq!(Instant::now(), start + config.call_timeout);
        assert_eq!(peer.pending_calls(), 0);
        assert_eq!(peer.shared.pending().deadlines_len(), 0);
    }

    /// A call made while the connection's task waits for a writable sink (not for
    /// frames) times out exactly on time, with no keepalive to wake the task: the
    /// request it queues wakes no one, so the call wakes the task to stamp its
    /// deadline (`pending.rs`).
    #[tokio::test(start_paused = true)]
    async fn a_call_made_while_the_sink_is_full_times_out_on_time() {
        let (end, _other) = crate::transport::pair_with_capacity(1);
        let config = PeerConfig::default().ping_interval(None);
        let peer = Peer::start(end, Router::new(), &config);
        for _ in 0..3 {
            peer.notify("fill", ()).await.unwrap();
        }
        // The task writes one, then waits for the sink with the rest taken out.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let began = Instant::now();
        let call = peer.call::<u64>("blocked", ());
        let outcome = tokio::time::timeout(2 * config.call_timeout, call).await;
        assert!(
            matches!(outcome, Ok(Err(Error::Timeout { .. }))),
            "{outcome:?}"
        );
        assert_eq!(Instant::now() - began, config.call_timeout);
        assert_eq!(peer.pending_calls(), 0);
    }

    /// A call still times out while the connection cannot write (the other side reads
    /// nothing, the sink and then the queue are full) and while it drains.
    #[tokio::test(start_paused = true)]
    async fn calls_time_out_while_writing_is_blocked() {
        let (end, _other) = crate::transport::pair_with_capacity(1);
        let config = PeerConfig::default().outgoing_queue(4);
        let peer = Peer::start(end, Router::new(), &config);
        let start = Instant::now();
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let peer = peer.clone();
                tokio::spawn(async move { peer.call::<u64>("blocked", ()).await })
            })
            .collect();
        for call in calls {
            let outcome = call.await.unwrap();
            assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
        }
        assert_eq!(Instant::now(), start + config.call_timeout);
        assert_eq!(peer.pending_calls(), 0);
        assert_eq!(peer.shared.pending().deadlines_len(), 0);
    }
}
