//! The upstream role (`role = "gateway"`, PROTOCOL §11–12): the hub that queues messages for
//! nodes that are offline, hands them out over signed long-polls, receives results,
//! upstream messages and audit logs, and tells dashboards what happens (SSE).
//!
//! ```text
//!  operator ─ bearer token ─► commands ─ seal + durable queue ─► storage (node's queue)
//!                                │  ▲ wait for `result` event             │
//!                                ▼  │                                     ▼
//!  dashboards ◄── SSE ── EventLog ◄───── delivery (pull/ack) ◄── signed long-poll ── node
//!                                   ◄── upload (results, inbox, forward) ◄─┘
//!                                   ◄── audit_sync (verify, store) ◄───────┘
//! ```
//!
//! Layout: [`state`] (`Gateway`: what every service shares — config, state, keys,
//! trust, metrics, events, liveness maps, shutdown — and the state each service owns,
//! built once by `assemble` for the engine) · [`storage`] (the durable state behind
//! one interface, the records it keeps, both engines) · one service per flow, reached
//! through its handle (`gw.commands()`, …): [`node_auth`] (signed node requests, its
//! replay window) · [`client_auth`] (bearer tokens, its verify cache) · [`commands`]
//! (commands and tool calls, its job locks) · [`delivery`] (pull, ack, revocations) ·
//! [`uploads`] (results, inbox, forwarding) · [`inbox`] · [`audit_sync`] (audit copies,
//! its frontiers) · [`own_audit`] · [`enroll`] (enrollment, approvals, retiring; its
//! admission) · [`rotation`] (key rotations, grace) · [`fleet`] (the read model of the
//! node list, a message's state, the events a subscriber missed) · [`console`] (what
//! the operator's web console shows, its sessions) · [`sweeper`] (background passes) ·
//! [`event_tasks`] (the event log's writer and reader, over the state's event table);
//! leaves: [`events`] · [`liveness`] · [`source_budget`] · [`error`]. The HTTP routes
//! and handlers live beside the node's, in `api::gateway`.
//!
//! Files in the data directory (same conventions as the node): `keys.json`, the store in
//! `store/`, `api.addr` written after binding; the trust store is the KV record
//! `trust/peers` that `outpost trust add` writes.

pub mod audit_sync;
pub mod caller;
pub mod client_auth;
pub mod commands;
pub mod console;
pub mod delivery;
pub mod enroll;
pub mod error;
pub mod event_kinds;
pub mod event_tasks;
pub mod events;
pub mod fleet;
pub mod fleet_confined;
pub mod inbox;
pub mod live;
pub mod liveness;
pub mod node_auth;
pub mod node_state;
pub mod own_audit;
pub mod rollout;
pub mod rotation;
pub mod source_budget;
pub mod state;
pub mod storage;
pub mod sweeper;
pub mod tenant_gauges;
pub mod tenant_quota;
pub mod tenants;
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
    #[error("database: {0}")]
    Database(String),
}

pub use crate::daemon::store_options;

/// Open keys, store and trust for `cfg` (blocking; call before serving).
pub fn open(cfg: Config, shutdown: CancellationToken) -> Result<Gateway, StartError> {
    let store = Store::open(
        &cfg.data_dir.join("store"),
        store_options(&cfg),
        crate::clock::system(),
    )?;
    let state: Arc<dyn GatewayState> = Arc::new(storage::embedded::Embedded::new(store));
    assemble(cfg, state, None, shutdown)
}

