//! Our requests on their way out and their answers on the way back: the one function
//! every outgoing call and notification of a [`Peer`] passes through
//! ([`Caller::send_request`]), and [`Waiting`], one call from its registration to its
//! answer, which a batch's calls share with it.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context as TaskContext, Poll};
use std::time::Duration;

use futures_util::future::Either;
use futures_util::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::{Peer, Shared};
use crate::call::{CallOptions, Caller, Reply, Request};
use crate::cancel::CancelOnDrop;
use crate::error::{Error, ErrorCode, Result};
use crate::pending::{Answer, Due, Guard, Registered, Swept};
use crate::progress::SinkGuard;
use crate::queue::Outgoing;
use crate::transport::Text;

impl Caller for Peer {
    /// Every outgoing call and notification of this peer starts in the same code: here,
    /// or, for a [`Call`](crate::Call) awaited on the peer, in its
    /// [`CallFuture`](crate::CallFuture), which holds the call in place.
    fn send_request(
        &self,
        request: Request<'_>,
        options: CallOptions,
    ) -> impl std::future::Future<Output = Result<Option<Reply>>> + Send {
        match self.start_request(request, options) {
            Started::Call(call) => Either::Left(call.map(|reply| reply.map(Some))),
            Started::Other(sent) => Either::Right(sent),
        }
    }

    fn peer(&self, _: crate::call::Sealed) -> Option<&Peer> {
        Some(self)
    }

    /// A notification goes straight to the queue: its future holds no call's state,
    /// and one that finds room (most do) runs no future but its own. A handler that
    /// pushes a stream makes one of these per notification: nested `async` functions
    /// would each set up their state for every one, though they never wait.
    fn notify(
        &self,
        method: &str,
        params: impl serde::Serialize,
    ) -> impl std::future::Future<Output = Result<()>> + Send {
        let request = Request::notification(method, params);
        async move {
            let request = request?;
            let shared = &*self.shared;
            if shared.layers().is_some() {
                return Box::pin(self.send_notification(request)).await;
            }
            match shared.try_send(request.into_frame(None, false).into())? {
                None => Ok(()),
                Some(frame) => Box::pin(shared.send_when_room(frame, None))
                    .await
                    .unwrap_or_else(|| Err(Error::Closed(shared.close_reason()))),
            }
        }
    }
}

impl Peer {
    /// The one path of every outgoing call and notification of this peer: through
    /// [`Caller::send_request`], and for a [`Call`](crate::Call) awaited on the peer,
    /// whose [`CallFuture`](crate::CallFuture) holds the [`SendCall`] in place (no box:
    /// one allocation and its free fewer a call).
    ///
    /// A notification is queued, waiting for room. A call takes an id from the
    /// connection's counter, is registered in the pending map (its deadline kept by the
    /// connection's sweep, or by a timer of its own past the connection's timeout or
    /// with a grace), goes into the outgoing queue, and waits for its answer; given
    /// up, it removes its entry and (once queued) tells the other side.
    ///
    /// Not an `async` block: the id is taken, the progress sink registered and the
    /// frame finished here, and the future returned is the one that sends it
    /// (a [`SendCall`], for most calls). An `async` block awaiting
    /// that future would hold its own copy of the request and options, and move the
    /// call's whole state into its own on the first poll: one copy of some 400 bytes a
    /// call (the rpc bench's (b)).
    #[inline(always)]
    pub(crate) fn start_request<'s, 'm>(
        &'s self,
        request: Request<'m>,
        options: CallOptions,
    ) -> Started<'s, 'm, impl Future<Output = Result<Option<Reply>>> + Send + use<'s, 'm>> {
        let shared = &*self.shared;
        let method = request.method();
        if request.is_notification() {
            // Boxed, so that a call's future is no larger for it. A `Peer`'s own
            // `notify` does not come here; a `Reconnecting` client's notifications do,
            // after a fair lock and a wait for the link, beside which a box is small.
            let sent = self
                .send_notification(request)
                .map(|sent| sent.map(|()| None));
            return Started::Other(Box::pin(Either::Left(sent)));
        }
        let id = shared.next_id();
        let sink = options
            .progress
            .clone()
            .map(|tx| shared.progress().register(id, tx));
        let frame = request.into_frame(Some(id), sink.is_some());
        // The call layers (layer.rs) see it, and may answer it instead. Boxed, as
        // every path that most calls do not take: the future of every call is as
        // large as its largest path, and it is moved and set up once per call.
        if shared.layers().is_some() {
            let send = move |frame| self.send_call(frame, id, method, options, sink);
            let made = crate::layer::made_call(self, method, frame, send);
            return Started::Other(Box::pin(Either::Right(made.map(|reply| reply.map(Some)))));
        }
        Started::Call(self.send_call(frame.into(), id, method, options, sink))
    }

