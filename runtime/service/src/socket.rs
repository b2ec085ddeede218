//! The socket under ruled's own connections (the subscription and the
//! hot path's [`crate::direct`] ones), registered with the runtime for
//! readability only (docs/engine.md#cpu-per-notification).
//!
//! tokio registers a socket for both directions. On a unix socket the
//! kernel then reports the socket writable each time Redis reads a
//! request from it, which, when the reply is not there yet, wakes the
//! idle runtime for nothing (0.25 times a notification, measured). A
//! request here is written straight to the socket, which takes it whole
//! but in a flood; only a write that would block registers the socket for
//! writability too, from then on.
//!
//! A `rediss://` connection keeps tokio's own socket under its TLS, which
//! writes when it needs to, not only when ruled does.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// A stream socket of std's (`UnixStream`, `TcpStream`): what [`Socket`]
/// needs of it.
pub(crate) trait Raw: AsRawFd + Send + Sync + Unpin + 'static {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_some(&self, buf: &[u8]) -> io::Result<usize>;
    fn shutdown_write(&self) -> io::Result<()>;
}

/// `Raw` for std's stream sockets: both read and write through `&self`.
macro_rules! raw_socket {
    ($($socket:ty),+) => {$(
        impl Raw for $socket {
            fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
                (&*self).read(buf)
            }
            fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
                (&*self).write(buf)
            }
            fn shutdown_write(&self) -> io::Result<()> {
                self.shutdown(Shutdown::Write)
            }
        }
    )+};
}

raw_socket!(std::os::unix::net::UnixStream, std::net::TcpStream);

/// A non-blocking socket read through the runtime, written directly.
#[derive(Debug)]
pub(crate) struct Socket<S: Raw> {
    /// `None` only after re-registering failed, which closed it.
    fd: Option<AsyncFd<S>>,
    /// Registered for writability too (a write would have blocked).
    writable: bool,
}

impl<S: Raw> Socket<S> {
    /// `raw` must be in non-blocking mode.
    pub(crate) fn new(raw: S) -> io::Result<Self> {
        Ok(Self {
            fd: Some(register(raw, Interest::READABLE)?),
            writable: false,
        })
    }

    fn fd(&self) -> io::Result<&AsyncFd<S>> {
        self.fd.as_ref().ok_or_else(closed)
    }

    /// Registers the socket for both directions, from now on. Its
    /// readiness is not lost: registering reports what is ready already.
    fn register_writable(&mut self) -> io::Result<()> {
        let raw = self.fd.take().ok_or_else(closed)?.into_inner();
        self.fd = Some(register(raw, Interest::READABLE | Interest::WRITABLE)?);
        self.writable = true;
        Ok(())
    }
}

/// `raw` registered with the runtime for `interest`.
#[allow(unsafe_code)]
fn register<S: Raw>(raw: S, interest: Interest) -> io::Result<AsyncFd<S>> {
    // SAFETY: `raw` is one of std's sockets (`Raw` is implemented for
    // `UnixStream` and `TcpStream` only), which owns its descriptor: the
    // descriptor stays open and the same until the socket is dropped, and
    // the `AsyncFd` owns the socket until it is dropped or `into_inner`
    // hands the socket back.
    unsafe { AsyncFd::register_with_interest(raw, interest) }.map_err(|error| error.into_parts().1)
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the socket was closed")
}

impl<S: Raw> AsyncRead for Socket<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let fd = self.fd()?;
        loop {
            let mut guard = ready!(fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let wanted = unfilled.len();
            match guard.try_io(|inner| inner.get_ref().read_some(unfilled)) {
                Ok(Ok(read)) => {
                    // A short read emptied the socket (as tokio's own
                    // sockets assume): the next read waits for more instead
                    // of asking the kernel once more to hear it has none.
                    if read > 0 && read < wanted {
                        guard.clear_ready();
                    }
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(error)) => return Poll::Ready(Err(error)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl<S: Raw> AsyncWrite for Socket<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if !self.writable {
            match self.fd()?.get_ref().write_some(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    self.register_writable()?;
                }
                done => return Poll::Ready(done),
            }
        }
        let fd = self.fd()?;
        loop {
            let mut guard = ready!(fd.poll_write_ready(cx))?;
            match guard.try_io(|inner| inner.get_ref().write_some(buf)) {
                Ok(done) => return Poll::Ready(done),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.fd()?.get_ref().shutdown_write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Generous: only a hang fails, never a slow machine.
    const DEADLINE: Duration = Duration::from_secs(30);

    fn pair() -> (Socket<UnixStream>, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        (Socket::new(ours).unwrap(), theirs)
    }

    #[tokio::test]
    async fn a_read_after_a_short_one_waits_for_more_and_gets_it() {
        let (mut socket, theirs) = pair();
        (&theirs).write_all(b"first").unwrap();
        let mut buf = [0; 64];
        let read = socket.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..read], b"first");
        // The next read waits (the short read cleared the readiness) and
        // is woken by what arrives then.
        let reading = tokio::spawn(async move {
            let mut buf = [0; 64];
            let read = socket.read(&mut buf).await.unwrap();
            buf[..read].to_vec()
        });
        tokio::task::yield_now().await;
        assert!(!reading.is_finished(), "nothing was there to read");
        (&theirs).write_all(b"second").unwrap();
        let got = tokio::time::timeout(DEADLINE, reading)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, b"second");
    }

    #[tokio::test]
    async fn a_write_that_would_block_waits_for_room_and_loses_nothing() {
        let (mut socket, theirs) = pair();
        let chunk = vec![7; 64 * 1024];
        let mut sent = 0;
        // Written until the kernel takes no more: the socket then waits
        // for writability, which it was not registered for.
        let pending = loop {
            let polled = std::future::poll_fn(|cx| {
                Poll::Ready(Pin::new(&mut socket).poll_write(cx, &chunk))
            })
            .await;
            match polled {
                Poll::Ready(written) => sent += written.unwrap(),
                Poll::Pending => break true,
            }
        };
        assert!(pending && socket.writable);
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            (&theirs).read_to_end(&mut all).unwrap();
            all.len()
        });
        tokio::time::timeout(DEADLINE, async {
            socket.write_all(&chunk).await.unwrap();
            socket.shutdown().await.unwrap();
        })
        .await
        .unwrap();
        assert_eq!(reader.join().unwrap(), sent + chunk.len());
    }
}
