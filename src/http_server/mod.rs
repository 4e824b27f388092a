//! The HTTP/1.1 edge both roles serve on, plain or TLS: accept loop, one task per
//! connection, slow-client timeouts, a connection cap with eviction, JSON answers for
//! requests hyper would refuse with an empty body, and graceful drain on a token.
//!
//! Why our own loop rather than `axum::serve`: a listener that faces any address must
//! close what does not progress and keep a slot for `/healthz` and the nodes while
//! someone holds thousands of half-open sockets (issue #14).
//!
//! - [`table`]: open connections, their state, the cap and who is evicted at it.
//! - [`framing`]: pure head checks and body framing (where the next head starts).
//! - [`guard`]: the I/O wrapper that applies `framing` and answers refused heads.
//! - [`service`]: `ConnectInfo`, the body deadline, requests in flight.
//! - [`conn`]: one connection's task: TLS handshake, hyper, deadlines, eviction.
//!
//! Timeouts (`[api]` in the config): `header_timeout_ms` from accept or from the first
//! byte of a later head until the head is complete (and for the TLS handshake);
//! `body_timeout_ms` from the head until the body is complete (408 `body_timeout`);
//! `idle_timeout_ms` between requests on a keep-alive connection. While a request is in
//! flight no connection deadline runs: a long-poll or an SSE stream lasts as its
//! handler decides.

mod conn;
pub mod framing;
pub mod guard;
mod service;
pub mod table;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::ApiError;
use crate::config::HttpLimits;

/// The TLS side of a listener: only the gateway serves HTTPS.
#[cfg(feature = "gateway")]
pub use tokio_rustls::TlsAcceptor;
/// A build without the gateway serves plain HTTP only (the node's API is on loopback):
/// no acceptor can exist, so no server TLS code is built.
#[cfg(not(feature = "gateway"))]
#[derive(Clone)]
pub enum TlsAcceptor {}

/// File descriptors kept for everything but client connections (store, journal,
/// outbound sync, tool pipes) when the cap is fitted under `RLIMIT_NOFILE`.
const FD_RESERVE: u64 = 128;

/// Serve `app` on `listener` until `shutdown`; then stop accepting, let every open
/// connection finish its request in flight, and return once all are closed.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let table = table::Table::new(fit_cap(limits.max_connections));
    let ctx = Arc::new(conn::Ctx {
        app,
        limits,
        tls,
        shutdown: shutdown.clone(),
    });
    let conns = TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: log, breathe, keep serving.
                    tracing::warn!(event = "accept_failed", error = %e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(ticket) = table.admit(Instant::now()) else {
            // Every slot has a request in flight: say so if it costs nothing.
            if ctx.tls.is_none() {
                let _ = tcp.try_write(&guard::raw_response(&too_many()));
            }
            continue;
        };
        conns.spawn(conn::run(tcp, peer, ticket, ctx.clone()));
    }
    conns.close();
    conns.wait().await;
    Ok(())
}

fn too_many() -> ApiError {
    ApiError {
        retry_after_s: Some(1),
        ..ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_connections",
            "every connection slot has a request in flight; retry shortly",
        )
    }
}

/// The configured cap, lowered (with a warning) to fit the open-file limit: past it,
/// `accept` fails and nothing new is served, which is what the cap is there to prevent.
fn fit_cap(configured: u32) -> usize {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) only writes the struct we pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0;
    if !ok || rl.rlim_cur == libc::RLIM_INFINITY {
        return configured as usize;
    }
    // rlim_t is u32 on some 32-bit ARM targets.
    #[allow(clippy::useless_conversion)]
    let nofile = u64::from(rl.rlim_cur);
    let room = nofile.saturating_sub(FD_RESERVE).max(1);
    if u64::from(configured) > room {
        tracing::warn!(
            event = "max_connections_lowered",
            configured,
            nofile,
            effective = room,
            "api.max_connections does not fit the open-file limit; lowered"
        );
        return room as usize;
    }
    configured as usize
}
