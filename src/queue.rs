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
//! instructions a frame (callgrind, the rpc bench's (d)). One lock per frame going in;
//! the connection's task takes frames out in batches ([`Batch`], up to [`BATCH`] frames
//! in one lock) and feeds them to the sink without it. Each frame of a batch counts
//! against the bounds until the task has fed it and comes back under the lock: for the
//! next batch, or when the sink stops taking frames. So wherever the task stops, the
//! bounds count what it has not fed, as if it took frames one by one, and senders
//! waiting for room are woken a batch at a time. The connection's task is woken only
//! when the queue goes from empty to not empty (it drains it until empty or the sink
//! is full, and the sink wakes it for the rest). It looks at an empty queue without the lock: the number of frames is
//! mirrored in an atomic that only the lock's holder writes. It looks often (before
//! every answer it writes, so that queued frames keep their place, and twice before it
//! sleeps), and a lock taken and released is two atomic read-modify-writes, some 5 ns
//! each on these machines where a plain load costs nothing; callgrind counts them as
//! two instructions, and perf puts the queue's two locks per frame at about 40 ns of a
//! pushed notification's 400 on the sending side (the rpc bench's (d)), which batches
//! halve.
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
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

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
    #[inline]
    pub(crate) fn into_frame(self) -> crate::transport::Frame {
        match self {
            Outgoing::Frame(text) => crate::transport::Frame::Text(text),
            Outgoing::Ping => crate::transport::Frame::Ping(bytes::Bytes::new()),
        }
    }

    /// What the frame counts against the byte bound.
    #[inline]
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

/// Most frames the connection's task takes out of the queue at once. Senders waiting
/// for room get it a batch at a time: small enough that a sender on another thread
/// goes on filling while the task writes.
pub(crate) const BATCH: usize = 64;

/// Frames the connection's task took out of the queue under one lock, oldest first: it
/// feeds them to the sink without the lock. The queue counts each against its bounds
/// until the task has fed it and comes back under the lock: for the next batch, or
/// when the sink stops taking frames ([`OutQueue::release`]). Its deque holds at
/// most [`BATCH`] frames and is made on the first batch; the keepalive tick gives it
/// back, or (a connection without keepalive) a take that finds the queue empty.
///
/// Boxed: a pointer in the connection's task instead of a deque's three words. The
/// task's future is allocated in 128-byte steps (tokio aligns its cell to a cache
/// line), and the 24 more bytes it made took every idle connection over the next step
/// (the rpc bench's (f), 10,000 connections: 4.91 -> 5.04 KiB each).
#[derive(Default)]
pub(crate) struct Batch {
    #[allow(
        clippy::box_collection,
        reason = "one pointer in every connection's task"
    )]
    frames: Option<Box<VecDeque<Outgoing>>>,
}

impl Batch {
    /// The next frame of the batch, for the sink.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Outgoing> {
        self.frames.as_mut()?.pop_front()
    }

    fn len(&self) -> usize {
        self.frames.as_ref().map_or(0, |frames| frames.len())
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn bytes(&self) -> usize {
        self.frames
            .iter()
            .flat_map(|frames| frames.iter())
            .map(Outgoing::len)
            .sum()
    }

    /// Gives its room back if it is empty (the connection's keepalive tick): at most
    /// [`BATCH`] frames' worth, but an idle connection should not keep even that.
    pub(crate) fn give_back_room(&mut self) {
        if self.is_empty() {
            self.frames = None;
        }
    }
}

/// A connection's outgoing queue, shared by its handles and its task.
pub(crate) struct OutQueue {
    state: Mutex<State>,
    /// How many frames `state` counts (queued, and in the task's batch until it comes
    /// back under the lock), written by the lock's holder (saturating: only zero is
    /// read), so that the connection's task sees an empty queue without the lock.
    queued: AtomicU32,
    /// `state.closed`, likewise.
    closed: AtomicBool,
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
    /// Bytes of `frames` and of the task's batch.
    bytes: usize,
    /// Frames of the task's batch (taken out, still counted), and their bytes.
    batch: usize,
    batch_bytes: usize,
    closed: bool,
    /// Whether metrics were on when the queue was made: its bytes are counted in the
    /// process-wide gauge then, going in and coming out, and not at all otherwise.
    metered: bool,
}

