//! Store operations the CLI performs without a running daemon.

use serde_json::Value;

use super::outbox::{outbox_message, seal_for};
use crate::cli::Exit;
use crate::config::Config;

/// `outpost send`: seal and queue straight into the outbox (SQLite lets the CLI and a
/// running daemon share the store; the daemon's sync loop picks it up on its next pass).
pub fn queue_outbox(
    cfg: &Config,
    to: &str,
    payload_type: &str,
    payload: &Value,
    ttl_s: Option<u64>,
) -> anyhow::Result<String> {
    let store = super::open_store(cfg, crate::clock::system())?;
    let keys = crate::envelope::Keys::load(&super::keyfile::keys_path(&cfg.data_dir))?;
    let me = super::keyfile::read_identity(&cfg.data_dir)?;
    let trust = super::trust::effective(&store, &me)?;
    let sealed = seal_for(
        cfg,
        &keys,
        &trust,
        store.now_ms(),
        to,
        payload_type,
        payload,
        ttl_s,
        0,
        None,
    )
    .map_err(|e| Exit::failed(format!("{}: {}", e.code(), e.public_message())))?;
    let id = sealed.params.message_id.clone();
    store
        .enqueue(outbox_message(
            cfg,
            to,
            &sealed.params,
            sealed.envelope_json,
        ))
        .wait()
        .map_err(|e| Exit::failed(super::error::NodeError::Store(e).public_message()))?;
    store.close();
    Ok(id)
}
