//! One connection's task: the TLS handshake (under the header timeout), then hyper over
//! the [`Guard`], polled together with the connection's deadline, its eviction and the
//! shutdown token, so that whatever ends the connection, the socket closes here.

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::guard::Guard;
use super::service::ConnService;
use super::table::{Ticket, Timeout};
use super::TlsAcceptor;
use crate::config::HttpLimits;

/// What every connection of one listener shares.
pub struct Ctx {
    pub app: Router,
    pub limits: HttpLimits,
    pub tls: Option<TlsAcceptor>,
    pub shutdown: CancellationToken,
}

enum End {
    Done(Result<(), hyper::Error>),
    Evicted,
    Timeout(Timeout),
}

pub async fn run(tcp: TcpStream, peer: SocketAddr, ticket: Ticket, ctx: Arc<Ctx>) {
    let Some(acceptor) = &ctx.tls else {
        return serve(tcp, peer, ticket, &ctx).await;
    };
    #[cfg(not(feature = "gateway"))]
    match *acceptor {}
    #[cfg(feature = "gateway")]
    handshake_then_serve(tcp, peer, ticket, &ctx, acceptor).await
}

#[cfg(feature = "gateway")]
async fn handshake_then_serve(
    tcp: TcpStream,
    peer: SocketAddr,
    ticket: Ticket,
    ctx: &Ctx,
    acceptor: &TlsAcceptor,
) {
    let handshake = tokio::time::timeout(
        Duration::from_millis(ctx.limits.header_timeout_ms),
        acceptor.accept(tcp),
    );
    let tls = tokio::select! {
        r = handshake => match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(event = "tls_handshake_failed", %peer, error = %e);
                return;
            }
            Err(_) => {
                tracing::debug!(event = "connection_timeout", %peer, timeout = "tls_handshake");
                return;
            }
        },
        _ = ticket.evicted.cancelled() => return,
        _ = ctx.shutdown.cancelled() => return,
    };
    serve(tls, peer, ticket, ctx).await
}

async fn serve<IO>(io: IO, peer: SocketAddr, ticket: Ticket, ctx: &Ctx)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = ticket.state.clone();
    let svc = ConnService {
        app: ctx.app.clone(),
        peer,
        state: state.clone(),
        body_timeout: Duration::from_millis(ctx.limits.body_timeout_ms),
    };
    let guarded = TokioIo::new(Guard::new(io, peer, state.clone()));
    // Our own deadlines replace hyper's `header_read_timeout`: hyper starts that one
    // whenever it waits for a head, idle keep-alive time included, so it cannot tell a
    // slow head from a quiet client.
    let mut conn = pin!(hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(guarded, svc));
    let mut sleep = pin!(tokio::time::sleep_until(Instant::now()));
    let mut evicted = pin!(ticket.evicted.cancelled());
    let mut shutdown = pin!(ctx.shutdown.cancelled());
    let mut draining = false;
    let limits = ctx.limits;
    // One poll function rather than `select!`: the deadline is recomputed after every
    // poll of the connection, which is where its state changes.
    let end = poll_fn(|cx| {
        if let Poll::Ready(r) = conn.as_mut().poll(cx) {
            return Poll::Ready(End::Done(r));
        }
        if evicted.as_mut().poll(cx).is_ready() {
            return Poll::Ready(End::Evicted);
        }
        if !draining && shutdown.as_mut().poll(cx).is_ready() {
            // Finish the request in flight, if any (long-polls and SSE end on the same
            // token), then close; an idle connection closes at the next poll.
            draining = true;
            conn.as_mut().graceful_shutdown();
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if let Some((at, why)) = state.deadline(&limits) {
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(End::Timeout(why));
            }
        }
        Poll::Pending
    })
    .await;
    match end {
        End::Done(Ok(())) => {}
        End::Done(Err(e)) => tracing::debug!(event = "connection_error", %peer, error = %e),
        End::Evicted => tracing::debug!(event = "connection_evicted", %peer),
        End::Timeout(why) => {
            tracing::debug!(event = "connection_timeout", %peer, timeout = why.as_str())
        }
    }
}
