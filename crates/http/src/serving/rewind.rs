//! A connection whose first bytes were already read: they are read again before the rest,
//! so a connection the plain GET path has begun can be handed to hyper whole.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// `tcp` with `read` (the bytes already taken from it) put back in front.
pub(super) struct Rewind {
    read: Vec<u8>,
    at: usize,
    tcp: TcpStream,
}

impl Rewind {
    pub(super) fn new(read: Vec<u8>, tcp: TcpStream) -> Self {
        Rewind { read, at: 0, tcp }
    }
}

impl AsyncRead for Rewind {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        if me.at < me.read.len() {
            let n = buf.remaining().min(me.read.len() - me.at);
            buf.put_slice(&me.read[me.at..me.at + n]);
            me.at += n;
            if me.at == me.read.len() {
                me.read = Vec::new();
                me.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
