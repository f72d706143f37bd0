//! Incoming notifications, run one after another in the order they arrived.
//!
//! The sender's order is usually meaningful (updates, chat lines). When none is queued
//! or running, the next one is polled once on the connection's task, like a call; what
//! does not finish there (and what arrives while one is unfinished) goes to one task per
//! connection, in order, made the first time it is needed. When that task's queue is
//! full, notifications wait in a backlog and the connection stops reading.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::router::{Context, HandlerFuture, NotificationFn, Scope};
use crate::transport::Text;

use super::run::{poll_once, FirstPoll};

/// One notification for the ordered notification task.
enum NotificationJob<S> {
    /// Not started yet.
    Start {
        handler: Arc<NotificationFn<S>>,
        frame: Text,
        params: Option<Range<usize>>,
    },
    /// Started on the connection's task and not finished by its first poll; or an
    /// ordered call, made ready to run to its answer.
    Resume(HandlerFuture<()>),
}

/// Waits for room in the notification task's queue.
type Room<S> = Pin<Box<dyn Future<Output = Option<mpsc::OwnedPermit<NotificationJob<S>>>> + Send>>;

/// The task that runs notifications in order, and its queue.
struct Task<S> {
    tx: mpsc::Sender<NotificationJob<S>>,
    /// Jobs sent to the task and not yet finished. While it is zero, nothing is queued
    /// or running, so the connection may start the next notification itself in order.
    busy: Arc<AtomicUsize>,
    /// Woken when `busy` drops to zero, for a graceful close.
    idle: Arc<futures_util::task::AtomicWaker>,
    task: JoinHandle<()>,
}

/// A connection's ordered notifications. Until one does not finish where it started,
/// nothing is spawned, queued or waiting: an idle connection keeps one pointer here
/// (its task's memory comes in steps of 128 bytes; see `Ahead`).
pub(super) struct Ordered<S> {
    spawned: Option<Box<Spawned<S>>>,
    queue: usize,
}

/// The notification task, once made, and what waits for it.
struct Spawned<S> {
    task: Option<Task<S>>,
    /// Notifications that did not fit the queue. While any wait here, reading stops.
    backlog: VecDeque<NotificationJob<S>>,
    /// Waits for room in the queue while the backlog is not empty.
    room: Option<Room<S>>,
    /// The task, once stopped, until it is gone.
    stopping: Option<JoinHandle<()>>,
}

impl<S> Spawned<S> {
    fn new() -> Self {
        Spawned {
            task: None,
            backlog: VecDeque::new(),
            room: None,
            stopping: None,
        }
    }

    fn is_idle(&self) -> bool {
        self.task
            .as_ref()
            .is_none_or(|n| self.backlog.is_empty() && n.busy.load(Ordering::Acquire) == 0)
    }
}

