//! Incoming notifications of one contract, read as a stream.

use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use futures_util::Stream;
use tokio::sync::mpsc;

use super::Notification;
use crate::peer::Peer;
use crate::router::Router;

/// How many notifications a [`Router::stream`] holds before it pushes back (256, as
/// [`PeerConfig::notification_queue`](crate::PeerConfig::notification_queue)).
pub const DEFAULT_STREAM_CAPACITY: usize = 256;

/// The notifications `N` that arrive on a router's connections, in the order each
/// connection sent them: see [`Router::stream`].
///
/// Bounded: while it is full, the handler that feeds it waits, so the connection's
/// notification queue fills and the connection stops reading until the stream is
/// read again. The other side's writes then wait in the network, exactly as for a
/// slow notification handler. Once every connection that feeds it has ended,
/// [`next`](Self::next) returns `None` after what was left.
pub struct Notifications<N: Notification> {
    rx: mpsc::Receiver<(Peer, N::Params)>,
    _contract: PhantomData<fn() -> N>,
}

impl<N: Notification> Notifications<N> {
    /// The next notification's params; `None` once the router (and every connection
    /// serving it) is gone.
    pub async fn next(&mut self) -> Option<N::Params> {
        self.rx.recv().await.map(|(_, params)| params)
    }

    /// The next notification with the connection that sent it.
    pub async fn next_from(&mut self) -> Option<(Peer, N::Params)> {
        self.rx.recv().await
    }

    /// A notification already waiting, without waiting for one.
    pub fn try_next(&mut self) -> Option<N::Params> {
        self.rx.try_recv().ok().map(|(_, params)| params)
    }
}

impl<N: Notification> Stream for Notifications<N> {
    type Item = N::Params;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.rx
            .poll_recv(cx)
            .map(|item| item.map(|(_, params)| params))
    }
}

impl<N: Notification> std::fmt::Debug for Notifications<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifications")
            .field("name", &N::NAME)
            .field("waiting", &self.rx.len())
            .finish()
    }
}

impl<S: Send + Sync + 'static> Router<S> {
    /// Handles the notification `N` by handing its params to the returned stream,
    /// which holds up to [`DEFAULT_STREAM_CAPACITY`] of them.
    ///
    /// ```
    /// # async fn run(url: &str) -> jsonrpc_peer::Result<()> {
    /// use jsonrpc_peer::{connect, Router};
    /// jsonrpc_peer::notification!(Tick = "tick", (u64,));
    ///
    /// let (router, mut ticks) = Router::new().stream(Tick);
    /// let peer = connect(url, router).await?;
    /// while let Some((n,)) = ticks.next().await {
    ///     println!("tick {n}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// As [`notification`](Self::notification): a name registered twice.
    pub fn stream<N: Notification>(self, notification: N) -> (Self, Notifications<N>) {
        self.stream_with_capacity(notification, DEFAULT_STREAM_CAPACITY)
    }

    /// [`stream`](Self::stream) holding up to `capacity` notifications (at least 1).
    ///
    /// # Panics
    ///
    /// As [`notification`](Self::notification).
    pub fn stream_with_capacity<N: Notification>(
        self,
        _notification: N,
        capacity: usize,
    ) -> (Self, Notifications<N>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let router = self.notification(N::NAME, move |cx, params: N::Params| {
            let tx = tx.clone();
            async move {
                // Waiting here is the back-pressure: later notifications queue behind it.
                if tx.send((cx.peer().clone(), params)).await.is_err() {
                    tracing::debug!(
                        notification = N::NAME,
                        "notification stream dropped; notification dropped"
                    );
                }
            }
        });
        let stream = Notifications {
            rx,
            _contract: PhantomData,
        };
        (router, stream)
    }
}
