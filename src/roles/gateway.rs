//! The gateway role wired: open its state, spawn the sweeper and watchdog, serve the
//! API (plain or TLS) until shutdown, drain, close.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::gateway::{event_tasks, open_any, sweeper, tls, StartError};
use crate::service::Notifier;

/// Serve the gateway on `listener` until `shutdown` fires, then drain (long-polls and
/// SSE streams end on the token; background tasks get `drain_timeout_ms`) and close the
/// store so every acknowledged write is on disk.
pub async fn run(
    cfg: Config,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), StartError> {
    let addr = listener.local_addr()?;
    let drain_ms = cfg.drain_timeout_ms;
    let data_dir = cfg.data_dir.clone();
    let sd = shutdown.clone();
    // Fail before anything else if the certificate cannot be used.
    let acceptor = match &cfg.tls {
        Some((cert, key)) => Some(tls::acceptor(cert, key)?),
        None => None,
    };
    // Listen at once: until the state is open (a database that does not answer yet),
    // `/healthz` is 200 and everything else 503 `not_ready` with the reason, so probes
    // and `outpost status` say why instead of "connection refused". The real router
    // then serves the same socket.
    let starting = crate::daemon::starting::Starting::new(format!(
        "opening the gateway's state ({})",
        cfg.store_description()
    ));
    let early = listener.into_std()?;
    let listener = tokio::net::TcpListener::from_std(early.try_clone()?)?;
    let stop_early = shutdown.child_token();
    let early_server = tokio::spawn(crate::http_server::serve(
        tokio::net::TcpListener::from_std(early)?,
        acceptor.clone(),
        crate::api::starting::router(starting.clone()),
        cfg.http,
        stop_early.clone(),
    ));
    let opened = open_any(cfg, sd, &starting).await;
    stop_early.cancel();
    if let Ok(Err(e)) = early_server.await {
        tracing::warn!(event = "early_server_failed", error = %e);
    }
    let gw = Arc::new(opened?);
    let tracker = TaskTracker::new();
    tracker.spawn(sweeper::run(gw.clone()));
    tracker.spawn(sweeper::watchdog(gw.clone()));
    tracker.spawn(event_tasks::write_events(gw.clone()));
    tracker.spawn(event_tasks::read_events(gw.clone()));
    if let Some(replicas) = gw.replicas_to_follow() {
        tracker.spawn(sweeper::follow(gw.clone(), replicas));
    }
    tracker.spawn(crate::gateway::rotation::watch(gw.clone()));
    tracker.spawn(crate::gateway::rollout::driver::run(gw.clone()));
    crate::daemon::listen::write_addr_file(&data_dir, addr)?;
    gw.set_ready(true);
    Notifier.ready();
    tracing::info!(event = "ready", node_id = %gw.cfg().node_id, %addr, role = "gateway", "gateway ready");

    // Not ready from the signal on (`Gateway::is_ready` reads the same token): probes
    // take it out of rotation at once.
    let serving = super::serve::Serving {
        listener,
        tls: acceptor,
        app: crate::api::gateway::router(gw.clone()),
        limits: gw.cfg().http,
        deadline: Duration::from_millis(drain_ms),
    };
    let served = super::serve::serve_and_drain(serving, &tracker, shutdown).await;
    if let Err(e) = gw.close_state().await {
        tracing::warn!(event = "close_failed", error = %e);
    }
    served.map_err(StartError::Io)
}
