//! Outgoing calls awaiting their answers, keyed by id, and their deadlines.
//!
//! One map per connection, so connections never contend on it. An entry leaves the map
//! in exactly one of four ways: its answer arrives, its deadline passes (the
//! connection's sweep, below), its caller gives up (the guard's drop, on its own
//! timeout or cancellation), or the connection ends (`fail_all`).
//!
//! The map is a plain `Mutex<HashMap>` with rustc-hash's Fx hasher (see the note on `Router`), not the `DashMap`
//! design first named: it is per connection, touched by the calling tasks and the
//! reader for a few nanoseconds each (an insert or a remove, never held across a send
//! or an await), so shards buy nothing, while they cost a SipHash per lookup, a
//! reader-writer lock per shard and about 200 bytes on every idle connection.
//!
//! **Deadlines.** A call's timeout is not a tokio timer of its own: registering one in
//! tokio's timer wheel and taking it out again cost about 1,350 instructions a call,
//! a tenth of the whole call. Instead the deadlines wait beside the map, under the same
//! lock, in a deque in deadline order, and the connection's task keeps one timer for
//! the front (`driver/deadlines.rs`); when it fires, the calls past their deadline
//! get `None` as their answer, which their callers turn into the same
//! `Error::Timeout` a timer of their own would have given. A call costs a push and a
//! clock reading. The deque takes a call whose deadline is not before its back (read
//! under the lock, so calls with the connection's own timeout always are: ids and
//! deadlines are issued in one order); any other call (longer than the connection's
//! timeout, or one that would break the order) keeps a tokio timer, as before.
//!
//! **The common call reads no clock.** A call with the connection's own timeout
//! ([`Due::Later`]) is not stamped when it is made: its id joins a list, and the
//! connection's task, woken for it, stamps every call on the list with one clock
//! reading when it next looks (`rearm`), within microseconds unless the runtime is
//! busy. Its timeout so counts from when its connection took it up, never from before
//! the call. A clock reading per call was a tenth of the calling side's gap to the
//! raw baseline in the rpc bench's (b) (PERF-NOTES.md, "Stop 62"). The stamps always
//! fit the deque's order: every deadline in it is at most its push's time plus the
//! connection's timeout (the other calls' timeouts are at most that, `Shared::due`), and
//! a stamp is that timeout from a later reading.
//!
//! Calls that end otherwise leave the deque lazily: its front is popped while it names
//! no waiting call, and the whole deque is compacted once it holds more than twice the
//! waiting calls (plus [`SLACK`]), so one call that never ends cannot make it grow with
//! the call rate.
//!
//! **The answer's slot.** A call's answer is left in its own entry of the map, and the
//! call's waker beside it: the reader writes it where it has just looked the id up, and
//! the woken call takes it out under the same lock. It used to travel through a tokio
//! `oneshot` channel made for every call: an allocation, some 140 bytes on three cache
//! lines written by the reader long after the call made them (with 64 calls in flight,
//! cold by then), and the channel's own atomics. An entry so leaves the map when its
//! call takes the answer or gives up (the guard's drop), not when the answer comes; the
//! entries answered and not yet taken are counted apart, and are not "waiting".

use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::Instant;

use crate::call::Reply;
use crate::error::{CloseReason, Error};
use crate::message::Outcome;
use crate::sync::lock;

/// What the reader hands a waiting call: the response's member, or the reason it is
/// not a valid response ([`Error::InvalidResponse`]).
pub(crate) type Answer = Result<Outcome<Reply>, Error>;

/// A call's entry in the map.
enum Slot {
    /// No answer yet; the waker of the call's last poll, once it has been polled.
    Waiting(Option<Waker>),
    /// `Some` answer, or `None` once its deadline passed (the connection's sweep, below),
    /// until the call takes it.
    Done(Option<Answer>),
}

impl Slot {
    /// Hands `answer` over if the call still waits for one; returns the waker to wake
    /// once the lock is released. `Err` when the call was answered already.
    fn fill(&mut self, answer: Option<Answer>) -> Result<Option<Waker>, Option<Answer>> {
        match self {
            Slot::Waiting(waker) => {
                let waker = waker.take();
                *self = Slot::Done(answer);
                Ok(waker)
            }
            Slot::Done(_) => Err(answer),
        }
    }
}

