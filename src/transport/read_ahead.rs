//! [`ReadAhead`]: large reads while data keeps coming, no buffer while idle.

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// How much is read at once while data keeps coming.
pub(crate) const READ_AHEAD: usize = 64 * 1024;

/// A byte stream whose reads come [`READ_AHEAD`] bytes at a time while data keeps
/// arriving, and which holds no buffer of its own while the connection is idle.
///
/// tungstenite reads at most its read buffer's size at once: 2 KiB by default
/// (`PeerConfig::read_buffer_size`), small because every idle connection holds it. A
/// burst of small frames, a server's stream of notifications say, then cost a system
/// call and a pass of tungstenite's reading code every 2 KiB: on the rpc bench's (d),
/// the receiving side spent a fifth of its time more than with 64 KiB. Here two reads
/// in a row that fill the reader's buffer to the brim (more is waiting) make the next
/// ones go through a buffer of 64 KiB, handed out from memory; once that buffer is
/// drained and the socket has nothing more, the buffer is freed, and reads go
/// straight to the reader's buffer again. Pipelined calls that fill 2 KiB once a burst
/// never take it.
#[derive(Debug)]
pub(crate) struct ReadAhead<S> {
    inner: S,
    /// Read ahead, not handed out yet: `ahead[start..]`. No allocation unless a burst
    /// is under way.
    ahead: Vec<u8>,
    start: usize,
    /// Reads in a row that filled the reader's buffer.
    brim: u8,
}

impl<S> ReadAhead<S> {
    pub(crate) fn new(inner: S) -> Self {
        ReadAhead {
            inner,
            ahead: Vec::new(),
            start: 0,
            brim: 0,
        }
    }

    /// Hands out what was read ahead.
    fn hand_out(&mut self, out: &mut ReadBuf<'_>) {
        let n = out.remaining().min(self.ahead.len() - self.start);
        out.put_slice(&self.ahead[self.start..self.start + n]);
        self.start += n;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.start < this.ahead.len() {
            this.hand_out(out);
            return Poll::Ready(Ok(()));
        }
        if this.ahead.capacity() == 0 {
            // No burst: straight into the reader's buffer.
            let room = out.remaining();
            ready!(Pin::new(&mut this.inner).poll_read(cx, out))?;
            this.brim = match room > 0 && out.remaining() == 0 {
                true => this.brim + 1,
                false => 0,
            };
            if this.brim == 2 {
                this.brim = 0;
                this.ahead = Vec::with_capacity(READ_AHEAD);
            }
            return Poll::Ready(Ok(()));
        }
        // A burst: the next chunk, read into the buffer's room (not zeroed first).
        this.ahead.clear();
        this.start = 0;
        let read = pin!(this.inner.read_buf(&mut this.ahead)).poll(cx);
        match read {
            // Nothing read: the end of the stream, handed on as such.
            Poll::Ready(Ok(0)) => {
                this.ahead = Vec::new();
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Ok(_)) => {
                this.hand_out(out);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The burst is over: the buffer goes, until the next.
            Poll::Pending => {
                this.ahead = Vec::new();
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
            assert_eq!(
                rx.ahead.capacity(),
                0,
                "reads of {size}: nothing held at the end"
            );
        }
    }

    #[tokio::test]
    async fn a_burst_takes_the_buffer_and_an_idle_stream_gives_it_back() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut rx = ReadAhead::new(rx);
        let mut buf = [0; 2048];
        // A small read: no burst.
        tx.write_all(&[1; 100]).await.unwrap();
        assert_eq!(rx.read(&mut buf).await.unwrap(), 100);
        assert_eq!(rx.ahead.capacity(), 0);
        // Two reads filled to the brim: the third reads ahead.
        tx.write_all(&[2; 50_000]).await.unwrap();
        assert_eq!(rx.read(&mut buf).await.unwrap(), 2048);
        assert_eq!(rx.read(&mut buf).await.unwrap(), 2048);
        assert_eq!(rx.ahead.capacity(), READ_AHEAD);
        assert_eq!(rx.read(&mut buf).await.unwrap(), 2048);
        assert_eq!(rx.ahead.len(), 50_000 - 2 * 2048, "the rest read in one go");
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
        assert_eq!(rx.ahead.capacity(), 0);
        tx.write_all(&[3; 10]).await.unwrap();
        assert_eq!(rx.read(&mut buf).await.unwrap(), 10);
        assert_eq!(rx.ahead.capacity(), 0);
    }
}
