//! The upstream role (`role = "gateway"`, SPEC §6): the hub that queues messages for
//! nodes that are offline, hands them out over signed long-polls, receives results,
//! upstream messages and audit logs, and tells dashboards what happens (SSE).
//!
//! ```text
//!  operator ─ bearer token ─► commands ─ seal + durable queue ─► storage (node's queue)
//!                                │  ▲ wait for `result` event             │
//!                                ▼  │                                     ▼
//!  dashboards ◄── SSE ── events::Bus ◄── delivery (pull/ack) ◄── signed long-poll ── node
//!                                   ◄── upload (results, inbox, forward) ◄─┘
//!                                   ◄── audit_sync (verify, store) ◄───────┘
//! ```
//!
//! Layout: [`state`] (shared state, liveness, trust) · [`storage`] (the durable state
//! behind one interface) · [`commands`] (tool calls, commands) · [`delivery`] (pull,
//! ack, revocations) · [`uploads`] (results, inbox, forwarding) · [`audit_sync`] ·
//! [`events`] · [`liveness`] · [`sweeper`] · [`error`]. The HTTP routes and handlers
//! live beside the node's, in `api::gateway`.
//!
//! Files in the data directory (same conventions as the node): `keys.json`, the store in
//! `store/`, `api.addr` written after binding; the trust store is the KV record
//! `trust/peers` that `outpost trust add` writes.

pub mod audit_sync;
pub mod commands;
pub mod delivery;
pub mod error;
pub mod events;
pub mod liveness;
pub mod state;
pub mod storage;
pub mod sweeper;
pub mod tls;
pub mod uploads;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use state::Gateway;
use storage::GatewayState;

use crate::config::Config;
use crate::envelope::Keys;
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot load keys: {0}")]
    Keys(#[from] crate::envelope::KeyFileError),
    #[error("cannot open the store: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("trust store: {0}")]
    Trust(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

pub use crate::daemon::store_options;

/// Open keys, store and trust for `cfg` (blocking; call before serving).
pub fn open(cfg: Config, shutdown: CancellationToken) -> Result<Gateway, StartError> {
    let keys = Keys::load(&cfg.data_dir.join("keys.json"))?;
    let store = Store::open(
        &cfg.data_dir.join("store"),
        store_options(&cfg),
        crate::clock::system(),
    )?;
    let me = crate::envelope::IdentityDocument::new(
        &cfg.node_id,
        "gateway",
        &keys,
        "1970-01-01T00:00:00Z",
    );
    let state: Arc<dyn GatewayState> = Arc::new(storage::embedded::Embedded::new(store));
    let source = state.clone();
    let trust = crate::daemon::trust::TrustCache::with_loader(
        Box::new(move || source.load_trust().map_err(anyhow::Error::from)),
        &me,
    )
    .map_err(|e| StartError::Trust(e.to_string()))?;
    Ok(Gateway::new(cfg, state, keys, trust, shutdown))
}