/// Past this many entries above twice the live calls, the deque is compacted.
const SLACK: usize = 32;

/// Past this capacity, a deque that runs empty gives its room back.
const KEEP_CAPACITY: usize = 64;

/// When a call gives up waiting, as the caller asks it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Due {
    /// Its timeout from now (read under the lock); the connection's sweep keeps it
    /// if it fits the order.
    After(Duration),
    /// At this instant (every call of a batch shares one); the same.
    At(Instant),
    /// The connection's own timeout (given when its task stamps the call, to
    /// [`rearm`](Pending::rearm) and [`expire`](Pending::expire)), counted from then:
    /// no clock is read for the call (see the module's docs). Only for a timeout up to
    /// [`LATER_MAX`].
    Later,
    /// The caller keeps its own timer.
    Own,
}

/// The longest timeout [`Due::Later`] takes: any instant of the process's life plus
/// this is an instant (`Instant + Duration` cannot overflow), so the connection can
/// always stamp the call.
pub(crate) const LATER_MAX: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// When the connection's sweep ends a call that waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Swept {
    /// At this deadline.
    At(Instant),
    /// At the connection's timeout from when its task stamped the call ([`Due::Later`]).
    Later,
}

/// A registered call.
pub(crate) struct Registered<'a> {
    /// The call's entry: its answer is taken, or the entry removed, through it.
    pub(crate) guard: Guard<'a>,
    /// `Some` when the connection's sweep keeps the deadline: the call's entry then
    /// gets `None` as its answer once it passes. `None`: the caller keeps its own timer.
    pub(crate) deadline: Option<Swept>,
    /// The connection's task must look: its timer does not cover this deadline yet, or
    /// (for [`Swept::Later`]) the call is the first waiting for its stamp.
    pub(crate) wake: bool,
}

#[derive(Default)]
pub(crate) struct Pending {
    state: Mutex<State>,
    closed: AtomicBool,
    /// A call asked the connection to set its timer again (it had none, or one set
    /// later than this call's deadline). Read by the connection's task on every pass.
    rearm: AtomicBool,
}

#[derive(Default)]
struct State {
    map: FxHashMap<u64, Slot>,
    /// Entries of the map that hold an answer not yet taken: the rest wait.
    answered: usize,
    /// `(deadline, id)` of the calls the connection times out, in deadline order;
    /// entries of calls that ended otherwise are removed lazily.
    deadlines: VecDeque<(Instant, u64)>,
    /// When the connection's timer fires (or is about to be set to fire, once it
    /// has seen `rearm`); `None` when it has no timer. Never later than the front.
    timer: Option<Instant>,
    /// Made on the connection's first call, then kept: an idle connection that never
    /// calls holds one pointer here (the rpc bench's (f) counts every word).
    lists: Option<Box<Lists>>,
}

/// The lists of a connection that calls.
#[derive(Default)]
struct Lists {
    /// Calls registered with [`Due::Later`] and not yet stamped, oldest first; entries
    /// of calls that ended since are skipped when stamped.
    unstamped: Vec<u64>,
    /// The ids of each batch of calls sent and still waiting for its answers
    /// ([`Pending::batch_sent`]): a batch the other side refuses whole is answered
    /// with one error without an id.
    batches: Vec<Box<[u64]>>,
}

impl State {
    /// Whether call `id` still waits for its answer.
    fn waits(&self, id: u64) -> bool {
        matches!(self.map.get(&id), Some(Slot::Waiting(_)))
    }

    /// The calls that wait for their answer.
    fn waiting(&self) -> usize {
        self.map.len() - self.answered
    }

    /// Gives `answer` to call `id` if it waits; returns its waker (to wake once the
    /// lock is released), or `Err` when no call waits for it.
    fn fill(&mut self, id: u64, answer: Option<Answer>) -> Result<Option<Waker>, Option<Answer>> {
        let Some(slot) = self.map.get_mut(&id) else {
            return Err(answer);
        };
        let waker = slot.fill(answer)?;
        self.answered += 1;
        self.unfront(id);
        Ok(waker)
    }

