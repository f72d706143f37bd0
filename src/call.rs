//! One way to call: the [`Caller`] trait, which a [`Peer`](crate::Peer), a
//! [`Reconnecting`](crate::Reconnecting) client and a cluster's
//! [`RemotePeer`](crate::cluster::RemotePeer) implement, the per-call options, and what
//! a call sends ([`Request`]) and gets back ([`Reply`]).
//!
//! A handle implements one method, [`Caller::send_request`]: send this request, written
//! once, as these options say. Everything else is written once here, for every handle:
//! [`call`](Caller::call) and [`request`](Caller::request) (by name, or by a typed
//! [`Method`] contract) return a [`Call`], which is sent when awaited and takes its
//! options on the way (`.timeout(d)`, `.cancel_grace(d)`, `.with_progress()`);
//! [`notify`](Caller::notify) and [`send`](Caller::send) send notifications. So a
//! function can take "anything I can call", and a new per-call option is one field of
//! [`CallOptions`] and one method of [`Call`].
//!
//! ```
//! use std::time::Duration;
//! use jsonrpc_peer::{connect, Caller, Router, Server};
//!
//! jsonrpc_peer::method!(Describe = "describe", () => String);
//!
//! /// Works with a Peer, a Reconnecting client, or a peer on another node.
//! async fn describe(other: &impl Caller) -> jsonrpc_peer::Result<String> {
//!     other.request(Describe, &()).timeout(Duration::from_secs(2)).await
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> jsonrpc_peer::Result<()> {
//!     let router = Router::new().handle(Describe, |_cx, ()| async { Ok("a server".into()) });
//!     let server = Server::bind("127.0.0.1:0").await?;
//!     let url = format!("ws://{}", server.local_addr()?);
//!     tokio::spawn(server.serve(router));
//!
//!     let peer = connect(&url, Router::new()).await?;
//!     assert_eq!(describe(&peer).await?, "a server");
//!     // By name, for a method known only at run time; the raw result, unparsed.
//!     let raw: jsonrpc_peer::Reply = peer.call("describe", ()).await?;
//!     assert_eq!(raw.get(), r#""a server""#);
//!     peer.close().await;
//!     Ok(())
//! }
//! ```
//!
//! Why an awaited builder rather than an options argument: the common call stays
//! `peer.call(m, p).await`, an option is named where it is used, and an option added
//! later changes no signature. The price is one boxed future per call (the options
//! decide what it awaits); [`Caller::notify`] and [`Caller::send`], which take no
//! options, are plain futures.
//!
//! A call whose params are not the contract's fails to compile where it is written
//! (``expected `i64`, found `&str` ``):
//!
//! ```compile_fail,E0308
//! # async fn run(peer: jsonrpc_peer::Peer) -> jsonrpc_peer::Result<()> {
//! use jsonrpc_peer::Caller;
//! jsonrpc_peer::method!(Subtract = "subtract", (i64, i64) => i64);
//! let d = peer.request(Subtract, &("42", 23)).await?;
//! # Ok(()) }
//! ```

mod reply;
mod request;

pub use reply::Reply;
pub use request::Request;

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::contract::{Method, Notification};
use crate::error::Result;
use crate::peer::Started;

/// Anything that can call the other side: a [`Peer`](crate::Peer), a
/// [`Reconnecting`](crate::Reconnecting) client, a cluster's
/// [`RemotePeer`](crate::cluster::RemotePeer), or a type of your own that forwards to
/// one of them. Bring it into scope (`use jsonrpc_peer::Caller;`) to call.
///
/// Implement [`send_request`](Self::send_request); the other methods are provided.
///
/// Every call ends: with its result, the other side's error
/// ([`Error::Rpc`](crate::Error::Rpc)), a timeout ([`Error::Timeout`](crate::Error::Timeout)),
/// or [`Error::Closed`](crate::Error::Closed) when the connection goes. A call whose
/// future is dropped leaves nothing behind, and tells the other side (a cancel
/// notification, see [`CancelStyle`](crate::CancelStyle)) if its request went out.
pub trait Caller: Send + Sync {
    /// Sends `request` as `options` say. For a call, waits for the answer and returns
    /// its raw result (`Some`); for a notification, returns `None` once it is queued.
    ///
    /// Every outgoing call and notification of a [`Peer`](crate::Peer) passes here;
    /// the other handles find their connection and pass it on.
    ///
    /// # Errors
    ///
    /// As for [`call`](Self::call).
    fn send_request(
        &self,
        request: Request<'_>,
        options: CallOptions,
    ) -> impl Future<Output = Result<Option<Reply>>> + Send;

    /// Calls `method` with `params` and reads the result as `R` (any
    /// `DeserializeOwned` type, or [`Reply`] for the raw result). Sent when awaited;
    /// options go on the returned [`Call`].
    ///
    /// Params must serialize to a JSON array or object; `()` (or `None`) sends none.
    /// The call waits at most the handle's call timeout (30 s unless
    /// [`PeerConfig::call_timeout`](crate::PeerConfig::call_timeout) says otherwise,
    /// or [`Call::timeout`]).
    ///
    /// # Errors
    ///
    /// [`Error::Rpc`](crate::Error::Rpc) when the other side answers with an error,
    /// [`Error::Timeout`](crate::Error::Timeout), [`Error::Closed`](crate::Error::Closed),
    /// [`Error::InvalidParams`](crate::Error::InvalidParams), or
    /// [`Error::Serialization`](crate::Error::Serialization) when the params cannot be
    /// written or the result does not fit `R`.
    fn call<'a, R: FromReply>(
        &'a self,
        method: &'a str,
        params: impl Serialize,
    ) -> Call<'a, Self, R> {
        Call::new(self, Request::call(method, params))
    }

    /// Calls the method `M`: [`call`](Self::call) with the name, the params type and
    /// the result type taken from the contract. Params that are one value (`i64`, a
    /// `String`, an enum's unit variant) go as a one-element array `[v]`, which is how
    /// the contract's handler reads them.
    ///
    /// # Errors
    ///
    /// As for [`call`](Self::call).
    fn request<M: Method>(&self, _method: M, params: &M::Params) -> Call<'_, Self, M::Result> {
        Call::new(self, Request::call(M::NAME, crate::message::typed(params)))
    }

    /// Sends a notification: no answer comes, and none is waited for.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`](crate::Error::Closed), or the params errors of
    /// [`call`](Self::call).
    fn notify(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> impl Future<Output = Result<()>> + Send {
        let request = Request::notification(method, params);
        async move {
            self.send_request(request?, CallOptions::default())
                .await
                .map(drop)
        }
    }

    /// Sends the notification `N`: [`notify`](Self::notify) with the name and the
    /// params type taken from the contract.
    ///
    /// # Errors
    ///
    /// As for [`notify`](Self::notify).
    fn send<N: Notification>(
        &self,
        _notification: N,
        params: &N::Params,
    ) -> impl Future<Output = Result<()>> + Send {
        self.notify(N::NAME, crate::message::typed(params))
    }

    /// The [`Peer`](crate::Peer) itself, when this handle is one: a [`Call`] awaited on
    /// a peer holds the peer's call in place, with no boxed future. Not for other
    /// handles to implement: nothing outside this crate can name its argument.
    #[doc(hidden)]
    fn peer(&self, _: Sealed) -> Option<&crate::Peer> {
        None
    }
}

