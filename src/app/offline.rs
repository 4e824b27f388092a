//! Store operations the CLI performs without a running daemon.

use serde_json::Value;

use super::error::NodeError;
use super::outbox::{outbox_message, seal_for};
use crate::config::Config;

/// Why an offline send failed: the node's refusal (shown as `code: message`), or the
/// store/keys could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("{}: {}", .0.code(), .0.public_message())]
    Refused(NodeError),
    #[error(transparent)]
    Setup(#[from] anyhow::Error),
}

/// `outpost send`: seal and queue straight into the outbox (SQLite lets the CLI and a
/// running daemon share the store; the daemon's sync loop picks it up on its next pass).
pub fn queue_outbox(
    cfg: &Config,
    to: &str,
    payload_type: &str,
    payload: &Value,
    ttl_s: Option<u64>,
) -> Result<String, OfflineError> {
    let store = super::open_store(cfg, crate::clock::system())?;
    let keys = crate::envelope::Keys::load(&super::keyfile::keys_path(&cfg.data_dir))
        .map_err(anyhow::Error::from)?;
    let me = super::keyfile::read_identity(&cfg.data_dir)?;
    let trust = crate::daemon::trust::effective(&store, &me)?;
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
    .map_err(OfflineError::Refused)?;
    let id = sealed.params.message_id.clone();
    store
        .enqueue(outbox_message(
            cfg,
            to,
            &sealed.params,
            sealed.envelope_json,
        ))
        .wait()
        .map_err(|e| OfflineError::Refused(NodeError::Store(e)))?;
    store.close();
    Ok(id)
}
