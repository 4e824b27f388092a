//! The composition root: wires a role's components (domain, HTTP edge, background
//! tasks) and owns their lifetime. Nothing below imports this module.
//!
//! Shape (STYLE §3–4): the caller binds the listener and owns a `CancellationToken`;
//! `run_*` serves until the token fires, then stops accepting, drains in-flight work
//! with a deadline (warning if exceeded) and returns. Nothing calls `process::exit`
//! with writes in flight.

#[cfg(feature = "gateway")]
pub mod gateway;
pub mod node;
mod serve;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::config::{self, Config, Role};
use crate::service::{self, Notifier};

/// Errors that stop the daemon from starting (bad config → exit 64 in the CLI).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// `outpost run`: build the runtime, bind, run the role until SIGTERM/SIGINT.
pub fn run_blocking(cfg: Config) -> anyhow::Result<()> {
    service::memory::limit_arenas();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("outpost")
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let shutdown = CancellationToken::new();
        let sig = shutdown.clone();
        tokio::spawn(async move {
            service::shutdown_signal().await;
            Notifier.stopping();
            sig.cancel();
        });
        run_role(cfg, listener, shutdown).await
    })
}

/// Dispatch on role. Separate from [`run_blocking`] so tests can pass their own
/// listener and token.
pub async fn run_role(
    cfg: Config,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let data_dir: PathBuf = cfg.data_dir.clone();
    let addr = listener.local_addr()?;
    let res = match cfg.role {
        Role::Node => node::run(cfg, listener, shutdown).await,
        #[cfg(feature = "gateway")]
        Role::Gateway => gateway::run(cfg, listener, shutdown)
            .await
            .map_err(anyhow::Error::from),
        // Config parsing refuses the role in a build without the gateway.
        #[cfg(not(feature = "gateway"))]
        Role::Gateway => Err(anyhow::Error::msg(crate::config::NO_GATEWAY)),
    };
    crate::daemon::listen::remove_addr_file(&data_dir);
    tracing::info!(event = "stopped", %addr);
    res
}