    /// Removes `id` from the map; then, as [`unfront`](Self::unfront).
    fn forget(&mut self, id: u64) -> Option<Slot> {
        let slot = self.map.remove(&id);
        if let Some(Slot::Done(_)) = slot {
            self.answered -= 1;
        }
        self.unfront(id);
        slot
    }

    /// If the deque's front names `id`, which no longer waits, pops the front while it
    /// names no waiting call.
    fn unfront(&mut self, id: u64) {
        if self
            .deadlines
            .front()
            .is_some_and(|&(_, front)| front == id)
        {
            self.deadlines.pop_front();
            self.pop_dead();
        }
    }

    /// Pops the front while it names a call that no longer waits.
    fn pop_dead(&mut self) {
        while let Some(&(_, id)) = self.deadlines.front() {
            if self.waits(id) {
                return;
            }
            self.deadlines.pop_front();
        }
        if self.deadlines.capacity() > KEEP_CAPACITY {
            self.deadlines = VecDeque::new();
        }
    }

    /// The lists, made if this is the connection's first call.
    fn lists(&mut self) -> &mut Lists {
        self.lists.get_or_insert_with(Box::default)
    }

    /// Whether calls wait for their stamp.
    fn unstamped(&self) -> bool {
        self.lists
            .as_ref()
            .is_some_and(|lists| !lists.unstamped.is_empty())
    }

    /// Stamps the calls registered with [`Due::Later`] at `now` plus `later`, the
    /// connection's timeout. Pushes the waker of a call that could not be stamped (none
    /// can) to `ended`.
    fn stamp(&mut self, now: Instant, later: Duration, ended: &mut Vec<Waker>) {
        let mut ids = std::mem::take(&mut self.lists().unstamped);
        // `LATER_MAX` bounds the timeout, so this is an instant.
        let deadline = now.checked_add(later);
        for id in ids.drain(..) {
            if !self.waits(id) {
                continue;
            }
            // The timer is set by the caller, from the front.
            if let Some((true, _)) = deadline.map(|deadline| self.push_deadline(deadline, id)) {
                continue;
            }
            // Cannot happen (see the module's docs); if it did, the call would have no
            // deadline at all, so it ends now, as a timeout.
            debug_assert!(false, "a stamp did not fit the deque");
            if let Ok(waker) = self.fill(id, None) {
                ended.extend(waker);
            }
        }
        // The list's room is kept for the next calls, unless a burst grew it.
        if ids.capacity() <= KEEP_CAPACITY {
            self.lists().unstamped = ids;
        }
    }

    /// Queues a deadline if it fits the order (popping ended calls off the back to
    /// make it fit). Returns whether it went in and whether the connection's timer
    /// must be set again for it.
    fn push_deadline(&mut self, deadline: Instant, id: u64) -> (bool, bool) {
        while let Some(&(back, back_id)) = self.deadlines.back() {
            if back <= deadline {
                break;
            }
            if self.waits(back_id) {
                return (false, false);
            }
            self.deadlines.pop_back();
        }
        self.deadlines.push_back((deadline, id));
        // With calls before it, the timer is at or before their front, so before this
        // one too; only an empty deque's first deadline can be earlier than the timer.
        let rearm = self.timer.is_none_or(|timer| deadline < timer);
        if rearm {
            self.timer = Some(deadline);
        }
        if self.deadlines.len() > 2 * self.waiting() + SLACK {
            let map = &self.map;
            self.deadlines
                .retain(|(_, id)| matches!(map.get(id), Some(Slot::Waiting(_))));
        }
        (true, rearm)
    }
}

impl Pending {
    pub(crate) fn new() -> Self {
        Pending::default()
    }