    /// Queues a notification, waiting for room; the call layers see it first, and may
    /// drop it.
    async fn send_notification(&self, request: Request<'_>) -> Result<()> {
        let shared = &*self.shared;
        let method = request.method();
        let frame = request.into_frame(None, false);
        if shared.layers().is_some() {
            let send = |frame| shared.send(frame);
            return Box::pin(crate::layer::made_notification(self, method, frame, send)).await;
        }
        shared.send(frame).await
    }

    /// Registers our call `id`, queues its `frame` and waits for its answer, as
    /// `options` say: a [`SendCall`].
    #[inline(always)]
    fn send_call<'s, 'm>(
        &'s self,
        frame: Text,
        id: u64,
        method: &'m str,
        options: CallOptions,
        progress: Option<SinkGuard<'s>>,
    ) -> SendCall<'s, 'm> {
        let shared = &*self.shared;
        SendCall {
            shared,
            method,
            id,
            timeout: options.timeout.unwrap_or_else(|| shared.call_timeout()),
            step: Step::Start {
                frame,
                grace: options.cancel_grace,
            },
            _progress: progress,
        }
    }
}

/// One outgoing call, from its registration (when first polled) to its answer.
///
/// Written by hand, not as an `async` block: the common call (the connection's sweep
/// keeps its deadline, its request finds room in the queue) is registered, queued and
/// then polls its entry, in a state of 168 bytes built where it lies. `async`
/// blocks awaiting one another moved the call's whole state into each new one as it
/// started, and each copy was read back just after it was written (a `memmove` the
/// processor waits on: 62 ns of a call's 1.1 µs in the rpc bench's (b)). What the
/// common call does not need (waiting for room, a timer of its own, a grace) is
/// [`rare`], boxed.
#[must_use = "a call is sent when it is polled"]
pub(crate) struct SendCall<'s, 'm> {
    shared: &'s Shared,
    method: &'m str,
    id: u64,
    timeout: Duration,
    step: Step<'s>,
    // After `step`, so dropped after it: the call's progress goes to its sink until
    // its entry is gone.
    _progress: Option<SinkGuard<'s>>,
}

/// What [`Peer::start_request`] returns: most calls are a [`SendCall`], to be held as
/// it is; a notification, and a call that the call layers see, are boxed (`B`).
pub(crate) enum Started<'s, 'm, B> {
    Call(SendCall<'s, 'm>),
    Other(Pin<Box<B>>),
}

/// [`rare`]'s future: the call's answer (`None` at its timeout), and whether it was
/// cancelled at its timeout.
type RareCall<'a> = Pin<Box<dyn Future<Output = Result<(Option<Answer>, bool)>> + Send + 'a>>;

enum Step<'a> {
    /// Not polled yet.
    Start {
        frame: Text,
        grace: Option<Duration>,
    },
    /// Queued; the connection's sweep keeps the deadline.
    Waiting {
        call: Waiting<'a>,
        // One span per outgoing call: what happens while it waits says which call.
        span: tracing::Span,
    },
    /// Waiting for room in the queue, or keeping a timer of its own: [`rare`].
    Rare(RareCall<'a>),
    Done,
}

