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
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use state::Gateway;
use storage::GatewayState;

use crate::config::Config;
use crate::envelope::Keys;
use crate::service::Notifier;
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
    let gw = Arc::new(
        tokio::task::spawn_blocking(move || open(cfg, sd))
            .await
            .map_err(|e| StartError::Io(std::io::Error::other(e.to_string())))??,
    );
    let tracker = TaskTracker::new();
    tracker.spawn(sweeper::run(gw.clone()));
    tracker.spawn(sweeper::watchdog(gw.clone()));
    crate::daemon::listen::write_addr_file(&data_dir, addr)?;
    gw.set_ready(true);
    Notifier.ready();
    tracing::info!(event = "ready", node_id = %gw.cfg.node_id, %addr, role = "gateway", "gateway ready");

    let app = crate::api::gateway::router(gw.clone());
    let served = crate::http_server::serve(listener, acceptor, app, gw.cfg.http, shutdown).await;
    gw.set_ready(false);
    Notifier.stopping();
    tracker.close();
    if tokio::time::timeout(Duration::from_millis(drain_ms), tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(event = "drain_deadline_exceeded", deadline_ms = drain_ms);
    }
    crate::daemon::listen::remove_addr_file(&data_dir);
    if let Err(e) = gw.state.close().await {
        tracing::warn!(event = "close_failed", error = %e);
    }
    tracing::info!(event = "stopped", %addr, role = "gateway");
    served.map_err(StartError::Io)
}
