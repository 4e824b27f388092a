//! Gateway inbox (messages nodes sent upstream, other than results), token revocation,
//! and the health/metrics endpoints.

use std::sync::Arc;

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::require;
use super::state::{store_error, Gateway, KV_REVOCATIONS, Q_INBOX};
use crate::api::json::JsonBody;
use crate::api::{ApiError, ApiResult};
use crate::sync::wire::InboxRecord;
use crate::token::Need;

#[derive(Debug, Deserialize)]
pub struct InboxQuery {
    pub from: Option<String>,
}

/// `GET /v1/inbox?from=ID`: oldest first, decrypted, same shape as the node's inbox.
pub async fn inbox(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Query(q): Query<InboxQuery>,
) -> ApiResult<Json<Value>> {
    require(&gw, &headers, Need::Scope("admin"))?;
    let now = gw.now_ms();
    let page = gw
        .store
        .list(Q_INBOX, q.from.as_deref(), None, 500)
        .map_err(store_error)?;
    // `list` includes what expired but the sweeper has not removed yet (up to a tick):
    // never hand that out, as the node's inbox does not.
    let messages: Vec<InboxRecord> = page
        .items
        .iter()
        .filter(|m| m.expires_at_ms > now)
        .filter_map(|m| match InboxRecord::from_bytes(&m.body) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(event = "inbox_record_unreadable", message_id = %m.message_id, error = %e);
                None
            }
        })
        .collect();
    Ok(Json(json!({"messages": messages})))
}