impl Future for SendCall<'_, '_> {
    type Output = Result<Reply>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<Reply>> {
        let this = self.get_mut();
        loop {
            match &mut this.step {
                Step::Waiting { call, span } => {
                    let answer = {
                        let _entered = span.enter();
                        ready!(call.poll_answer(cx, this.shared))
                    };
                    this.step = Step::Done;
                    return Poll::Ready(outcome(answer, this.method, this.timeout, false));
                }
                Step::Rare(rare) => {
                    let ended = ready!(rare.as_mut().poll(cx));
                    this.step = Step::Done;
                    let outcome = ended.and_then(|(answer, cancelled)| {
                        outcome(answer, this.method, this.timeout, cancelled)
                    });
                    return Poll::Ready(outcome);
                }
                Step::Start { .. } => match this.start(cx) {
                    // Registered with this poll's waker: nothing to look at yet.
                    Ok(step @ Step::Waiting { .. }) => {
                        this.step = step;
                        return Poll::Pending;
                    }
                    Ok(step) => this.step = step,
                    Err(e) => {
                        this.step = Step::Done;
                        return Poll::Ready(Err(e));
                    }
                },
                Step::Done => panic!("a call polled after it ended"),
            }
        }
    }
}

impl<'s> SendCall<'s, '_> {
    /// Registers the call, with the waker of `cx` for its answer, and queues its
    /// request: the step that comes next.
    fn start(&mut self, cx: &TaskContext<'_>) -> Result<Step<'s>> {
        let Step::Start { frame, grace } = std::mem::replace(&mut self.step, Step::Done) else {
            unreachable!("started once")
        };
        let shared = self.shared;
        // A grace needs the entry to outlive the timeout: the call keeps its own timer.
        let due = match grace {
            Some(_) => Due::Own,
            None => shared.due(self.timeout),
        };
        let waker = Some(cx.waker().clone());
        let (call, stamp) = Waiting::register_stamped(shared, self.id, due, waker)?;
        let span = tracing::debug_span!(
            "call",
            method = self.method,
            id = self.id,
            peer = shared.id()
        );
        let unsent = shared.try_send_call(frame, stamp)?;
        if unsent.is_none() {
            call.queued();
            if call.swept().is_some() {
                return Ok(Step::Waiting { call, span });
            }
        }
        let rare = rare(shared, call, unsent, span, self.timeout, grace);
        Ok(Step::Rare(Box::pin(rare)))
    }
}

/// The rest of a call that did not find room in the queue (`unsent`), or keeps a timer
/// of its own: its answer (`None` at its timeout), and whether it was cancelled at its
/// timeout.
async fn rare(
    shared: &Shared,
    mut call: Waiting<'_>,
    unsent: Option<Outgoing>,
    span: tracing::Span,
    timeout: Duration,
    grace: Option<Duration>,
) -> Result<(Option<Answer>, bool)> {
    let swept = call.swept();
    let waiting = async {
        // With the sweep keeping the deadline, waiting for room gives up at it (for a
        // call the connection stamps, the same timeout from now: about its deadline).
        if let Some(frame) = unsent {
            let until = match swept {
                Some(Swept::At(deadline)) => Some(deadline),
                Some(Swept::Later) => Instant::now().checked_add(timeout),
                None => None,
            };
            if shared
                .send_when_room(frame, until)
                .await
                .transpose()?
                .is_none()
            {
                return Ok(None);
            }
            call.queued();
        }
        Ok::<_, Error>(call.answer(shared).await)
    };
    let mut cancelled = false;
    let answer = match swept {
        Some(_) => waiting.instrument(span).await?,
        None => {
            let first = tokio::time::timeout(timeout, waiting.instrument(span)).await;
            match (first, grace) {
                (Ok(answer), _) => answer?,
                (Err(_), Some(grace)) => {
                    cancelled = true;
                    call.cancel_and_wait(shared, grace).await
                }
                (Err(_), None) => None,
            }
        }
    };
    Ok((answer, cancelled))
}

/// A call's result from its answer: `None` is the timeout.
fn outcome(
    answer: Option<Answer>,
    method: &str,
    timeout: Duration,
    cancelled: bool,
) -> Result<Reply> {
    let Some(answer) = answer else {
        return Err(Error::timeout(Some(method), timeout));
    };
    match answer?.into_result(method) {
        // Stopped by our cancel, not a partial result: it timed out.
        Err(e)
            if cancelled
                && e.rpc()
                    .is_some_and(|e| e.code == ErrorCode::REQUEST_CANCELLED) =>
        {
            Err(Error::timeout(Some(method), timeout))
        }
        outcome => outcome,
    }
}

