//! The node role: opens the store and keys, builds [`NodeCore`], serves the local API,
//! runs the background workers (sweeper, task runner, upstream sync, watchdog), and on
//! shutdown stops accepting, drains within the deadline and closes the store.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::core::NodeCore;
use crate::config::Config;
use crate::daemon::listen;
use crate::service::Notifier;

pub async fn run(
    cfg: Config,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let core = Arc::new(NodeCore::open(cfg.clone())?);
    let tracker = TaskTracker::new();

    // Background workers, each ending on `shutdown`.
    tracker.spawn(crate::app::maintenance::sweeper(
        core.clone(),
        shutdown.clone(),
    ));
    tracker.spawn(crate::app::tasks::worker(core.clone(), shutdown.clone()));
    tracker.spawn(crate::app::maintenance::watchdog(
        core.clone(),
        shutdown.clone(),
    ));
    crate::app::upstream::start(&core, &tracker, shutdown.clone());

    let app = crate::api::node::router(core.clone());
    listen::write_addr_file(&cfg.data_dir, addr)?;
    core.set_ready();
    Notifier.ready();
    tracing::info!(event = "ready", node_id = %cfg.node_id, %addr, "node ready");

    // From the signal on, new tool calls are refused before anything runs.
    let stop = shutdown.clone();
    let stop_core = core.clone();
    tracker.spawn(async move {
        stop.cancelled().await;
        stop_core.stop_accepting();
    });
    let serving = super::serve::Serving {
        listener,
        tls: None,
        app,
        limits: cfg.http,
        deadline: Duration::from_millis(cfg.drain_timeout_ms),
    };
    super::serve::serve_and_drain(serving, &tracker, shutdown).await?;
    // Refusals still counted, then a last checkpoint over everything this run appended.
    core.recorder.flush_refusal_summary(true).await;
    core.recorder.checkpoint().await;
    core.close();
    Ok(())
}