    /// The map and the deque.
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Registers a call, with the waker to wake for its answer when the caller has it
    /// already (the call then need not be polled once more, only to leave it). The
    /// returned guard removes the entry if the call gives up.
    pub(crate) fn register(
        &self,
        id: u64,
        due: Due,
        waker: Option<Waker>,
        closed_reason: impl FnOnce() -> CloseReason,
    ) -> Result<Registered<'_>, Error> {
        let mut state = self.state();
        state.map.insert(id, Slot::Waiting(waker));
        if let Due::Later = due {
            let waiting = state.waiting();
            let State { map, lists, .. } = &mut *state;
            let unstamped = &mut lists.get_or_insert_with(Box::default).unstamped;
            let first = unstamped.is_empty();
            unstamped.push(id);
            // Calls that ended before their stamp must not make the list grow with the
            // call rate while the connection's task does not run.
            if unstamped.len() > 2 * waiting + SLACK {
                unstamped.retain(|id| matches!(map.get(id), Some(Slot::Waiting(_))));
            }
            // The first call on the list wakes the connection's task to stamp it.
            if first {
                self.rearm.store(true, Ordering::Release);
            }
            drop(state);
            return self.registered(id, Some(Swept::Later), first, closed_reason);
        }
        let deadline = match due {
            Due::After(timeout) => Instant::now().checked_add(timeout),
            Due::At(deadline) => Some(deadline),
            Due::Own | Due::Later => None,
        };
        let (deadline, wake) = match deadline.map(|d| (d, state.push_deadline(d, id))) {
            Some((deadline, (true, rearm))) => (Some(Swept::At(deadline)), rearm),
            _ => (None, false),
        };
        if wake {
            self.rearm.store(true, Ordering::Release);
        }
        drop(state);
        self.registered(id, deadline, wake, closed_reason)
    }

    /// The end of [`register`](Self::register), the lock released.
    #[inline(always)]
    fn registered(
        &self,
        id: u64,
        deadline: Option<Swept>,
        wake: bool,
        closed_reason: impl FnOnce() -> CloseReason,
    ) -> Result<Registered<'_>, Error> {
        // Checked after inserting: `fail_all` sets the flag before draining, so either
        // it drains this entry or we see the flag here. Either way nothing is left.
        if self.closed.load(Ordering::SeqCst) {
            self.state().forget(id);
            return Err(Error::Closed(closed_reason()));
        }
        Ok(Registered {
            guard: Guard {
                pending: self,
                id,
                armed: true,
            },
            deadline,
            wake,
        })
    }

    /// Hands an answer to the call waiting for `id`. False when none waits (a late
    /// answer to a call that timed out, or an id we never sent).
    pub(crate) fn complete(&self, id: u64, answer: Answer) -> bool {
        // The lock is released before the wake-up.
        let filled = self.state().fill(id, Some(answer));
        match filled {
            Ok(waker) => {
                if let Some(waker) = waker {
                    waker.wake();
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Ends every waiting call with `Error::Closed`; later registrations fail at once.
    pub(crate) fn fail_all(&self, reason: &CloseReason) {
        self.closed.store(true, Ordering::SeqCst);
        let mut wakers = Vec::new();
        let mut state = self.state();
        for slot in state.map.values_mut() {
            if let Ok(waker) = slot.fill(Some(Err(Error::Closed(reason.clone())))) {
                wakers.extend(waker);
            }
        }
        state.answered = state.map.len();
        state.deadlines = VecDeque::new();
        if let Some(lists) = &mut state.lists {
            lists.unstamped = Vec::new();
        }
        drop(state);
        for waker in wakers {
            waker.wake();
        }
    }

    /// The calls that wait for their answer.
    pub(crate) fn len(&self) -> usize {
        self.state().waiting()
    }

    /// A batch of the calls `ids` has gone out. Until the returned mark is dropped
    /// (the batch has its outcomes, or was given up), an error without an id is
    /// taken as its refusal when it is the only batch waiting
    /// ([`refused_batch`](Self::refused_batch)).
    pub(crate) fn batch_sent(&self, ids: &[u64]) -> BatchMark<'_> {
        let first = ids.first().copied();
        if !ids.is_empty() {
            self.state().lists().batches.push(ids.into());
        }
        BatchMark {
            pending: self,
            first,
        }
    }

    /// The other side refused a batch whole: it answered one error without an id
    /// (a batch longer than it takes, or one it cannot read). The answer names no
    /// batch, so it is taken as the refusal of the one batch waiting, if exactly one
    /// is: each of its calls still waiting gets `answer()`. Returns how many did.
    pub(crate) fn refused_batch(&self, answer: impl Fn() -> Answer) -> usize {
        let mut state = self.state();
        // None, or more than one: which was refused cannot be told. They wait on.
        let Some(lists) = state
            .lists
            .as_mut()
            .filter(|lists| lists.batches.len() == 1)
        else {
            return 0;
        };
        let ids = std::mem::take(&mut lists.batches);
        let mut wakers = Vec::new();
        for &id in ids.iter().flat_map(|ids| ids.iter()) {
            if let Ok(waker) = state.fill(id, Some(answer())) {
                wakers.push(waker);
            }
        }
        // The lock is released before the wake-ups.
        drop(state);
        let filled = wakers.len();
        for waker in wakers.into_iter().flatten() {
            waker.wake();
        }
        filled
    }

    /// For the connection's task, on every pass: whether a call asked it to set its
    /// timer again ([`rearm`](Self::rearm)).
    pub(crate) fn rearm_wanted(&self) -> bool {
        self.rearm.load(Ordering::Acquire)
    }

    /// For the connection's task: stamps the calls registered with [`Due::Later`]
    /// (one clock reading for all, `later` the connection's timeout), and says when its
    /// timer should fire now (`None`: it needs none). A timer set before the front
    /// deadline is kept: it fires, finds that call gone and is set to the new front,
    /// rather than being set again for every stamp.
    pub(crate) fn rearm(&self, later: Duration) -> Option<Instant> {
        let mut ended = Vec::new();
        let mut state = self.state();
        self.rearm.store(false, Ordering::Relaxed);
        if state.unstamped() {
            state.stamp(Instant::now(), later, &mut ended);
        }
        state.pop_dead();
        let front = state.deadlines.front().map(|&(deadline, _)| deadline);
        state.timer = match (state.timer, front) {
            (Some(timer), Some(front)) if timer <= front => Some(timer),
            (_, front) => front,
        };
        let timer = state.timer;
        drop(state);
        ended.into_iter().for_each(Waker::wake);
        timer
    }

    /// For the connection's task, when its timer fired at `now`: stamps the calls
    /// that wait for it (as [`rearm`](Self::rearm)), and ends the calls whose deadline
    /// has passed (`None` as their answer). Returns when the timer should fire next
    /// (`None`: no deadlines are left).
    pub(crate) fn expire(&self, now: Instant, later: Duration) -> Option<Instant> {
        let mut expired = Vec::new();
        let mut state = self.state();
        // The flag is cleared below: what it asked for is done here.
        if state.unstamped() {
            state.stamp(now, later, &mut expired);
        }
        while let Some(&(deadline, id)) = state.deadlines.front() {
            if deadline > now {
                break;
            }
            // Filling it pops it (and what follows it that no longer waits).
            match state.fill(id, None) {
                Ok(waker) => expired.extend(waker),
                Err(_) => {
                    state.deadlines.pop_front();
                }
            }
        }
        state.pop_dead();
        self.rearm.store(false, Ordering::Relaxed);
        state.timer = state.deadlines.front().map(|&(deadline, _)| deadline);
        let next = state.timer;
        // The lock is released before the wake-ups.
        drop(state);
        for waker in expired {
            waker.wake();
        }
        next
    }

    /// Entries in the deadline deque, live or not yet removed.
    #[cfg(test)]
    pub(crate) fn deadlines_len(&self) -> usize {
        self.state().deadlines.len()
    }

    /// Entries in the map, answered or waiting.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.state().map.len()
    }
}

/// A batch of calls sent, among those an error without an id may refuse, until dropped.
pub(crate) struct BatchMark<'a> {
    pending: &'a Pending,
    /// Its first call's id, which no other batch has.
    first: Option<u64>,
}

