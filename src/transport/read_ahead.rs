//! [`ReadAhead`]: large reads while data keeps coming, no buffer while idle.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// How much is read at once during a burst: the size of tungstenite's write buffer,
/// which this crate also sets (`PeerConfig::websocket`).
pub(crate) const BURST: usize = 64 * 1024;

/// A byte stream whose reads come [`BURST`] bytes at a time while data keeps
/// arriving, and which holds no buffer of its own while the connection is idle.
///
/// tungstenite reads at most its read buffer's size at once: 2 KiB by default
/// (`PeerConfig::read_buffer_size`), small because every idle connection holds it. A
/// burst of small frames, a server's stream of notifications say, then cost a system
/// call and a pass of tungstenite's reading code every 2 KiB: on the rpc bench's (d),
/// the receiving side took 10% to 18% more time than with 64 KiB reads (PERF-NOTES,
/// "Stop 59"). Here two reads in a row that fill the reader's buffer to the brim (more
/// is waiting) make the next ones go through a buffer of 64 KiB, handed out from memory;
/// once that buffer is drained and the socket has nothing more, the buffer goes back
/// to the thread (one kept per thread, for its next burst), and reads go straight to
/// the reader's buffer again. A read buffer of 64 KiB or more is never read ahead of.
///
/// One pointer inline: every idle connection's task holds this, and a server
/// connection's task sits at the end of one of tokio's 128-byte steps (the driver's
/// unit test).
#[derive(Debug)]
pub(crate) struct ReadAhead<S> {
    inner: S,
    /// During a burst: what was read ahead. After one read filled to the brim: a
    /// burst with no buffer yet. `None` (no allocation) otherwise.
    burst: Option<Box<Burst>>,
}