impl<S: Send + Sync + 'static> Ordered<S> {
    pub(super) fn new(queue: usize) -> Self {
        Ordered {
            spawned: None,
            queue,
        }
    }

    /// The notification task, if made and not stopped.
    fn task(&self) -> Option<&Task<S>> {
        self.spawned.as_ref()?.task.as_ref()
    }

    /// The backlog, when anything waits in it (a new job then goes behind it).
    fn waiting_backlog(&mut self) -> Option<&mut VecDeque<NotificationJob<S>>> {
        let spawned = self.spawned.as_deref_mut()?;
        (!spawned.backlog.is_empty()).then_some(&mut spawned.backlog)
    }

    /// Whether notifications wait for room: reading stops until they have it.
    pub(super) fn blocked(&self) -> bool {
        (self.spawned.as_ref()).is_some_and(|spawned| !spawned.backlog.is_empty())
    }

    /// Whether no ordered call or notification is queued or running.
    pub(super) fn is_idle(&self) -> bool {
        self.spawned.as_deref().is_none_or(Spawned::is_idle)
    }

    /// Ready once [`is_idle`](Self::is_idle): a graceful close waits for ordered work
    /// as for the other running calls.
    pub(super) fn poll_idle(&self, cx: &mut TaskContext<'_>) -> Poll<()> {
        if let Some(n) = self.task() {
            n.idle.register(cx.waker());
        }
        match self.is_idle() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }

    /// Stops the task and forgets what waits.
    pub(super) fn stop(&mut self) {
        let Some(spawned) = self.spawned.as_deref_mut() else {
            return;
        };
        if let Some(task) = spawned.task.take() {
            task.task.abort();
            spawned.stopping = Some(task.task);
        }
        spawned.backlog.clear();
        spawned.room = None;
    }

    /// Waits until the task stopped by [`stop`](Self::stop) is gone, with the handler
    /// it was running.
    pub(super) async fn stopped(&mut self) {
        if let Some(task) = self.spawned.as_mut().and_then(|s| s.stopping.take()) {
            let _ = task.await;
        }
    }

    /// Moves backlogged notifications into the queue as room appears. Ready when one
    /// moved (or the queue is gone).
    pub(super) fn poll_room(&mut self, cx: &mut TaskContext<'_>) -> Poll<()> {
        let Some(spawned) = self.spawned.as_deref_mut() else {
            return Poll::Pending;
        };
        if spawned.backlog.is_empty() {
            return Poll::Pending;
        }
        let Some(n) = &spawned.task else {
            return Poll::Pending;
        };
        let room = spawned.room.get_or_insert_with(|| {
            let tx = n.tx.clone();
            Box::pin(async move { tx.reserve_owned().await.ok() })
        });
        let permit = std::task::ready!(room.as_mut().poll(cx));
        spawned.room = None;
        if let (Some(permit), Some(job)) = (permit, spawned.backlog.pop_front()) {
            n.busy.fetch_add(1, Ordering::AcqRel);
            permit.send(job);
        }
        Poll::Ready(())
    }

    /// Runs a notification after every one before it: at once (polled once here) when
    /// none is queued or running, else on the connection's notification task.
    pub(super) fn push(
        &mut self,
        handler: &Arc<NotificationFn<S>>,
        frame: &Text,
        params: Option<Range<usize>>,
        scope: &Arc<Scope<S>>,
    ) {
        if let Some(backlog) = self.waiting_backlog() {
            backlog.push_back(NotificationJob::Start {
                handler: handler.clone(),
                frame: frame.clone(),
                params,
            });
            return;
        }
        let idle = (self.task()).is_none_or(|n| n.busy.load(Ordering::Acquire) == 0);
        let job = if idle {
            // Nothing before it is queued or running: it may start here, in order.
            let cx = Context::new(scope);
            match poll_once(|| handler(cx, frame, params)) {
                FirstPoll::Done(()) => return,
                FirstPoll::Waiting(fut) => NotificationJob::Resume(fut),
                FirstPoll::Panicked => {
                    tracing::error!("a notification handler panicked");
                    return;
                }
            }
        } else {
            NotificationJob::Start {
                handler: handler.clone(),
                frame: frame.clone(),
                params,
            }
        };
        self.enqueue(job, scope);
    }

    /// Runs an ordered call after every notification and ordered call before it. `job`
    /// runs the call to its answer and sends it; it is never polled here, so the
    /// answer always goes out from the notification task.
    pub(super) fn push_call(&mut self, job: HandlerFuture<()>, scope: &Arc<Scope<S>>) {
        let job = NotificationJob::Resume(job);
        if let Some(backlog) = self.waiting_backlog() {
            backlog.push_back(job);
            return;
        }
        self.enqueue(job, scope);
    }

    /// Sends `job` to the notification task (made if needed), or to the backlog when
    /// its queue is full.
    fn enqueue(&mut self, job: NotificationJob<S>, scope: &Arc<Scope<S>>) {
        let queue = self.queue;
        let spawned = self.spawned.get_or_insert_with(|| Box::new(Spawned::new()));
        let n = spawned.task.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel(queue);
            let busy = Arc::new(AtomicUsize::new(0));
            let idle = Arc::new(futures_util::task::AtomicWaker::new());
            let cx = Context::new(scope);
            Task {
                tx,
                busy: busy.clone(),
                idle: idle.clone(),
                task: tokio::spawn(notification_loop(rx, cx, busy, idle)),
            }
        });
        n.busy.fetch_add(1, Ordering::AcqRel);
        match n.tx.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(job)) => {
                n.busy.fetch_sub(1, Ordering::AcqRel);
                spawned.backlog.push_back(job);
            }
            // The task is gone only once the connection ends.
            Err(mpsc::error::TrySendError::Closed(_)) => {
                n.busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

async fn notification_loop<S: Send + Sync + 'static>(
    mut rx: mpsc::Receiver<NotificationJob<S>>,
    cx: Context<S>,
    busy: Arc<AtomicUsize>,
    idle: Arc<futures_util::task::AtomicWaker>,
) {
    while let Some(job) = rx.recv().await {
        let fut = match job {
            NotificationJob::Start {
                handler,
                frame,
                params,
            } => std::panic::catch_unwind(AssertUnwindSafe(|| handler(cx.clone(), &frame, params))),
            NotificationJob::Resume(fut) => Ok(fut),
        };
        let finished = match fut {
            Ok(fut) => AssertUnwindSafe(fut).catch_unwind().await,
            Err(panic) => Err(panic),
        };
        if finished.is_err() {
            tracing::error!("a notification handler panicked");
        }
        // Released after the handler is done, so the connection that sees zero also sees
        // everything this handler did before it starts the next one.
        if busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            idle.wake();
        }
    }
}