/// The argument of [`Caller::peer`], which no other crate can name: so no other
/// crate implements or calls that method.
#[doc(hidden)]
#[derive(Debug)]
pub struct Sealed(());

/// What a call's result can be read as: any `DeserializeOwned` type, or the raw
/// [`Reply`] itself (to read later, or pass on unparsed).
pub trait FromReply: Sized {
    /// Reads the result.
    ///
    /// # Errors
    ///
    /// [`Error::Serialization`](crate::Error::Serialization) when it does not fit.
    fn from_reply(reply: Reply) -> Result<Self>;
}

impl<T: DeserializeOwned> FromReply for T {
    fn from_reply(reply: Reply) -> Result<Self> {
        reply.decode()
    }
}

impl FromReply for Reply {
    fn from_reply(reply: Reply) -> Result<Self> {
        Ok(reply)
    }
}

/// How one call is made. Every field has a default that defers to the handle's
/// settings; set them on a [`Call`] (`.timeout(d)`), or all at once with
/// [`Call::options`] when a function passes them on.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CallOptions {
    /// How long the call waits for its answer, waiting for room in the outgoing queue
    /// (and, for a [`Reconnecting`](crate::Reconnecting) client, for the link)
    /// included. `None`: the handle's call timeout.
    pub timeout: Option<Duration>,
    /// When the timeout passes, the call is cancelled (the other side is told); with a
    /// grace it then waits that much longer for the answer, so the partial result of a
    /// [cooperative](crate::MethodOptions::cooperative) handler reaches the caller
    /// (with the LSP form of cancel; a handler that is stopped answers `-32800`, which
    /// ends the call as the timeout it is). `None` (the default): the call ends at its
    /// timeout, and an answer that comes later is dropped. `Duration::MAX` waits as long
    /// as the answer takes. Not carried to a peer on another node of a cluster.
    pub cancel_grace: Option<Duration>,
    /// Progress values that may wait unread when the call asks for progress
    /// ([`Call::with_progress`]; default 64). The connection never waits for a slow
    /// reader: values that arrive while the queue is full are dropped (the answer
    /// never is).
    pub progress_queue: usize,
    /// Where progress values go, when asked for.
    pub(crate) progress: Option<mpsc::Sender<Reply>>,
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            timeout: None,
            cancel_grace: None,
            progress_queue: 64,
            progress: None,
        }
    }
}

