//! One serve-and-drain for both roles: serve until the shutdown token fires, then give
//! requests in flight the drain deadline, then the role's background work the same
//! deadline again. What comes after (the store closed, the address file removed,
//! `stopped` logged) is the caller's.

use std::time::Duration;

use axum::Router;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::HttpLimits;
use crate::http_server::TlsAcceptor;

pub(super) struct Serving {
    pub listener: tokio::net::TcpListener,
    pub tls: Option<TlsAcceptor>,
    pub app: Router,
    pub limits: HttpLimits,
    /// How long requests in flight, then background tasks, may take after the signal.
    pub deadline: Duration,
}

/// Serve until `shutdown`, then drain `tracker` (closed here). Requests still in flight
/// at the deadline are dropped (a tool still running is killed with its process
/// group); background tasks still running at the next deadline are left behind, with a
/// warning each time.
pub(super) async fn serve_and_drain(
    s: Serving,
    tracker: &TaskTracker,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let deadline_ms = s.deadline.as_millis() as u64;
    let server = crate::http_server::serve(s.listener, s.tls, s.app, s.limits, shutdown.clone());
    let mut serving = std::pin::pin!(server);
    let served = tokio::select! {
        r = &mut serving => r,
        _ = async {
            shutdown.cancelled().await;
            tokio::time::sleep(s.deadline).await;
        } => {
            tracing::warn!(
                event = "drain_deadline_exceeded",
                deadline_ms,
                "requests still in flight at the drain deadline; dropping them"
            );
            Ok(())
        }
    };
    tracker.close();
    if tokio::time::timeout(s.deadline, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            event = "drain_deadline_exceeded",
            deadline_ms,
            "background work still running at the drain deadline"
        );
    }
    served
}