/// One of our calls from its registration in the pending map to its answer.
///
/// Dropped before the answer, it removes its entry, and once its request was queued
/// it tells the other side that the call was given up (see `cancel.rs`).
pub(crate) struct Waiting<'a> {
    // Declared before the guard, so dropped before it: the cancel is queued while the
    // entry is still there (answered or not, it waits to be taken), and a late answer
    // finds no one waiting.
    cancel: CancelOnDrop<'a>,
    guard: Guard<'a>,
    swept: Option<Swept>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // Answered but not taken yet (a batch given up while waiting on an earlier
        // call): no cancel for it.
        if self.guard.has_answer() {
            self.cancel.answered();
        }
    }
}

impl<'a> Waiting<'a> {
    /// Registers call `id`, due as `due` says.
    #[inline]
    pub(crate) fn register(shared: &'a Shared, id: u64, due: Due) -> Result<Self> {
        let (call, stamp) = Self::register_stamped(shared, id, due, None)?;
        if stamp {
            // Nothing queued after this wakes the connection's task for the stamp.
            shared.wake_task();
        }
        Ok(call)
    }

    /// As [`register`](Self::register), and whether the connection's task is still to
    /// be woken to stamp the call's deadline ([`Shared::try_send_call`] does it).
    /// `waker`: the caller's, to wake when the answer comes.
    #[inline]
    fn register_stamped(
        shared: &'a Shared,
        id: u64,
        due: Due,
        waker: Option<std::task::Waker>,
    ) -> Result<(Self, bool)> {
        let Registered {
            guard,
            deadline,
            wake,
        } = shared.register(id, due, waker)?;
        let stamp = wake && deadline == Some(Swept::Later);
        let call = Waiting {
            cancel: CancelOnDrop::new(shared, id),
            guard,
            swept: deadline,
        };
        Ok((call, stamp))
    }

    /// The deadline the connection's sweep keeps for this call; `None` when the caller
    /// keeps a timer of its own.
    pub(crate) fn swept(&self) -> Option<Swept> {
        self.swept
    }

    /// The request is in the outgoing queue: from now on, giving up tells the other side.
    pub(crate) fn queued(&self) {
        self.cancel.queued();
    }

    /// Waits for the answer: `None` once the sweep has passed the call's deadline.
    pub(crate) async fn answer(&mut self, shared: &Shared) -> Option<Answer> {
        std::future::poll_fn(|cx| self.poll_answer(cx, shared)).await
    }

    /// The answer, once it is there: `None` once the sweep has passed the call's
    /// deadline.
    #[inline(always)]
    fn poll_answer(&mut self, cx: &mut TaskContext<'_>, shared: &Shared) -> Poll<Option<Answer>> {
        // The entry leaves the map with its answer; none there means it is gone with
        // the connection.
        let answer = ready!(self.guard.poll_answer(cx))
            .unwrap_or_else(|| Some(Err(Error::Closed(shared.close_reason()))));
        // Past its deadline (`None`), the call was given up: the cancel goes out, as
        // when a timer of its own drops the call.
        if answer.is_some() {
            self.cancel.answered();
        }
        Poll::Ready(answer)
    }

    /// At the timeout of a call with a grace: tells the other side now, and waits up to
    /// `grace` for the answer (a cooperative handler's partial result). `None` when
    /// none came.
    async fn cancel_and_wait(&mut self, shared: &Shared, grace: Duration) -> Option<Answer> {
        if !self.cancel.cancel_now() {
            return None; // the request never went out
        }
        // A grace too long to be an instant (`Duration::MAX`) has no end.
        match Instant::now().checked_add(grace) {
            Some(until) => tokio::time::timeout_at(until, self.answer(shared))
                .await
                .ok()
                .flatten(),
            None => self.answer(shared).await,
        }
    }
}