impl CallOptions {
    /// The defaults: the handle's timeout, no grace, no progress.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`timeout`](Self::timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets [`cancel_grace`](Self::cancel_grace).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = Some(grace);
        self
    }

    /// Sets [`progress_queue`](Self::progress_queue).
    pub fn progress_queue(mut self, len: usize) -> Self {
        self.progress_queue = len;
        self
    }

    /// Whether the call asks the other side for progress.
    pub fn wants_progress(&self) -> bool {
        self.progress.is_some()
    }
}

/// A call on its way: sent when awaited (it implements [`IntoFuture`]), with its
/// options set on the way. From [`Caller::call`] and [`Caller::request`].
///
/// ```no_run
/// # async fn run(peer: jsonrpc_peer::Peer) -> jsonrpc_peer::Result<()> {
/// use std::time::Duration;
/// use jsonrpc_peer::Caller;
///
/// let d: i64 = peer.call("subtract", [42, 23]).timeout(Duration::from_secs(2)).await?;
/// # Ok(()) }
/// ```
#[must_use = "a call is sent when it is awaited"]
pub struct Call<'a, C: ?Sized, R> {
    caller: &'a C,
    request: Result<Request<'a>>,
    options: CallOptions,
    result: PhantomData<fn() -> R>,
}

/// What awaiting a [`Call`] runs: the call, and then its result read as `R`.
///
/// A call on a [`Peer`](crate::Peer) is held here as it is: no allocation of its own,
/// one fewer a call than a boxed future. A call on another handle (a
/// [`Reconnecting`](crate::Reconnecting) client, a cluster's
/// [`RemotePeer`](crate::cluster::RemotePeer), a [`Caller`] of your own) is its
/// [`send_request`](Caller::send_request)'s future, boxed: a trait's method returns a
/// type that cannot be named, so it cannot be held in place.
#[must_use = "a call is sent when it is polled"]
pub struct CallFuture<'a, R> {
    sending: Sending<'a>,
    result: PhantomData<fn() -> R>,
}

enum Sending<'a> {
    Peer(crate::peer::SendCall<'a, 'a>),
    Boxed(Pin<Box<dyn Future<Output = Result<Option<Reply>>> + Send + 'a>>),
    /// The request could not be written (its params); taken by the first poll.
    Failed(Option<crate::Error>),
}

impl<R: FromReply> Future for CallFuture<'_, R> {
    type Output = Result<R>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<R>> {
        let reply = match &mut self.get_mut().sending {
            Sending::Peer(call) => std::task::ready!(Pin::new(call).poll(cx)),
            Sending::Boxed(sent) => match std::task::ready!(sent.as_mut().poll(cx)) {
                Ok(Some(reply)) => Ok(reply),
                Ok(None) => Err(crate::Error::InvalidResponse(
                    "a call was sent as a notification".into(),
                )),
                Err(e) => Err(e),
            },
            Sending::Failed(e) => match e.take() {
                Some(e) => Err(e),
                None => panic!("a call polled after it ended"),
            },
        };
        Poll::Ready(reply.and_then(R::from_reply))
    }
}

