//! The connection as hyper sees it: reads go through [`Framing`], so hyper only ever
//! receives request heads that it will accept; a head it would refuse with an empty
//! body is answered here, in the JSON error shape, and the connection is closed.
//!
//! Why here and not elsewhere: hyper writes its 400/431 responses itself with no hook
//! to change the body, and the only other way to change them, rewriting hyper's output
//! bytes, would mean recognising responses in a byte stream we do not frame. Checking
//! the input with hyper's own parser before hyper sees it leaves keep-alive, pipelining
//! and bodies to hyper and costs one copy of each read.
//!
//! The answer is written only while hyper has no response of its own pending (nothing
//! in flight, everything it wrote flushed), so the two can never interleave; a bad head
//! pipelined behind a request in flight just closes the connection. After the answer we
//! shut our side and read what the client still sends for a while (a lingering close),
//! so that a client still writing a huge head reads our answer instead of a reset.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::framing::Framing;
use super::table::ConnState;
use crate::api::ApiError;

const READ_CHUNK: usize = 8 * 1024;

pub struct Guard<IO> {
    io: IO,
    peer: SocketAddr,
    state: Arc<ConnState>,
    framing: Framing,
    /// Checked bytes hyper has not taken yet.
    ready: Vec<u8>,
    taken: usize,
    eof: bool,
    /// hyper wrote and has not seen a completed flush since.
    unflushed: bool,
    refusal: Option<Refusal>,
    /// We sent FIN after a refusal; hyper's own shutdown is then a no-op.
    shut: bool,
}

/// Bytes a refused client may still send that we read and drop before closing, so the
/// close does not turn into a reset that destroys our answer in its receive buffer.
const LINGER_BYTES: usize = 1024 * 1024;

enum Refusal {
    /// Our answer, and how much of it is written.
    Writing(Vec<u8>, usize),
    /// Answer sent and write side shut: discard input until EOF or the budget is spent.
    Lingering(usize),
}

impl<IO> Guard<IO> {
    pub fn new(io: IO, peer: SocketAddr, state: Arc<ConnState>) -> Self {
        Guard {
            io,
            peer,
            state,
            framing: Framing::default(),
            ready: Vec::new(),
            taken: 0,
            eof: false,
            unflushed: false,
            refusal: None,
            shut: false,
        }
    }
}

/// A complete HTTP/1.1 response carrying `e` in the JSON error shape, closing.
pub fn raw_response(e: &ApiError) -> Vec<u8> {
    let body = serde_json::to_vec(&e.body()).unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        e.status.as_u16(),
        e.status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Guard<IO> {
    /// Write the refusal, shut our side, linger; then report end of input so hyper
    /// closes the connection.
    fn poll_refusal(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.refusal.as_mut() {
                None => return Poll::Ready(Ok(())),
                Some(Refusal::Writing(bytes, written)) => {
                    if *written == 0 && (self.state.in_flight() || self.unflushed) {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "malformed request pipelined behind a pending response",
                        )));
                    }
                    while *written < bytes.len() {
                        let n = ready!(Pin::new(&mut self.io).poll_write(cx, &bytes[*written..]))?;
                        if n == 0 {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        *written += n;
                    }
                    ready!(Pin::new(&mut self.io).poll_flush(cx))?;
                    ready!(Pin::new(&mut self.io).poll_shutdown(cx))?;
                    self.shut = true;
                    self.refusal = Some(Refusal::Lingering(LINGER_BYTES));
                }
                Some(Refusal::Lingering(left)) => {
                    let mut scratch = [0u8; READ_CHUNK];
                    let mut rb = ReadBuf::new(&mut scratch);
                    let n = match ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb)) {
                        Ok(()) => rb.filled().len(),
                        Err(_) => 0,
                    };
                    *left = left.saturating_sub(n);
                    if n == 0 || *left == 0 {
                        self.refusal = None;
                        self.eof = true;
                    }
                }
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guard<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.taken < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.taken);
                buf.put_slice(&this.ready[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.ready.len() {
                    // Give the buffer back: an idle connection (a long-poll, a
                    // keep-alive client) then holds no read buffer of ours.
                    this.ready = Vec::new();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.refusal.is_some() {
                return this.poll_refusal(cx);
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            // On the stack, not in the connection: thousands of idle connections then
            // cost no read buffer each.
            let mut scratch = [0u8; READ_CHUNK];
            let mut rb = ReadBuf::new(&mut scratch);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                this.eof = true;
                continue;
            }
            let fed = this.framing.feed(&scratch[..n], &mut this.ready);
            this.state.set_phase(this.framing.phase(), Instant::now());
            if let Err(e) = fed {
                tracing::debug!(
                    event = "request_refused",
                    peer = %this.peer,
                    status = e.status.as_u16(),
                    code = e.code,
                );
                this.refusal = Some(Refusal::Writing(raw_response(&e), 0));
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Guard<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.unflushed = true;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.unflushed = true;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        this.unflushed = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.shut {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