impl State {
    /// Moves the process-wide gauge of queued bytes by `delta`, if this queue counts.
    fn meter(&self, delta: i64) {
        if self.metered {
            crate::metrics::queue_bytes(delta);
        }
    }

    /// Frames counted against the bound: queued and in the task's batch.
    fn len(&self) -> usize {
        self.frames.len() + self.batch
    }

    fn full(&self, max_frames: usize, max_bytes: usize) -> bool {
        self.len() >= max_frames || self.bytes >= max_bytes
    }

    /// Over half of either bound: a replay waits below it before the subscriber goes
    /// live, so the first live publications find room (`topics/log.rs`).
    fn over_half(&self, max_frames: usize, max_bytes: usize) -> bool {
        self.len() > max_frames / 2 || self.bytes > max_bytes / 2
    }

    /// What the task fed of its batch (taken out of it since the last lock) leaves the
    /// count: the batch carries no counts of its own, so that the connection's task
    /// stays as small as it was.
    fn release_fed(&mut self, batch: &Batch) {
        let left = batch.len();
        let left_bytes = batch.bytes();
        let fed_bytes = self.batch_bytes - left_bytes;
        self.bytes -= fed_bytes;
        self.meter(-(fed_bytes as i64));
        self.batch = left;
        self.batch_bytes = left_bytes;
    }
}