/// Open the gateway on whichever state its config names: the embedded store (on a
/// blocking thread) or PostgreSQL (retrying until the database answers, so a gateway
/// started before its database does not restart-loop; it is not ready meanwhile).
/// `starting` learns why it is not open yet (what the daemon answers meanwhile).
pub async fn open_any(
    cfg: Config,
    shutdown: CancellationToken,
    starting: &crate::daemon::starting::Starting,
) -> Result<Gateway, StartError> {
    #[cfg(feature = "postgres")]
    if let Some(db) = cfg.gateway_db.clone() {
        let pg = open_postgres(&cfg, &db, &shutdown, starting).await?;
        let state: Arc<dyn GatewayState> = pg.clone();
        let shared: Arc<dyn storage::SharedState> = pg.clone();
        let gw = assemble(cfg, state, Some(shared), shutdown.clone())?;
        pg.spawn_listener(shutdown);
        return Ok(gw);
    }
    let _ = starting;
    tokio::task::spawn_blocking(move || open(cfg, shutdown))
        .await
        .map_err(|e| StartError::Io(std::io::Error::other(e.to_string())))?
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    cfg: &Config,
    db: &crate::config::PostgresConfig,
    shutdown: &CancellationToken,
    starting: &crate::daemon::starting::Starting,
) -> Result<Arc<storage::postgres::Postgres>, StartError> {
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match storage::postgres::Postgres::open(db, &cfg.queue, crate::clock::system()).await {
            Ok(pg) => return Ok(pg),
            Err(storage::StateError::Unavailable(why)) => {
                starting.set(format!(
                    "waiting for PostgreSQL at {}: {why}; next try in {} ms",
                    crate::config::redact_url(&db.url),
                    delay.as_millis()
                ));
                tracing::warn!(
                    event = "database_unavailable",
                    url = %crate::config::redact_url(&db.url),
                    error = %why,
                    retry_in_ms = delay.as_millis() as u64,
                    "cannot reach PostgreSQL yet; retrying"
                );
            }
            Err(storage::StateError::Store(e)) => return Err(StartError::Store(e)),
            Err(e) => return Err(StartError::Database(e.to_string())),
        }
        tokio::select! {
            _ = shutdown.cancelled() => {
                return Err(StartError::Database("stopped before the database answered".into()))
            }
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(std::time::Duration::from_secs(10));
    }
}

/// Build the gateway once: its keys (finishing a key switch cut short), the trust
/// cache over `state`, and every service with its own state, each picking its body for
/// one process or for replicas that share `shared`.
fn assemble(
    cfg: Config,
    state: Arc<dyn GatewayState>,
    shared: Option<Arc<dyn storage::SharedState>>,
    shutdown: CancellationToken,
) -> Result<Gateway, StartError> {
    let now_ms = state.now_ms();
    let dir = &cfg.data_dir;
    // A key switch cut short after keys.json and before identity.json: finish it.
    let recover = || -> anyhow::Result<Option<(Keys, u64)>> {
        if let Some(rot) = crate::daemon::rotation::pending(dir)? {
            let on_disk = Keys::load(&dir.join("keys.json"))?;
            if on_disk.sign_pk().as_bytes().as_slice() == rot.new_doc.sign_pk {
                crate::daemon::rotation::finish(dir, &rot, now_ms)?;
            }
        }
        crate::daemon::rotation::load_previous(dir, now_ms)
    };
    let previous = recover().map_err(|e| StartError::Trust(format!("{e:#}")))?;
    let keys = Keys::load(&cfg.data_dir.join("keys.json"))?;
    let me = crate::envelope::IdentityDocument::new(
        &cfg.node_id,
        "gateway",
        &keys,
        "1970-01-01T00:00:00Z",
    );
    let source = state.clone();
    let trust = crate::daemon::trust::TrustCache::with_loader(
        Box::new(move |known| source.load_trust_since(known).map_err(anyhow::Error::from)),
        &me,
        now_ms,
    )
    .map_err(|e| StartError::Trust(e.to_string()))?;
    if let Some((old, until)) = &previous {
        trust
            .set_me_previous(old, *until)
            .map_err(|e| StartError::Trust(e.to_string()))?;
    }
    let gw = Gateway::new(cfg, state, shared, keys, trust, shutdown);
    if let Some((old, until)) = previous {
        gw.keys.set_previous(old, until);
    }
    Ok(gw)
}
