//! Gateway inbox (messages nodes sent upstream, other than results), token revocation,
//! and the health/metrics/status endpoints.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::require;
use super::wire::{InboxAcked, InboxList, RevocationAdded, RevocationDuplicate, RevokeBody};
use crate::api::json::{JsonBody, QueryParams};
use crate::api::{ApiError, ApiResult};
use crate::gateway::storage::Revoked;
use crate::gateway::{inbox, Gateway};
use crate::token::Need;

#[derive(Debug, Deserialize)]
pub struct InboxQuery {
    pub from: Option<String>,
}

/// `GET /v1/inbox?from=ID`: oldest first, decrypted, same shape as the node's inbox.
pub async fn inbox(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    QueryParams(q): QueryParams<InboxQuery>,
) -> ApiResult<Json<InboxList>> {
    require(&gw, &headers, Need::Scope("admin"))?;
    let messages = inbox::list(&gw, q.from.as_deref()).await?;
    Ok(Json(InboxList { messages }))
}

/// `POST /v1/inbox/{message_id}/ack`.
pub async fn inbox_ack(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<InboxAcked>> {
    require(&gw, &headers, Need::Scope("admin"))?;
    let acked = inbox::ack(&gw, &id).await?;
    Ok(Json(InboxAcked {
        acked,
        message_id: id,
        ok: true,
    }))
}

/// `POST /v1/revocations` (admin): add a token id to the list nodes fetch.
pub async fn revoke(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<RevokeBody>,
) -> ApiResult<Response> {
    let by = require(&gw, &headers, Need::Scope("admin"))?;
    Ok(
        match crate::gateway::delivery::revoke(&gw, &by, &b.jti).await? {
            Revoked::Duplicate => Json(RevocationDuplicate {
                duplicate: true,
                jti: b.jti,
                ok: true,
            })
            .into_response(),
            Revoked::Added { version } => (
                StatusCode::CREATED,
                Json(RevocationAdded {
                    jti: b.jti,
                    ok: true,
                    version,
                }),
            )
                .into_response(),
        },
    )
}

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub async fn readyz(State(gw): State<Arc<Gateway>>) -> ApiResult<Json<Value>> {
    if !gw.is_ready() {
        return Err(ApiError::not_ready());
    }
    // Ready means writes can be taken now: a gateway whose database is away answers
    // every write 503, so it must not be in a load balancer's rotation either.
    match gw.writable().await {
        Ok(()) => Ok(Json(json!({"status": "ready"}))),
        Err(e) => Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            format!("the store cannot take writes now: {e}"),
        )),
    }
}

/// `GET /metrics`: like `/v1/status`, open on loopback, otherwise a `read` token is
/// needed (the queue series name every node). One state query per scrape.
pub async fn metrics(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    if !peer.ip().is_loopback() {
        require(&gw, &headers, Need::Scope("read"))?;
    }
    gw.refresh_gauges().await;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        gw.metrics.render(),
    )
        .into_response())
}

/// `GET /v1/status`, the node's shape where it applies (`outpost status` reads it):
/// open on loopback, otherwise a `read` token is needed — the queue list names nodes.
pub async fn status(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    if !peer.ip().is_loopback() {
        require(&gw, &headers, Need::Scope("read"))?;
    }
    let now = gw.now_ms();
    let queues: Vec<Value> = gw
        .queue_stats()
        .await?
        .into_iter()
        .map(|s| json!({"queue": s.queue, "peer": s.peer, "depth": s.depth, "oldest_age_s": s.oldest_age_s}))
        .collect();
    let nodes = gw.trust().list().filter(|p| p.doc.role == "node").count();
    Ok(Json(json!({
        "node_id": gw.cfg.node_id,
        "role": "gateway",
        "version": env!("CARGO_PKG_VERSION"),
        "store": gw.cfg.store_description(),
        "uptime_s": now.saturating_sub(gw.started_ms) / 1000,
        "upstream": {"state": "none", "detail": "this is the gateway"},
        "audit": {"size": 0, "synced_size": 0},
        "nodes_enrolled": nodes,
        "queues": queues,
    })))
}
