//! Two transports joined in memory: what one end sends, the other reads.
//!
//! Each direction is a queue of at most `capacity` frames. An end whose queue toward the
//! other is full is a full sink (`poll_ready` is pending) until the other end reads, as
//! a socket is when its peer stops reading; so a test can make a sink full by simply not
//! reading the other end. Pings are answered by the end that reads them, and a closed
//! or dropped end ends the other's stream, as a WebSocket does.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures_util::{Sink, Stream};

use super::{Frame, TransportError};

/// The frames each direction may hold when [`pair`] is used.
pub const DEFAULT_CAPACITY: usize = 64;

/// One direction: frames on their way, and who waits on them.
#[derive(Default)]
struct Lane {
    frames: VecDeque<Frame>,
    /// A pong owed to the other side. It does not count against the capacity, and a
    /// newer one replaces it, as WebSocket libraries do.
    pong: Option<Frame>,
    /// The writing end closed (or went): once `frames` is empty the reader sees the end.
    closed: bool,
    /// The reading end went: writes fail.
    reader_gone: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

struct Link {
    capacity: usize,
    lanes: Mutex<[Lane; 2]>,
}

impl Link {
    fn lanes(&self) -> MutexGuard<'_, [Lane; 2]> {
        crate::sync::lock(&self.lanes)
    }
}

/// One end of an in-memory [`Transport`](super::Transport) pair; see [`pair`].
pub struct Memory {
    link: Arc<Link>,
    /// The lane this end writes into; it reads the other one.
    side: usize,
}

/// Two joined in-memory transports, each direction holding at most
/// [`DEFAULT_CAPACITY`] frames. Two peers run over it without a socket:
///
/// ```
/// use std::sync::Arc;
/// use jsonrpc_peer::{transport, Caller, CloseReason, Context, Peer, PeerConfig, Router, RpcError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> jsonrpc_peer::Result<()> {
/// let (a, b) = transport::pair();
/// let add = Router::new().method("add", |_cx: Context, (x, y): (i64, i64)| async move {
///     Ok::<_, RpcError>(x + y)
/// });
/// let server = Peer::start(b, Arc::new(add), &PeerConfig::default());
/// let client = Peer::start(a, Arc::new(Router::new()), &PeerConfig::default());
/// assert_eq!(client.call::<i64>("add", (2, 3)).await?, 5);
/// client.close().await;
/// assert!(matches!(server.closed().await, CloseReason::Remote { code: 1000, .. }));
/// # Ok(()) }
/// ```
pub fn pair() -> (Memory, Memory) {
    pair_with_capacity(DEFAULT_CAPACITY)
}

/// [`pair`] with `capacity` frames per direction (at least one). With a small one, an
/// end whose other end does not read soon has a full sink.
pub fn pair_with_capacity(capacity: usize) -> (Memory, Memory) {
    let link = Arc::new(Link {
        capacity: capacity.max(1),
        lanes: Mutex::new([Lane::default(), Lane::default()]),
    });
    (
        Memory {
            link: link.clone(),
            side: 0,
        },
        Memory { link, side: 1 },
    )
}

fn closed() -> TransportError {
    TransportError::Other("the other end of the in-memory transport is gone".into())
}

impl Memory {
    /// How many frames this end has sent that the other end has not read yet.
    pub fn unread(&self) -> usize {
        self.link.lanes()[self.side].frames.len()
    }
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("side", &self.side)
            .field("unread", &self.unread())
            .finish()
    }
}

impl Stream for Memory {
    type Item = Result<Frame, TransportError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut lanes = self.link.lanes();
        let (mine, theirs) = (self.side, 1 - self.side);
        let lane = &mut lanes[theirs];
        let frame = lane.pong.take().or_else(|| lane.frames.pop_front());
        let Some(frame) = frame else {
            if lane.closed {
                return Poll::Ready(None);
            }
            lane.reader = Some(cx.waker().clone());
            return Poll::Pending;
        };
        if let Some(writer) = lane.writer.take() {
            writer.wake();
        }
        if let Frame::Ping(payload) = &frame {
            // Answered by the transport, as a WebSocket library does.
            let back = &mut lanes[mine];
            if !back.closed {
                back.pong = Some(Frame::Pong(payload.clone()));
                if let Some(reader) = back.reader.take() {
                    reader.wake();
                }
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }
}

impl Sink<Frame> for Memory {
    type Error = TransportError;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let mut lanes = self.link.lanes();
        let lane = &mut lanes[self.side];
        if lane.reader_gone || lane.closed {
            return Poll::Ready(Err(closed()));
        }
        if lane.frames.len() >= self.link.capacity {
            lane.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, frame: Frame) -> Result<(), Self::Error> {
        let mut lanes = self.link.lanes();
        let lane = &mut lanes[self.side];
        if lane.reader_gone || lane.closed {
            return Err(closed());
        }
        // `poll_ready` said there is room; a caller that did not ask still gets its
        // frame queued (a sink may accept more than it promised).
        lane.frames.push_back(frame);
        if let Some(reader) = lane.reader.take() {
            reader.wake();
        }
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Frames are visible to the other end as soon as they are sent.
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let mut lanes = self.link.lanes();
        let lane = &mut lanes[self.side];
        lane.closed = true;
        if let Some(reader) = lane.reader.take() {
            reader.wake();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let mut lanes = self.link.lanes();
        let (mine, theirs) = (self.side, 1 - self.side);
        lanes[mine].closed = true;
        if let Some(reader) = lanes[mine].reader.take() {
            reader.wake();
        }
        lanes[theirs].reader_gone = true;
        if let Some(writer) = lanes[theirs].writer.take() {
            writer.wake();
        }
    }
}
