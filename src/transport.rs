//! What the engine reads and writes: a stream and a sink of [`Frame`]s.
//!
//! The engine never sees a WebSocket type. [`WebSocket`] adapts a tokio-tungstenite
//! stream; any other transport that yields and takes frames works the same way
//! (see [`Peer::start`](crate::Peer::start)). [`pair`] joins two in memory, to run two
//! peers (or a peer and a test) without a socket.

use std::fmt;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data as OpData, OpCode};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

#[cfg(feature = "fuzzing")]
pub(crate) mod echo;
mod memory;
mod read_ahead;
pub use memory::{pair, pair_with_capacity, Memory, DEFAULT_CAPACITY};
pub(crate) use read_ahead::ReadAhead;

/// The text of one frame: UTF-8, cheap to clone (a reference-counted buffer), so one
/// serialized broadcast is shared by every connection.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Text(Utf8Bytes);

impl Text {
    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// `bytes` as text, without a copy, if they are UTF-8 (a frame that crossed a
    /// cluster's bus).
    pub(crate) fn from_utf8(bytes: Bytes) -> Option<Text> {
        Utf8Bytes::try_from(bytes).ok().map(Text)
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

impl From<String> for Text {
    #[inline]
    fn from(s: String) -> Self {
        Text(Utf8Bytes::from(s))
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text(Utf8Bytes::from(s))
    }
}

impl From<Utf8Bytes> for Text {
    fn from(s: Utf8Bytes) -> Self {
        Text(s)
    }
}

impl From<Text> for Utf8Bytes {
    fn from(t: Text) -> Self {
        t.0
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One frame of a message-oriented transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A text frame: one JSON-RPC message or batch.
    Text(Text),
    /// A binary frame. JSON-RPC is text, so the engine ignores these (they still count
    /// as a sign of life for the keepalive).
    Binary(Bytes),
    /// A ping. The transport answers pings itself, as WebSocket libraries do.
    Ping(Bytes),
    /// A pong.
    Pong(Bytes),
    /// A close frame, with its code and reason when it has them.
    Close(Option<(u16, String)>),
}

/// Why a transport failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// An incoming message was larger than the limit. The engine closes with 1009.
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    MessageTooBig {
        /// The size seen so far (at least this big).
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The other side broke the WebSocket protocol. The engine closes with `code`, as
    /// RFC 6455 7.4.1 says: 1002 for a protocol error (reserved bits or opcodes, an
    /// unmasked client frame, a bad control frame or fragment, a malformed close),
    /// 1007 for text that is not UTF-8.
    #[error("protocol violation ({code}): {reason}")]
    Protocol {
        /// The close code to send.
        code: u16,
        /// What was wrong.
        reason: String,
    },
    /// Anything else: I/O, a connection reset.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// What the engine runs on: a stream of incoming frames and a sink of outgoing ones.
///
/// The stream ends (`None`) when the connection is done; an error ends it too.
pub trait Transport:
    Stream<Item = Result<Frame, TransportError>>
    + Sink<Frame, Error = TransportError>
    + Send
    + Unpin
    + 'static
{
}

impl<T> Transport for T where
    T: Stream<Item = Result<Frame, TransportError>>
        + Sink<Frame, Error = TransportError>
        + Send
        + Unpin
        + 'static
{
}

/// A tokio-tungstenite WebSocket as a [`Transport`].
///
/// Messages larger than 64 KiB go out as fragments of that size, so each
/// frame fits in tungstenite's capped write buffer (see `PeerConfig`), however large
/// the message.
#[derive(Debug)]
pub struct WebSocket<S> {
    inner: WebSocketStream<S>,
    /// What goes before any new frame. `None` until a message is large enough to
    /// fragment or the write buffer is full, then kept: every idle connection holds this
    /// adapter, and one pointer here rather than 88 bytes kept its task within a step of
    /// tokio's (see the driver's `Ahead`).
    pending: Option<Box<Pending>>,
}

/// What a [`WebSocket`] sends before any new frame.
#[derive(Debug, Default)]
struct Pending {
    /// A frame the write buffer had no room for yet: it goes first, after a flush.
    held: Option<Message>,
    /// What is left to send of a fragmented message.
    rest: Bytes,
}

/// The largest frame this adapter writes; a larger message is sent in fragments.
pub(crate) const FRAGMENT: usize = 64 * 1024;

impl<S> WebSocket<S> {
    /// Wraps an established WebSocket.
    pub fn new(inner: WebSocketStream<S>) -> Self {
        WebSocket {
            inner,
            pending: None,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocket<S> {
    /// Hands one message to tungstenite, keeping it if its buffer is full.
    #[inline]
    fn push(&mut self, msg: Message) -> Result<(), TransportError> {
        match Pin::new(&mut self.inner).start_send(msg) {
            Ok(()) => Ok(()),
            Err(tungstenite::Error::WriteBufferFull(msg)) => {
                self.pending.get_or_insert_default().held = Some(*msg);
                Ok(())
            }
            Err(e) => Err(from_ws_error(e)),
        }
    }

    /// Sends the first fragment of a message larger than [`FRAGMENT`] and keeps the
    /// rest, which `poll_ready` sends before anything else. Out of line: the frames
    /// of every other write need none of it.
    #[cold]
    fn start_fragments(&mut self, mut data: Bytes, kind: OpData) -> Result<(), TransportError> {
        let first = data.split_to(FRAGMENT);
        self.pending.get_or_insert_default().rest = data;
        self.push(Message::Frame(
            tungstenite::protocol::frame::Frame::message(first, OpCode::Data(kind), false),
        ))
    }

    /// Sends what is held and the rest of a fragmented message; ready once both are
    /// in tungstenite's buffer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        loop {
            let Some(pending) = self.pending.as_deref_mut() else {
                return Poll::Ready(Ok(()));
            };
            if pending.held.is_some() {
                // Emptied, the buffer takes any one frame: frames are at most FRAGMENT
                // bytes, under its cap. Until then the frame stays held (taken before a
                // flush that did not finish, it was lost: a frame missing on the wire).
                if let Err(e) = ready!(Pin::new(&mut self.inner).poll_flush(cx)) {
                    return Poll::Ready(Err(from_ws_error(e)));
                }
                if let Some(msg) = pending.held.take() {
                    if let Err(e) = Pin::new(&mut self.inner).start_send(msg) {
                        return Poll::Ready(Err(from_ws_error(e)));
                    }
                }
                continue;
            }
            if pending.rest.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if let Err(e) = ready!(Pin::new(&mut self.inner).poll_ready(cx)) {
                return Poll::Ready(Err(from_ws_error(e)));
            }
            let chunk = pending.rest.split_to(pending.rest.len().min(FRAGMENT));
            let last = pending.rest.is_empty();
            self.push(Message::Frame(
                tungstenite::protocol::frame::Frame::message(
                    chunk,
                    OpCode::Data(OpData::Continue),
                    last,
                ),
            ))?;
        }
    }
}

fn from_ws_error(e: tungstenite::Error) -> TransportError {
    match e {
        tungstenite::Error::Capacity(tungstenite::error::CapacityError::MessageTooLong {
            size,
            max_size,
        }) => TransportError::MessageTooBig {
            size,
            max: max_size,
        },
        tungstenite::Error::Utf8(reason) => TransportError::Protocol { code: 1007, reason },
        tungstenite::Error::Protocol(p) if is_violation(&p) => TransportError::Protocol {
            code: 1002,
            reason: p.to_string(),
        },
        other => TransportError::Other(Box::new(other)),
    }
}

/// Whether the other side's frames broke the protocol, as opposed to the link ending
/// (a reset) or our own use of a closed socket.
fn is_violation(e: &tungstenite::error::ProtocolError) -> bool {
    use tungstenite::error::ProtocolError as P;
    matches!(
        e,
        P::NonZeroReservedBits
            | P::UnmaskedFrameFromClient
            | P::MaskedFrameFromServer
            | P::FragmentedControlFrame
            | P::ControlFrameTooBig
            | P::UnknownControlFrameType(_)
            | P::UnknownDataFrameType(_)
            | P::UnexpectedContinueFrame
            | P::ExpectedFragment(_)
            | P::InvalidOpcode(_)
            | P::InvalidCloseSequence
    )
}

impl<S: AsyncRead + AsyncWrite + Unpin> Stream for WebSocket<S> {
    type Item = Result<Frame, TransportError>;

    // Always: out of line, it copied the message tokio-tungstenite had just written
    // through memory with loads wider than that write's stores, and waited for them
    // (perf, the rpc bench's (d): two fifths of its samples on the copy's second
    // load). Inlined, the reader takes the fields it needs.
    #[inline(always)]
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let msg = match ready!(Pin::new(&mut self.inner).poll_next(cx)) {
                None => return Poll::Ready(None),
                Some(Ok(msg)) => msg,
                // The closing handshake has completed: a normal end.
                Some(Err(tungstenite::Error::ConnectionClosed))
                | Some(Err(tungstenite::Error::AlreadyClosed)) => return Poll::Ready(None),
                Some(Err(e)) => return Poll::Ready(Some(Err(from_ws_error(e)))),
            };
            let frame = match msg {
                Message::Text(t) => Frame::Text(Text(t)),
                Message::Binary(b) => Frame::Binary(b),
                Message::Ping(b) => Frame::Ping(b),
                Message::Pong(b) => Frame::Pong(b),
                Message::Close(c) => Frame::Close(c.map(|c| (c.code.into(), c.reason.to_string()))),
                // Raw frames are only produced when writing.
                Message::Frame(_) => continue,
            };
            return Poll::Ready(Some(Ok(frame)));
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Sink<Frame> for WebSocket<S> {
    type Error = TransportError;

    #[inline]
    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // `pending` is made only once a frame has had to wait (a full write buffer, a
        // fragmented message). Until then, no call here on every frame's way out:
        // `poll_pending` returned its 32-byte result through memory, each time.
        if self.pending.is_some() {
            ready!(self.poll_pending(cx))?;
        }
        Pin::new(&mut self.inner)
            .poll_ready(cx)
            .map_err(from_ws_error)
    }

    // Always: with `#[inline]` rustc kept it out of line, and the frame it was given
    // through memory was read back with loads wider than the stores that wrote it.
    #[inline(always)]
    fn start_send(mut self: Pin<&mut Self>, frame: Frame) -> Result<(), Self::Error> {
        match frame {
            Frame::Text(t) if t.len() > FRAGMENT => {
                self.start_fragments(Bytes::from(t.0), OpData::Text)
            }
            Frame::Binary(b) if b.len() > FRAGMENT => self.start_fragments(b, OpData::Binary),
            other => self.push(message(other)),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.pending.is_some() {
            ready!(self.poll_pending(cx))?;
        }
        Pin::new(&mut self.inner)
            .poll_flush(cx)
            .map_err(from_ws_error)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // What cannot be sent (the other side closed first) is dropped: closing still
        // sends what tungstenite owes, the answer to that side's close frame.
        if ready!(self.poll_pending(cx)).is_err() {
            self.pending = None;
        }
        match ready!(Pin::new(&mut self.inner).poll_close(cx)) {
            Ok(()) | Err(tungstenite::Error::ConnectionClosed) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(from_ws_error(e))),
        }
    }
}

/// The tungstenite message for a frame.
#[inline]
fn message(frame: Frame) -> Message {
    match frame {
        Frame::Text(t) => Message::Text(t.0),
        Frame::Binary(b) => Message::Binary(b),
        Frame::Ping(b) => Message::Ping(b),
        Frame::Pong(b) => Message::Pong(b),
        Frame::Close(c) => Message::Close(c.map(|(code, reason)| CloseFrame {
            code: CloseCode::from(code),
            reason: reason.into(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::{SinkExt, StreamExt};
    use std::future::poll_fn;
    use std::time::Duration;
    use tokio_tungstenite::tungstenite::protocol::Role;

    async fn within<F: std::future::Future>(what: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(10), what)
            .await
            .expect("within 10 s")
    }

    /// A frame tungstenite's write buffer had no room for waits in the adapter. If the
    /// socket is not writable when the adapter next tries it (the other side reads
    /// slowly), the frame must still wait there, not be lost.
    #[tokio::test]
    async fn a_frame_held_for_room_survives_a_socket_that_is_not_writable_yet() {
        // Toward them a pipe of one byte: whatever we write beyond it waits for them to
        // read. Toward us, room for their ping.
        let (to_them_rx, to_them_tx) = tokio::io::simplex(1);
        let (to_us_rx, to_us_tx) = tokio::io::simplex(1024);
        let config = crate::config::PeerConfig::default().websocket();
        let ours = tokio::io::join(to_us_rx, to_them_tx);
        let mut ours = WebSocket::new(
            WebSocketStream::from_raw_socket(ours, Role::Server, Some(config)).await,
        );
        let theirs = tokio::io::join(to_them_rx, to_us_tx);
        let mut theirs = WebSocketStream::from_raw_socket(theirs, Role::Client, None).await;
        let text = |c: char, n: usize| Frame::Text(Text::from(c.to_string().repeat(n)));

        // The write buffer's 64 KiB exactly: kept in the buffer, not written.
        within(poll_fn(|cx| Pin::new(&mut ours).poll_ready(cx)))
            .await
            .unwrap();
        Pin::new(&mut ours)
            .start_send(text('a', 64 * 1024 - 4))
            .unwrap();
        // Their ping: reading it queues a pong behind it, which takes the buffer past
        // 64 KiB, so tungstenite writes: the pipe takes a byte.
        within(theirs.send(Message::Ping(Bytes::from_static(b"p"))))
            .await
            .unwrap();
        let read = within(ours.next()).await;
        assert!(matches!(read, Some(Ok(Frame::Ping(_)))), "{read:?}");
        // The sink still says ready, and a frame of 64 KiB does not fit the 128 KiB cap
        // beside what is buffered: the adapter holds it.
        within(poll_fn(|cx| Pin::new(&mut ours).poll_ready(cx)))
            .await
            .unwrap();
        Pin::new(&mut ours)
            .start_send(text('b', 64 * 1024))
            .unwrap();
        // A flush that cannot finish while they do not read.
        let flushed = poll_fn(|cx| Poll::Ready(Pin::new(&mut ours).poll_flush(cx))).await;
        assert!(flushed.is_pending(), "they have not read yet");

        // They read; everything goes out in order, the held frame included.
        let (texts, mut read) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = theirs.next().await {
                if let Message::Text(t) = msg {
                    let _ = texts.send((t.chars().next(), t.len()));
                }
            }
        });
        within(poll_fn(|cx| Pin::new(&mut ours).poll_flush(cx)))
            .await
            .unwrap();
        let first = within(read.recv()).await;
        let second = within(read.recv()).await;
        assert_eq!(first, Some((Some('a'), 64 * 1024 - 4)));
        assert_eq!(second, Some((Some('b'), 64 * 1024)), "the held frame");
    }
}
