//! A connection whose client stops taking the answer: hyper waits for ever
//! on a write the client never reads (its receive window full), holding
//! the connection's slot. [`Stall`] fails such a write once it has made no
//! progress for `limit` (`[admin] body_timeout`), and hyper closes it.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

pub(super) struct Stall<T> {
    inner: T,
    limit: Duration,
    /// Armed while a write is pending; cleared by any progress.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> Stall<T> {
    pub(super) fn new(inner: T, limit: Duration) -> Self {
        Self { inner, limit, deadline: None }
    }

    /// `Pending` while within the limit, an error past it.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let limit = self.limit;
        let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took no answer bytes for {limit:?} ([admin] body_timeout)"),
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Stall<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stall<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(result) => {
                self.deadline = None;
                Poll::Ready(result)
            }
            Poll::Pending => self.stalled(cx).map(Err),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                self.deadline = None;
                Poll::Ready(result)
            }
            Poll::Pending => self.stalled(cx).map(Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::Stall;

    #[tokio::test]
    async fn a_write_the_client_never_takes_fails_after_the_limit_and_progress_rearms_it() {
        let (server, mut client) = tokio::io::duplex(64);
        let mut server = Stall::new(server, Duration::from_secs(1));
        // Taken as it is written: no stall, however long it takes overall.
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 256];
            for chunk in got.chunks_mut(64) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                client.read_exact(chunk).await.expect("read");
            }
            client
        });
        server.write_all(&[7u8; 320]).await.expect("each stall shorter than the limit");
        let _client = reader.await.expect("reader");
        // Not taken: the buffer fills and the write fails.
        let err = server.write_all(&[7u8; 256]).await.expect_err("stalled");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("body_timeout"), "{err}");
    }
}
