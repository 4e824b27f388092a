//! Wires the components of a role and owns their lifetime.
//!
//! Shape (STYLE §3–4): the caller binds the listener and owns a `CancellationToken`;
//! `run_*` serves until the token fires, then stops accepting, drains in-flight work
//! with a deadline (warning if exceeded) and returns. Nothing calls `process::exit`
//! with writes in flight.

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
    #[error("{0}")]
    Other(String),
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
        Role::Node => crate::app::node::run(cfg, listener, shutdown).await,
        Role::Gateway => crate::gateway::run(cfg, listener, shutdown)
            .await
            .map_err(anyhow::Error::from),
    };
    crate::daemon::listen::remove_addr_file(&data_dir);
    tracing::info!(event = "stopped", %addr);
    res
}

pub mod auth;
pub mod base;
pub mod calls;
pub mod core;
pub mod error;
pub mod inbound;
pub mod inbox;
pub mod keyfile;
pub mod maintenance;
pub mod node;
pub mod offline;
pub mod outbox;
pub mod recorder;
pub mod refusals;
pub mod store_audit;
pub mod tasks;
pub mod upstream;

/// Open the store in `<data_dir>/store` with the config's limits.
pub fn open_store(
    cfg: &Config,
    clock: crate::clock::SharedClock,
) -> anyhow::Result<crate::store::Store> {
    Ok(crate::daemon::open_store(cfg, clock)?)
}

/// Built-in tools plus the config's `[[tools]]`.
pub fn build_registry(cfg: &Config) -> anyhow::Result<crate::tools::Registry> {
    Ok(crate::tools::Registry::new(
        cfg.data_dir.clone(),
        &cfg.tools,
    )?)
}