impl Drop for BatchMark<'_> {
    fn drop(&mut self) {
        if let Some(first) = self.first {
            let mut state = self.pending.state();
            let batches = &mut state.lists().batches;
            batches.retain(|ids| ids.first() != Some(&first));
            if batches.is_empty() {
                *batches = Vec::new();
            }
        }
    }
}

/// A registered call's entry: the call's answer is taken through it, and it removes
/// the entry if the call ends without taking one.
pub(crate) struct Guard<'a> {
    pending: &'a Pending,
    id: u64,
    armed: bool,
}

impl Guard<'_> {
    /// The call's answer, once it is there: `Some` answer, or `None` once its deadline
    /// passed (the connection's sweep). The entry leaves the map with it. `Ready(None)`
    /// (outer) if there is no entry: it was taken already.
    #[inline(always)]
    pub(crate) fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<Option<Option<Answer>>> {
        if !self.armed {
            return Poll::Ready(None);
        }
        let mut state = self.pending.state();
        // One lookup, whether the answer is there or not.
        let mut entry = match state.map.entry(self.id) {
            Entry::Occupied(entry) => entry,
            Entry::Vacant(_) => {
                self.armed = false;
                return Poll::Ready(None);
            }
        };
        if let Slot::Waiting(waker) = entry.get_mut() {
            match waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => *waker = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        self.armed = false;
        match entry.remove() {
            Slot::Done(answer) => {
                state.answered -= 1;
                state.unfront(self.id);
                Poll::Ready(Some(answer))
            }
            // Not reached: a call that waits returned above.
            Slot::Waiting(_) => Poll::Ready(None),
        }
    }
}

