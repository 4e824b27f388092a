//! `outpost run`: the daemon.

use super::common::load_config;
use super::ConfigArg;

pub fn run(arg: &ConfigArg) -> anyhow::Result<()> {
    let cfg = load_config(arg)?;
    crate::service::init_logging();
    tracing::info!(
        event = "starting",
        node_id = %cfg.node_id,
        role = %cfg.role,
        version = env!("CARGO_PKG_VERSION"),
        config = ?cfg.sources,
    );
    crate::app::run_blocking(cfg)
}
