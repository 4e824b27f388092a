//! The upstream role (`role = "gateway"`, SPEC §6): the hub that queues messages for
//! nodes that are offline, hands them out over signed long-polls, receives results,
//! upstream messages and audit logs, and tells dashboards what happens (SSE).
//!
//! ```text
//!  operator ─ bearer token ─► client_api ─ seal + durable enqueue ─► store "to_node"/<node>
//!                                │  ▲ wait for `result` event             │
//!                                ▼  │                                     ▼
//!  dashboards ◄── SSE ── events::Bus ◄── node_api (pull/ack) ◄── signed long-poll ── node
//!                                   ◄── upload (results, inbox, forward) ◄─┘
//!                                   ◄── audit_sync (verify, store) ◄───────┘
//! ```
//!
//! Layout: [`state`] (shared state, liveness, trust) · [`auth`] (tokens, request
//! signatures) · [`client_api`] · [`admin_api`] · [`node_api`] · [`upload`] ·
//! [`audit_sync`] · [`events`] · [`liveness`] · [`sweeper`].
//!
//! Files in the data directory (same conventions as the node): `keys.json`, the store in
//! `store/`, `api.addr` written after binding; the trust store is the KV record
//! `trust/peers` that `outpost trust add` writes.

pub mod admin_api;
pub mod audit_sync;
pub mod auth;
pub mod client_api;
pub mod events;
pub mod liveness;
pub mod node_api;
pub mod state;
pub mod sweeper;
pub mod tls;
pub mod upload;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use state::Gateway;

use crate::config::Config;
use crate::envelope::Keys;
use crate::service::Notifier;
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
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

/// All routes of SPEC §6 plus health, readiness, metrics, `POST /v1/revocations` and
/// `GET /v1/nodes/{id}/audit`.
pub fn router(gw: Arc<Gateway>) -> Router {
    let limit = gw.cfg.max_body_bytes as usize;
    Router::new()
        .route("/healthz", get(admin_api::healthz))
        .route("/readyz", get(admin_api::readyz))
        .route("/metrics", get(admin_api::metrics))
        .route("/v1/status", get(admin_api::status))
        .route("/v1/tool_call", post(client_api::tool_call))
        .route("/v1/commands", post(client_api::commands))
        .route("/v1/messages/{id}", get(client_api::message))
        .route("/v1/events", get(client_api::events))
        .route("/v1/nodes", get(client_api::nodes))
        .route("/v1/inbox", get(admin_api::inbox))
        .route("/v1/inbox/{id}/ack", post(admin_api::inbox_ack))
        .route("/v1/revocations", post(admin_api::revoke))
        .route("/v1/nodes/{id}/pull", get(node_api::pull))
        .route("/v1/nodes/{id}/ack", post(node_api::ack))
        .route("/v1/nodes/{id}/upload", post(upload::upload))
        .route(
            "/v1/nodes/{id}/audit",
            post(audit_sync::upload).get(audit_sync::status),
        )
        .route("/v1/nodes/{id}/revocations", get(node_api::revocations))
        .route("/openapi.json", get(crate::api::openapi::gateway))
        .fallback(|| async { crate::api::ApiError::not_found("not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            crate::api::ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            gw.clone(),
            count_requests,
        ))
        .with_state(gw)
}

async fn count_requests(
    axum::extract::State(gw): axum::extract::State<Arc<Gateway>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let resp = next.run(req).await;
    crate::api::count_response(&gw.metrics, &resp);
    resp
}

/// Open keys, store and trust for `cfg` (blocking; call before serving).
pub fn open(cfg: Config, shutdown: CancellationToken) -> Result<Gateway, GatewayError> {
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
    let trust = crate::daemon::trust::TrustCache::load(&store, &me)
        .map_err(|e| GatewayError::Trust(e.to_string()))?;
    Ok(Gateway::new(cfg, store, keys, trust, shutdown))
}

/// Serve the gateway on `listener` until `shutdown` fires, then drain (long-polls and
/// SSE streams end on the token; background tasks get `drain_timeout_ms`) and close the
/// store so every acknowledged write is on disk.
pub async fn run(
    cfg: Config,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
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
            .map_err(|e| GatewayError::Io(std::io::Error::other(e.to_string())))??,
    );
    let tracker = TaskTracker::new();
    tracker.spawn(sweeper::run(gw.clone()));
    tracker.spawn(sweeper::watchdog(gw.clone()));
    crate::daemon::listen::write_addr_file(&data_dir, addr)?;
    gw.set_ready(true);
    Notifier.ready();
    tracing::info!(event = "ready", node_id = %gw.cfg.node_id, %addr, role = "gateway", "gateway ready");

    let app = router(gw.clone());
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
    let store = gw.store.clone();
    let _ = tokio::task::spawn_blocking(move || store.close()).await;
    tracing::info!(event = "stopped", %addr, role = "gateway");
    served.map_err(GatewayError::Io)
}