impl Guard<'_> {
    /// Whether the call's answer is in its entry, not yet taken: an answered call has
    /// nothing left to cancel.
    pub(crate) fn has_answer(&self) -> bool {
        self.armed
            && matches!(
                self.pending.state().map.get(&self.id),
                Some(Slot::Done(Some(_)))
            )
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.pending.state().forget(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    fn register(pending: &Pending, id: u64, due: Due) -> Registered<'_> {
        pending
            .register(id, due, None, || CloseReason::Eof)
            .unwrap()
    }

    fn answer() -> Answer {
        Err(Error::InvalidResponse("test".into()))
    }

    /// The call's answer if it is there, polled with a waker that does nothing.
    fn taken(call: &mut Registered<'_>) -> Poll<Option<Option<Answer>>> {
        call.guard
            .poll_answer(&mut Context::from_waker(Waker::noop()))
    }

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Woken(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Woken {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_wakes_its_call_and_leaves_the_map_when_taken() {
        let pending = Pending::new();
        let mut call = register(&pending, 7, Due::After(T));
        let woken = std::sync::Arc::new(Woken::default());
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(call.guard.poll_answer(&mut cx).is_pending());
        assert!(call.guard.poll_answer(&mut cx).is_pending(), "polled again");
        assert_eq!(pending.len(), 1);
        assert!(pending.complete(7, answer()));
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        // Answered, not taken: no longer waiting, and a second answer finds no one.
        assert_eq!(pending.len(), 0);
        assert!(!pending.complete(7, answer()));
        assert_eq!(pending.deadlines_len(), 0, "the deque's front was the call");
        assert!(matches!(
            call.guard.poll_answer(&mut cx),
            Poll::Ready(Some(Some(Err(Error::InvalidResponse(_)))))
        ));
        assert_eq!(pending.entries(), 0);
        // Taken once: a poll after it finds nothing, and the drop removes nothing.
        assert!(matches!(call.guard.poll_answer(&mut cx), Poll::Ready(None)));
        drop(call);
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_without_an_id_ends_the_one_batch_waiting_and_no_other_call() {
        let pending = Pending::new();
        let _single = register(&pending, 1, Due::After(T));
        let _a = [2, 3].map(|id| register(&pending, id, Due::After(T)));
        let first = pending.batch_sent(&[2, 3]);
        assert_eq!(pending.refused_batch(answer), 2);
        assert_eq!(pending.len(), 1, "the single call waits on");
        drop(first);
        // Two batches waiting: which one was refused cannot be told.
        let _b = [4, 5].map(|id| register(&pending, id, Due::After(T)));
        let _c = [6].map(|id| register(&pending, id, Due::After(T)));
        let b = pending.batch_sent(&[4, 5]);
        let _c_sent = pending.batch_sent(&[6]);
        assert_eq!(pending.refused_batch(answer), 0);
        assert_eq!(pending.len(), 4);
        // One of them has its outcomes: the other is the one waiting.
        drop(b);
        assert_eq!(pending.refused_batch(answer), 1);
        assert_eq!(pending.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_not_taken_goes_with_the_call_that_gives_up() {
        let pending = Pending::new();
        let call = register(&pending, 1, Due::After(T));
        let _other = register(&pending, 2, Due::After(T));
        assert!(pending.complete(1, answer()));
        assert_eq!((pending.len(), pending.entries()), (1, 2));
        drop(call);
        assert_eq!((pending.len(), pending.entries()), (1, 1));
        // The sweep passes over an answer not yet taken: it ends only calls that wait.
        let _three = register(&pending, 3, Due::After(T));
        assert!(pending.complete(3, answer()));
        assert_eq!(pending.expire(Instant::now() + T, T), None);
        assert_eq!((pending.len(), pending.entries()), (0, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_in_order_go_to_the_deque_and_only_the_first_wakes_the_connection() {
        let pending = Pending::new();
        let start = Instant::now();
        let first = register(&pending, 1, Due::After(T));
        assert_eq!(first.deadline, Some(Swept::At(start + T)));
        assert!(first.wake, "no timer yet: the connection must set one");
        assert!(pending.rearm_wanted());
        assert_eq!(pending.rearm(T), Some(start + T));
        assert!(!pending.rearm_wanted());
        tokio::time::advance(Duration::from_secs(1)).await;
        let second = register(&pending, 2, Due::After(T));
        assert_eq!(
            second.deadline,
            Some(Swept::At(start + T + Duration::from_secs(1)))
        );
        assert!(!second.wake, "the timer is before it");
        // Earlier than the back, which is live: a timer of its own.
        let third = register(&pending, 3, Due::At(start + Duration::from_secs(5)));
        assert_eq!(third.deadline, None);
        assert!(!third.wake);
        assert_eq!(pending.deadlines_len(), 2);
        assert_eq!(pending.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_ends_what_is_due_and_says_when_to_look_again() {
        let pending = Pending::new();
        let start = Instant::now();
        let mut one = register(&pending, 1, Due::After(T));
        tokio::time::advance(Duration::from_secs(2)).await;
        let two = register(&pending, 2, Due::After(T));
        let three = register(&pending, 3, Due::After(T));
        assert_eq!(
            pending.expire(start + T, T),
            Some(start + T + Duration::from_secs(2))
        );
        assert!(
            matches!(taken(&mut one), Poll::Ready(Some(None))),
            "expired"
        );
        assert_eq!(pending.len(), 2);
        // Answered: no longer waiting at once; the deque lets it go as its front passes.
        assert!(pending.complete(3, answer()));
        assert_eq!(pending.deadlines_len(), 2);
        drop(two);
        assert_eq!(pending.deadlines_len(), 0, "the front named a call gone");
        assert_eq!(pending.len(), 0);
        // Nothing left: no timer, and the next call asks for one again.
        assert_eq!(pending.expire(start + T + Duration::from_secs(2), T), None);
        drop(three);
        let four = register(&pending, 4, Due::After(T));
        assert!(four.wake);
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_deadline_earlier_than_the_timer_moves_it() {
        let pending = Pending::new();
        let long = register(&pending, 1, Due::After(T));
        assert_eq!(pending.rearm(T).map(Swept::At), long.deadline);
        drop(long);
        // The timer stays at the old deadline; a shorter call needs it earlier.
        let short = register(&pending, 2, Due::After(Duration::from_secs(1)));
        assert!(short.deadline.is_some());
        assert!(short.wake);
        assert_eq!(pending.rearm(T).map(Swept::At), short.deadline);
        // Ended calls at the back do not keep a shorter deadline out.
        let _later = register(&pending, 3, Due::After(T));
        assert!(pending.complete(3, answer()));
        let shorter = register(&pending, 4, Due::After(Duration::from_secs(2)));
        assert!(shorter.deadline.is_some());
        assert_eq!(pending.deadlines_len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn one_call_that_never_ends_does_not_make_the_deque_grow() {
        let pending = Pending::new();
        let _stuck = register(&pending, 0, Due::After(T));
        let mut most = 0;
        for id in 1..=10_000 {
            let _call = register(&pending, id, Due::After(T));
            // Answered out of order (the stuck call stays at the front).
            if id % 2 == 0 {
                assert!(pending.complete(id, answer()));
            }
            most = most.max(pending.deadlines_len());
        }
        // Compacted past twice the live calls (the stuck one and the newest) plus slack.
        assert!(most <= 2 * 2 + SLACK, "the deque held {most} entries");
        assert_eq!(pending.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_with_the_connection_s_timeout_is_stamped_when_the_connection_looks() {
        let pending = Pending::new();
        let start = Instant::now();
        let first = register(&pending, 1, Due::Later);
        assert_eq!(first.deadline, Some(Swept::Later));
        assert!(first.wake, "the first on the list wakes the connection");
        assert!(pending.rearm_wanted());
        let second = register(&pending, 2, Due::Later);
        assert!(!second.wake, "the connection is woken already");
        assert_eq!(pending.deadlines_len(), 0, "nothing stamped yet");
        // The connection looks a second later: its timeout counts from then.
        tokio::time::advance(Duration::from_secs(1)).await;
        let looked = start + Duration::from_secs(1);
        assert_eq!(pending.rearm(T), Some(looked + T));
        assert!(!pending.rearm_wanted());
        assert_eq!(pending.deadlines_len(), 2);
        // Not a moment before: both wait at the deadline's eve, and end at it.
        assert_eq!(
            pending.expire(looked + T - Duration::from_millis(1), T),
            Some(looked + T)
        );
        assert_eq!(pending.len(), 2);
        assert_eq!(pending.expire(looked + T, T), None);
        assert_eq!(pending.len(), 0);
        // The next call asks again.
        assert!(register(&pending, 3, Due::Later).wake);
    }

    #[tokio::test(start_paused = true)]
    async fn stamps_fit_behind_shorter_deadlines_and_skip_calls_gone() {
        let pending = Pending::new();
        let start = Instant::now();
        let later = register(&pending, 1, Due::Later);
        let gone = register(&pending, 2, Due::Later);
        // A shorter timeout, and a batch's instant, read the clock at once.
        let short = register(&pending, 3, Due::After(Duration::from_secs(1)));
        assert_eq!(
            short.deadline,
            Some(Swept::At(start + Duration::from_secs(1)))
        );
        let batch = register(&pending, 4, Due::At(start + T));
        assert_eq!(batch.deadline, Some(Swept::At(start + T)));
        drop(gone);
        tokio::time::advance(Duration::from_millis(5)).await;
        // The timer stays at the front (the shorter call); the stamp goes behind.
        assert_eq!(pending.rearm(T), Some(start + Duration::from_secs(1)));
        assert_eq!(pending.deadlines_len(), 3, "the call gone was not stamped");
        assert_eq!(
            pending.expire(start + T, T),
            Some(start + T + Duration::from_millis(5))
        );
        assert_eq!(pending.len(), 1);
        drop(later);
        assert_eq!(pending.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_that_end_unstamped_do_not_make_the_list_grow() {
        let pending = Pending::new();
        let _stuck = register(&pending, 0, Due::Later);
        for id in 1..=10_000 {
            drop(register(&pending, id, Due::Later));
        }
        let listed = pending
            .state()
            .lists
            .as_ref()
            .map_or(0, |l| l.unstamped.len());
        assert!(listed <= 2 + SLACK, "the list held {listed} ids");
        // A sweep that fires stamps what is listed, and ends only what is due.
        let now = Instant::now();
        assert_eq!(pending.expire(now, T), Some(now + T));
        assert_eq!((pending.len(), pending.deadlines_len()), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn fail_all_empties_both() {
        let pending = Pending::new();
        let mut one = register(&pending, 1, Due::After(T));
        let _two = register(&pending, 2, Due::Own);
        let mut three = register(&pending, 4, Due::Later);
        pending.fail_all(&CloseReason::Eof);
        assert!(matches!(
            taken(&mut three),
            Poll::Ready(Some(Some(Err(Error::Closed(_)))))
        ));
        assert!(!pending.state().unstamped());
        assert!(matches!(
            taken(&mut one),
            Poll::Ready(Some(Some(Err(Error::Closed(_)))))
        ));
        assert_eq!((pending.len(), pending.deadlines_len()), (0, 0));
        assert!(pending
            .register(3, Due::After(T), None, || CloseReason::Eof)
            .is_err());
        assert_eq!((pending.len(), pending.deadlines_len()), (0, 0));
    }
}
