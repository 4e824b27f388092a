//! The node role's domain: one service per flow (see [`core::NodeCore`]), the task
//! worker, the sync link and the maintenance loops. Wired and run by
//! `crate::roles::node`; HTTP is `crate::api::node`.

use crate::config::Config;

pub mod auth;
pub mod base;
pub mod calls;
pub mod core;
pub mod error;
pub mod inbound;
mod inbound_open;
pub mod inbox;
pub mod inventory;
pub mod keyfile;
pub mod maintenance;
pub mod offline;
pub mod outbox;
pub mod recorder;
pub mod refusals;
pub mod state;
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