/// `POST /v1/inbox/{message_id}/ack`.
pub async fn inbox_ack(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    require(&gw, &headers, Need::Scope("admin"))?;
    let st = gw.store.status(&id).map_err(store_error)?;
    let Some(st) = st.filter(|s| s.queue == Q_INBOX) else {
        return Err(ApiError::not_found("not_found", "no such inbox message"));
    };
    let out = gw
        .store
        .ack(Q_INBOX, &st.peer, vec![id.clone()], gw.now_ms())
        .await
        .map_err(store_error)?;
    let acked = out.iter().any(|a| a.was_stored);
    Ok(Json(json!({"ok": true, "message_id": id, "acked": acked})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    pub jti: String,
}

/// `POST /v1/revocations` (admin): add a token id to the list nodes fetch.
pub async fn revoke(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<RevokeBody>,
) -> ApiResult<Response> {
    require(&gw, &headers, Need::Scope("admin"))?;
    if b.jti.is_empty() || b.jti.len() > 128 {
        return Err(ApiError::bad_request("jti must be 1..=128 characters"));
    }
    // Serialised by the audit lock so two revocations never take the same version.
    let _g = gw.audit.lock().await;
    let rows = gw.store.kv_list(KV_REVOCATIONS).map_err(store_error)?;
    if rows.iter().any(|(_, v)| v.as_slice() == b.jti.as_bytes()) {
        return Ok(Json(json!({"ok": true, "jti": b.jti, "duplicate": true})).into_response());
    }
    let version = rows
        .iter()
        .filter_map(|(k, _)| k.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
        + 1;
    gw.store
        .kv_put(
            KV_REVOCATIONS,
            &format!("{version:020}"),
            b.jti.clone().into_bytes(),
        )
        .await
        .map_err(store_error)?;
    tracing::info!(event = "token_revoked", jti = %b.jti, version);
    Ok((
        StatusCode::CREATED,
        Json(json!({"ok": true, "jti": b.jti, "version": version})),
    )
        .into_response())
}

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub async fn readyz(State(gw): State<Arc<Gateway>>) -> ApiResult<Json<Value>> {
    if gw.is_ready() {
        Ok(Json(json!({"status": "ready"})))
    } else {
        Err(ApiError::not_ready())
    }
}

/// `GET /metrics`: like `/v1/status`, open on loopback, otherwise a `read` token is
/// needed (the queue series name every node). One store query per scrape: a counter
/// row and one index seek per queue, whatever the number of queued messages.
pub async fn metrics(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    if !peer.ip().is_loopback() {
        require(&gw, &headers, Need::Scope("read"))?;
    }
    if let Ok(stats) = gw.store.queue_stats(gw.now_ms()) {
        gw.metrics.set_queue_stats(&stats);
        gw.metrics
            .store_bytes
            .set(&[], stats.iter().map(|s| s.bytes as f64).sum());
    }
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
        .store
        .queue_stats(now)
        .map_err(store_error)?
        .into_iter()
        .map(|s| json!({"queue": s.queue, "peer": s.peer, "depth": s.depth, "oldest_age_s": s.oldest_age_s}))
        .collect();
    let nodes = gw.trust().list().filter(|p| p.doc.role == "node").count();
    Ok(Json(json!({
        "node_id": gw.cfg.node_id,
        "role": "gateway",
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": now.saturating_sub(gw.started_ms) / 1000,
        "upstream": {"state": "none", "detail": "this is the gateway"},
        "audit": {"size": 0, "synced_size": 0},
        "nodes_enrolled": nodes,
        "queues": queues,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::envelope::{IdentityDocument, Keys};
    use crate::store::{NewMessage, Store};
    use crate::token::Claims;

    const T0: u64 = 1_780_000_000_000;

    /// Found by the fault harness (scripts/chaos.py flap, docs/RELIABILITY.md): a
    /// message that expired between two sweeps was still handed out.
    #[tokio::test]
    async fn inbox_never_lists_a_message_past_its_expiry_even_before_the_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::from_str(&format!(
            "[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\ndata_dir = \"{}\"\n",
            dir.path().display()
        ))
        .unwrap();
        let clock = ManualClock::new(T0);
        let store = Store::open(
            &dir.path().join("store"),
            crate::daemon::store_options(&cfg),
            Arc::new(clock.clone()),
        )
        .unwrap();
        let keys = Keys::generate();
        let me = IdentityDocument::new("gateway:main", "gateway", &keys, "1970-01-01T00:00:00Z");
        let trust = crate::daemon::trust::TrustCache::load(&store, &me).unwrap();
        let claims = Claims::new(
            "gateway:main",
            "ops",
            "gateway:main",
            vec!["admin".into()],
            T0,
            3_600_000,
            "j1",
        )
        .unwrap();
        let token = crate::token::issue(&keys, &claims).unwrap();
        let gw = Arc::new(Gateway::new(
            cfg,
            store,
            keys,
            trust,
            tokio_util::sync::CancellationToken::new(),
        ));
        for (id, ttl_ms) in [("short", 4_000), ("long", 86_400_000)] {
            let record = InboxRecord {
                created_at_ms: None,
                expires_at_ms: None,
                from: "node:a".into(),
                message_id: id.into(),
                payload: json!({"id": id}),
                payload_type: "DATA".into(),
                received_at_ms: T0,
            };
            gw.store
                .enqueue(NewMessage {
                    queue: Q_INBOX.into(),
                    peer: "node:a".into(),
                    message_id: id.into(),
                    payload_type: "DATA".into(),
                    priority: 0,
                    created_at_ms: T0,
                    expires_at_ms: T0 + ttl_ms,
                    body: record.to_bytes(),
                    max_attempts: Some(0),
                    dedup_until_ms: None,
                })
                .await
                .unwrap();
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        let ids = |v: &Value| -> Vec<String> {
            v["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["message_id"].as_str().unwrap().to_string())
                .collect()
        };
        let list = || {
            inbox(
                State(gw.clone()),
                headers.clone(),
                Query(InboxQuery { from: None }),
            )
        };
        assert_eq!(ids(&list().await.unwrap().0), ["short", "long"]);
        // Expired, and no sweep has run (none runs in this test).
        clock.advance_ms(4_000);
        assert_eq!(ids(&list().await.unwrap().0), ["long"]);
    }
}