impl<R> std::fmt::Debug for CallFuture<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = match self.sending {
            Sending::Peer(_) => "a peer",
            Sending::Boxed(_) => "another handle",
            Sending::Failed(_) => "nothing: its request failed",
        };
        f.debug_struct("CallFuture")
            .field("on", &on)
            .finish_non_exhaustive()
    }
}

impl<'a, C: ?Sized, R> Call<'a, C, R> {
    fn new(caller: &'a C, request: Result<Request<'a>>) -> Self {
        Call {
            caller,
            request,
            options: CallOptions::default(),
            result: PhantomData,
        }
    }

    /// Waits at most `timeout` for the answer, instead of the handle's call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = Some(timeout);
        self
    }

    /// After the timeout, waits `grace` more for the answer: see
    /// [`CallOptions::cancel_grace`].
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.options.cancel_grace = Some(grace);
        self
    }

    /// Sets every option at once, for a function that passes them on.
    pub fn options(mut self, options: CallOptions) -> Self {
        self.options = options;
        self
    }
}

impl<'a, C: Caller + ?Sized, R: FromReply + 'a> Call<'a, C, R> {
    /// Asks the other side for progress: the values its handler reports come through
    /// the returned [`Progress`] while the call runs (see `progress.rs` for the wire
    /// form), and the stream ends once the call has. The call is sent when the
    /// returned future is first polled.
    ///
    /// ```no_run
    /// # async fn run(peer: jsonrpc_peer::Peer) -> jsonrpc_peer::Result<()> {
    /// use std::time::Duration;
    /// use jsonrpc_peer::Caller;
    ///
    /// let (mut progress, export) = peer
    ///     .call::<String>("export", [100_000])
    ///     .timeout(Duration::from_secs(60))
    ///     .with_progress();
    /// let watch = async {
    ///     while let Some(value) = progress.next().await {
    ///         println!("progress: {}", value.get());
    ///     }
    /// };
    /// let (answer, ()) = tokio::join!(export, watch);
    /// println!("{}", answer?);
    /// # Ok(()) }
    /// ```
    pub fn with_progress(mut self) -> (Progress, CallFuture<'a, R>) {
        let (tx, rx) = mpsc::channel(self.options.progress_queue.max(1));
        self.options.progress = Some(tx);
        (Progress { rx }, self.into_future())
    }
}

impl<'a, C: Caller + ?Sized, R: FromReply + 'a> IntoFuture for Call<'a, C, R> {
    type Output = Result<R>;
    type IntoFuture = CallFuture<'a, R>;

    // Always inlined, as are `Peer::start_request` and `send_call`: the call's state is
    // then built where the caller's future holds it. Out of line it was built, copied
    // into the `CallFuture` and copied again (callgrind, the rpc bench's (b): two
    // `memcpy` calls and 228 instructions a call more).
    #[inline(always)]
    fn into_future(self) -> Self::IntoFuture {
        let sending = match self.request {
            Err(e) => Sending::Failed(Some(e)),
            Ok(request) => match self.caller.peer(Sealed(())) {
                Some(peer) => match peer.start_request(request, self.options) {
                    Started::Call(call) => Sending::Peer(call),
                    Started::Other(sent) => Sending::Boxed(sent),
                },
                // `send_request`'s future goes into the box as it is: an `async` block
                // would hold it twice (once captured, once awaited).
                None => Sending::Boxed(Box::pin(self.caller.send_request(request, self.options))),
            },
        };
        CallFuture {
            sending,
            result: PhantomData,
        }
    }
}

impl<C: ?Sized, R> std::fmt::Debug for Call<'_, C, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("request", &self.request)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The progress values of one call, in the order the handler sent them; the stream
/// ends when the call does. From [`Call::with_progress`].
///
/// Values wait here until read, up to [`CallOptions::progress_queue`] of them.
#[derive(Debug)]
pub struct Progress {
    rx: mpsc::Receiver<Reply>,
}

impl Progress {
    /// The next value, raw (read it with [`Reply::decode`]); `None` once the call has
    /// ended and every value was read.
    pub async fn next(&mut self) -> Option<Reply> {
        self.rx.recv().await
    }
}

impl futures_util::Stream for Progress {
    type Item = Reply;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Reply>> {
        self.rx.poll_recv(cx)
    }
}