impl OutQueue {
    /// A queue of at most `max_frames` frames and `max_bytes` bytes. With
    /// `trim_when_empty`, it gives its room back whenever it runs empty; without, only
    /// when [`give_back_room`](Self::give_back_room) finds it empty.
    pub(crate) fn new(max_frames: usize, max_bytes: usize, trim_when_empty: bool) -> Self {
        OutQueue {
            state: Mutex::new(State {
                metered: crate::metrics::on(),
                ..State::default()
            }),
            queued: AtomicU32::new(0),
            closed: AtomicBool::new(false),
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

    /// Mirrors the number of frames `state` counts; called by the lock's holder after
    /// every change.
    fn count(&self, state: &State) {
        let frames = u32::try_from(state.len()).unwrap_or(u32::MAX);
        self.queued.store(frames, Ordering::Release);
    }

    /// Queues `frame` if the queue has room for it now, in frames and in bytes.
    /// `Ok(true)`: the connection's task was waiting for frames and is woken for this
    /// one. `Ok(false)`: it was not; it takes the frame when it next gets to the queue
    /// (at once if it is running, or when the sink has room if it waits on that).
    #[inline]
    pub(crate) fn try_send(&self, frame: Outgoing) -> Result<bool, TrySendError> {
        let mut state = self.state();
        if state.closed {
            return Err(TrySendError::Closed(frame));
        }
        if state.full(self.max_frames, self.max_bytes) {
            return Err(TrySendError::Full(frame));
        }
        state.bytes += frame.len();
        state.meter(frame.len() as i64);
        state.frames.push_back(frame);
        self.count(&state);
        let first = state.frames.len() == 1;
        drop(state);
        let woken = first && self.reader.take().map(Waker::wake).is_some();
        Ok(woken)
    }

    /// Queues `frame`, waiting for room. Fails only when the connection has ended.
    pub(crate) async fn send(&self, mut frame: Outgoing) -> Result<(), Outgoing> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before trying, so room made in between is not missed.
            room.as_mut().enable();
            match self.try_send(frame) {
                Ok(_) => return Ok(()),
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

    /// For the connection's task, with `batch` empty: takes the next batch, or returns
    /// `Pending` (and a wake-up when a frame comes) if there is none. `Ready(false)`
    /// once closed and empty.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>, batch: &mut Batch) -> Poll<bool> {
        if self.take(batch) {
            return Poll::Ready(true);
        }
        self.reader.register(cx.waker());
        // Looked at again: a frame queued before the registration woke nobody.
        if self.take(batch) {
            Poll::Ready(true)
        } else if self.closed.load(Ordering::Acquire) {
            Poll::Ready(false)
        } else {
            Poll::Pending
        }
    }

    /// For the connection's task, with `batch` empty (its frames fed to the sink): they
    /// leave the count, and the next frames, up to [`BATCH`], go into `batch`. Returns
    /// whether any did.
    pub(crate) fn take(&self, batch: &mut Batch) -> bool {
        debug_assert!(batch.is_empty(), "the last batch is fed first");
        // Only this task takes frames out, so zero here stays zero until a sender
        // queues one (and wakes this task if it registered). Frames fed since the last
        // lock are in it: they need the lock, to leave the count.
        if self.queued.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.exchange(batch, BATCH) > 0
    }

    /// For the connection's task when the sink stops taking frames: what it fed of its
    /// batch leaves the count now, so that room is not kept from senders while the task
    /// waits for the sink; what it has not fed still counts.
    pub(crate) fn release(&self, batch: &mut Batch) {
        if self.queued.load(Ordering::Acquire) > 0 {
            self.exchange(batch, 0);
        }
    }

    /// What the task fed of `batch` leaves the count and up to `most` more frames go
    /// into it (`most` > 0 only when it is empty), under one lock. Returns how many did.
    fn exchange(&self, batch: &mut Batch, most: usize) -> usize {
        let mut state = self.state();
        let was_full = state.full(self.max_frames, self.max_bytes);
        let was_over_half = state.over_half(self.max_frames, self.max_bytes);
        state.release_fed(batch);
        let n = state.frames.len().min(most);
        if n > 0 {
            let frames = batch.frames.get_or_insert_default();
            frames.extend(state.frames.drain(..n));
            state.batch = n;
            state.batch_bytes = batch.bytes();
        }
        self.count(&state);
        if self.trim_when_empty {
            if n == 0 && most > 0 {
                batch.give_back_room();
            }
            if state.frames.is_empty() && state.frames.capacity() > KEEP_CAPACITY {
                state.frames = VecDeque::new();
            }
        }
        // Waiters for room, and for the queue to be half empty (`wait_half_empty`):
        // each crossing happens once per fill, so waking both costs nothing per frame.
        let room = (was_full && !state.full(self.max_frames, self.max_bytes))
            || (was_over_half && !state.over_half(self.max_frames, self.max_bytes));
        drop(state);
        if room {
            self.room.notify_waiters();
        }
        n
    }

    /// For the connection's task: nothing more goes in; what is queued can still be
    /// taken out. Waiting senders give up.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.closed.store(true, Ordering::Release);
        self.room.notify_waiters();
    }

    /// For the connection's task: drops what is queued and what `batch` holds (the
    /// slow-peer close).
    pub(crate) fn discard(&self, batch: &mut Batch) {
        let mut state = self.state();
        let frames = std::mem::take(&mut state.frames);
        state.meter(-(state.bytes as i64));
        state.bytes = 0;
        state.batch = 0;
        state.batch_bytes = 0;
        self.count(&state);
        drop(state);
        drop(frames);
        batch.frames = None;
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

    /// Whether the queue is at one of its bounds (a sender would wait for room).
    pub(crate) fn is_full(&self) -> bool {
        self.state().full(self.max_frames, self.max_bytes)
    }

    /// Whether the queue holds at most half of each bound.
    pub(crate) fn half_empty(&self) -> bool {
        !self.state().over_half(self.max_frames, self.max_bytes)
    }

    /// The byte bound.
    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Bytes in the queue now (with the task's batch).
    pub(crate) fn queued_bytes(&self) -> usize {
        self.state().bytes
    }
}

impl Drop for OutQueue {
    /// What a connection's queue still held at its end leaves the process-wide count.
    fn drop(&mut self) {
        let state = self.state();
        if state.bytes > 0 {
            state.meter(-(state.bytes as i64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn frame() -> Outgoing {
        Outgoing::Frame("{}".into())
    }

    /// The connection's task's way to its next frame: from its batch, or a new batch.
    fn next(queue: &OutQueue, batch: &mut Batch) -> Option<Outgoing> {
        batch.pop().or_else(|| {
            queue.take(batch);
            batch.pop()
        })
    }

    fn poll_next(
        queue: &OutQueue,
        cx: &mut Context<'_>,
        batch: &mut Batch,
    ) -> Poll<Option<Outgoing>> {
        if let Some(frame) = batch.pop() {
            return Poll::Ready(Some(frame));
        }
        queue.poll_take(cx, batch).map(|_| batch.pop())
    }

    /// Fills the queue past [`KEEP_CAPACITY`] and empties it.
    fn burst(queue: &OutQueue, batch: &mut Batch) {
        for _ in 0..KEEP_CAPACITY * 4 {
            assert!(queue.try_send(frame()).is_ok());
        }
        while next(queue, batch).is_some() {}
    }

    fn capacity(queue: &OutQueue) -> usize {
        queue.state().frames.capacity()
    }

    fn batch_capacity(batch: &Batch) -> usize {
        batch.frames.as_ref().map_or(0, |frames| frames.capacity())
    }

    #[test]
    fn with_keepalive_a_burst_keeps_its_room_until_the_tick_finds_the_queue_empty() {
        let queue = OutQueue::new(1024, 1 << 20, false);
        let mut batch = Batch::default();
        burst(&queue, &mut batch);
        let room = capacity(&queue);
        assert!(room >= KEEP_CAPACITY * 4, "kept between fills");
        let batch_room = batch_capacity(&batch);
        assert!((BATCH..2 * BATCH).contains(&batch_room), "{batch_room}");
        burst(&queue, &mut batch);
        assert_eq!(capacity(&queue), room, "the next fill grows nothing");
        assert_eq!(batch_capacity(&batch), batch_room, "nor the batch");
        queue.try_send(frame()).ok().unwrap();
        queue.give_back_room();
        assert_eq!(capacity(&queue), room, "not while a frame waits");
        next(&queue, &mut batch).unwrap();
        queue.give_back_room();
        batch.give_back_room();
        assert_eq!((capacity(&queue), batch_capacity(&batch)), (0, 0));
    }

    #[test]
    fn the_look_without_the_lock_follows_every_change_of_the_queue() {
        let queue = OutQueue::new(4, 1 << 20, false);
        let mut batch = Batch::default();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(poll_next(&queue, &mut cx, &mut batch).is_pending());
        queue.try_send(frame()).ok().unwrap();
        assert!(matches!(
            poll_next(&queue, &mut cx, &mut batch),
            Poll::Ready(Some(_))
        ));
        assert!(next(&queue, &mut batch).is_none());
        for _ in 0..3 {
            queue.try_send(frame()).ok().unwrap();
        }
        queue.take(&mut batch);
        queue.try_send(frame()).ok().unwrap();
        queue.discard(&mut batch);
        assert!(
            next(&queue, &mut batch).is_none(),
            "discarded, the batch too"
        );
        assert_eq!(queue.queued_bytes(), 0);
        queue.try_send(frame()).ok().unwrap();
        queue.close();
        assert!(matches!(
            poll_next(&queue, &mut cx, &mut batch),
            Poll::Ready(Some(_))
        ));
        assert!(matches!(
            poll_next(&queue, &mut cx, &mut batch),
            Poll::Ready(None)
        ));
    }

    /// A batch's frames count against the bounds until the task has fed them and comes
    /// back under the lock: the bounds are the same as frame by frame, and a sender
    /// waiting for room gets it then.
    #[test]
    fn a_batch_holds_its_room_until_the_task_comes_back_under_the_lock() {
        let queue = OutQueue::new(4, 1 << 20, false);
        let mut batch = Batch::default();
        for _ in 0..4 {
            queue.try_send(frame()).ok().unwrap();
        }
        assert!(queue.take(&mut batch));
        let mut first = std::pin::pin!(queue.send(frame()));
        assert!(
            first.as_mut().now_or_never().is_none(),
            "full: the batch counts"
        );
        assert_eq!(queue.queued_bytes(), 8);
        batch.pop().unwrap();
        assert_eq!(queue.queued_bytes(), 8, "fed, counted until the lock");
        queue.release(&mut batch);
        assert_eq!(queue.queued_bytes(), 6, "what is not fed still counts");
        assert!(
            matches!(first.now_or_never(), Some(Ok(()))),
            "woken: one frame's room"
        );
        let mut second = std::pin::pin!(queue.send(frame()));
        assert!(second.as_mut().now_or_never().is_none(), "full again");
        while batch.pop().is_some() {}
        assert!(
            second.as_mut().now_or_never().is_none(),
            "fed, not yet given back"
        );
        assert!(queue.take(&mut batch), "the first sender's frame");
        assert_eq!(queue.queued_bytes(), 2);
        assert!(
            matches!(second.now_or_never(), Some(Ok(()))),
            "woken by the take"
        );
        assert!(next(&queue, &mut batch).is_some());
        assert!(next(&queue, &mut batch).is_some());
        assert!(next(&queue, &mut batch).is_none());
        assert_eq!(queue.queued_bytes(), 0);
    }

    /// The task stops at a busy sink with its batch fed: the room goes back then, not
    /// at its next take, which waits for the sink.
    #[test]
    fn what_a_batch_fed_gives_its_room_back_when_the_sink_is_busy() {
        let queue = OutQueue::new(1, 1 << 20, false);
        let mut batch = Batch::default();
        queue.try_send(frame()).ok().unwrap();
        assert!(next(&queue, &mut batch).is_some());
        assert!(matches!(
            queue.try_send(frame()),
            Err(TrySendError::Full(_))
        ));
        queue.release(&mut batch);
        assert!(queue.try_send(frame()).is_ok());
    }

    #[test]
    fn a_batch_takes_at_most_batch_frames_in_order() {
        let queue = OutQueue::new(1024, 1 << 20, false);
        let mut batch = Batch::default();
        for i in 0..BATCH + 3 {
            queue
                .try_send(Outgoing::Frame(i.to_string().into()))
                .ok()
                .unwrap();
        }
        assert!(queue.take(&mut batch));
        assert_eq!(batch.len(), BATCH);
        let mut seen = Vec::new();
        while let Some(Outgoing::Frame(text)) = next(&queue, &mut batch) {
            seen.push(text.as_str().parse::<usize>().unwrap());
        }
        assert_eq!(seen, (0..BATCH + 3).collect::<Vec<_>>());
    }

    /// A sender on another thread and the connection's task racing on an empty queue:
    /// every frame arrives, and the task is never left asleep with a frame queued (it
    /// would hang here until the timeout).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_frame_queued_while_the_task_goes_to_sleep_wakes_it() {
        const FRAMES: usize = 20_000;
        let queue = std::sync::Arc::new(OutQueue::new(8, 1 << 20, false));
        let sender = queue.clone();
        let sending = std::thread::spawn(move || {
            for _ in 0..FRAMES {
                let mut next = frame();
                loop {
                    match sender.try_send(next) {
                        Ok(_) => break,
                        Err(TrySendError::Full(back)) => {
                            next = back;
                            std::thread::yield_now();
                        }
                        Err(TrySendError::Closed(_)) => panic!("closed"),
                    }
                }
            }
        });
        let taking = async {
            let mut batch = Batch::default();
            for _ in 0..FRAMES {
                let next = std::future::poll_fn(|cx| poll_next(&queue, cx, &mut batch)).await;
                assert!(next.is_some());
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), taking)
            .await
            .expect("every frame taken, no wake-up lost");
        sending.join().unwrap();
    }

    #[test]
    fn without_keepalive_the_room_goes_back_whenever_the_queue_runs_empty() {
        let queue = OutQueue::new(1024, 1 << 20, true);
        let mut batch = Batch::default();
        burst(&queue, &mut batch);
        assert_eq!((capacity(&queue), batch_capacity(&batch)), (0, 0));
    }
}