thread_local! {
    /// The buffer of the last burst this thread ended, for the next one to take: a
    /// 64 KiB block freed and allocated again at every burst took glibc's slow paths
    /// (callgrind, the rpc bench's (b) with a burst started at every batch: 11,175 ->
    /// 11,638 instructions a call, most of the difference in `_int_malloc` and
    /// `_int_free`). One block per thread at most, whatever the connections.
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A buffer for a burst: this thread's spare, or a new one.
fn take_buffer() -> Vec<u8> {
    // A thread tearing down its locals has none to give.
    let spare = SPARE.try_with(Cell::take).unwrap_or_default();
    match spare.capacity() >= BURST {
        true => spare,
        false => Vec::with_capacity(BURST),
    }
}

/// Keeps a burst's buffer for the next burst on this thread.
fn give_back(mut buf: Vec<u8>) {
    buf.clear();
    // A thread tearing down its locals (a runtime dropping its tasks there) frees it.
    let _ = SPARE.try_with(|spare| spare.set(buf));
}

/// A burst's buffer: `buf[start..]` is read, not handed out yet.
#[derive(Debug)]
struct Burst {
    buf: Vec<u8>,
    start: usize,
}

impl Burst {
    /// Hands out what was read ahead, as much as `out` takes.
    fn hand_out(&mut self, out: &mut ReadBuf<'_>) {
        let n = out.remaining().min(self.buf.len() - self.start);
        out.put_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
    }
}

impl<S> ReadAhead<S> {
    pub(crate) fn new(inner: S) -> Self {
        ReadAhead { inner, burst: None }
    }

    /// Ends a burst, its buffer kept for the thread's next.
    fn end_burst(&mut self) {
        if let Some(burst) = self.burst.take() {
            give_back(burst.buf);
        }
    }
}

impl<S> Drop for ReadAhead<S> {
    fn drop(&mut self) {
        self.end_burst();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let burst = match &mut this.burst {
            Some(burst) if burst.buf.capacity() > 0 => burst,
            // No burst (or one read filled so far): straight into the reader's buffer.
            // Two reads in a row filled to the brim start a burst; pipelined calls
            // that fill one read a batch never do.
            armed => {
                let room = out.remaining();
                ready!(Pin::new(&mut this.inner).poll_read(cx, out))?;
                let brim = room > 0 && room < BURST && out.remaining() == 0;
                *armed = match (armed.take(), brim) {
                    (_, false) => None,
                    (None, true) => Some(Box::new(Burst {
                        buf: Vec::new(),
                        start: 0,
                    })),
                    (Some(mut burst), true) => {
                        burst.buf = take_buffer();
                        Some(burst)
                    }
                };
                return Poll::Ready(Ok(()));
            }
        };
        if burst.start < burst.buf.len() {
            burst.hand_out(out);
            return Poll::Ready(Ok(()));
        }
        // The next chunk, read into the buffer's room (not zeroed first).
        burst.buf.clear();
        burst.start = 0;
        match pin!(this.inner.read_buf(&mut burst.buf)).poll(cx) {
            Poll::Ready(Ok(n)) => {
                burst.hand_out(out);
                // Nothing read: the end of the stream, handed on as such.
                if n == 0 {
                    this.end_burst();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The burst is over: the buffer goes, until the next.
            Poll::Pending => {
                this.end_burst();
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadAhead<S> {
    #[inline]
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    #[inline]
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    #[inline]
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Reads of `size` bytes until the end, through `ReadAhead`: what it read.
    async fn read_all(stream: &mut ReadAhead<tokio::io::DuplexStream>, size: usize) -> Vec<u8> {
        let mut all = Vec::new();
        let mut buf = vec![0; size];
        for _ in 0..100_000 {
            let n = stream.read(&mut buf).await.unwrap();
            if n == 0 {
                return all;
            }
            all.extend_from_slice(&buf[..n]);
        }
        panic!("no end within 100,000 reads");
    }

    #[tokio::test]
    async fn bytes_come_out_in_order_whatever_the_reads_and_the_burst_buffer_goes() {
        let data: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
        for size in [1, 7, 2048, 5000, 70_000] {
            let (mut tx, rx) = tokio::io::duplex(100_000);
            let mut rx = ReadAhead::new(rx);
            let sent = data.clone();
            let writer = tokio::spawn(async move {
                for chunk in sent.chunks(7_001) {
                    tx.write_all(chunk).await.unwrap();
                }
            });
            assert_eq!(read_all(&mut rx, size).await, data, "reads of {size}");
            writer.await.unwrap();
            assert!(
                rx.burst.is_none(),
                "reads of {size}: nothing held at the end"
            );
        }
    }

    /// The read buffer's capacity during a burst, 0 without one.
    fn held(rx: &ReadAhead<tokio::io::DuplexStream>) -> usize {
        rx.burst.as_ref().map_or(0, |b| b.buf.capacity())
    }

    #[tokio::test]
    async fn a_burst_takes_the_buffer_and_an_idle_stream_gives_it_back() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut rx = ReadAhead::new(rx);
        let mut buf = [0; 2048];
        // A small read: no burst.
        tx.write_all(&[1; 100]).await.unwrap();
        assert_eq!(rx.read(&mut buf).await.unwrap(), 100);
        assert_eq!(held(&rx), 0);
        // One read filled to the brim, then one not: no burst (pipelined calls).
        tx.write_all(&[2; 3000]).await.unwrap();
        assert_eq!(rx.read(&mut buf).await.unwrap(), 2048);
        assert_eq!(rx.read(&mut buf).await.unwrap(), 3000 - 2048);
        assert!(rx.burst.is_none());
        // Two filled to the brim: the next reads ahead, the rest in one go.
        tx.write_all(&[2; 50_000]).await.unwrap();
        assert_eq!(rx.read(&mut buf).await.unwrap(), 2048);
        assert_eq!(held(&rx), 0);
        assert_eq!(rx.read(&mut buf).await.unwrap(), 2048);
        assert_eq!(held(&rx), BURST);
        assert_eq!(rx.read(&mut buf).await.unwrap(), 2048);
        let burst = rx.burst.as_ref().unwrap();
        assert_eq!(
            burst.buf.len(),
            50_000 - 2 * 2048,
            "the rest read in one go"
        );
        let mut rest = 50_000 - 3 * 2048;
        for _ in 0..100 {
            if rest == 0 {
                break;
            }
            rest -= rx.read(&mut buf).await.unwrap();
        }
        assert_eq!(rest, 0);
        // Drained, and nothing waiting: the next read gives the buffer back, and
        // waits.
        let waiting = futures_util::FutureExt::now_or_never(rx.read(&mut buf));
        assert!(waiting.is_none());
        assert_eq!(held(&rx), 0);
        tx.write_all(&[3; 10]).await.unwrap();
        assert_eq!(rx.read(&mut buf).await.unwrap(), 10);
        assert_eq!(held(&rx), 0);
    }

    #[tokio::test]
    async fn a_read_buffer_as_large_as_a_burst_is_never_read_ahead_of() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut rx = ReadAhead::new(rx);
        tx.write_all(&[7; 4 * BURST]).await.unwrap();
        let mut buf = vec![0; BURST];
        for _ in 0..4 {
            assert_eq!(rx.read(&mut buf).await.unwrap(), BURST);
            assert_eq!(held(&rx), 0);
        }
    }
}
