//! Node side of the gateway (SPEC §6): long-poll pull, ack, upload, revocations.
//! Every handler takes a [`SignedNode`], so nothing here runs for an unsigned request.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::SignedNode;
use super::events::GatewayEvent;
use super::state::{store_error, Gateway, KV_REVOCATIONS, Q_NODE};
use crate::api::json::parse;
use crate::api::{ApiError, ApiResult};
use crate::telemetry::MessageEvent;

/// Upper bound of a long-poll, whatever the node asks for.
pub const MAX_WAIT_S: u64 = 60;
pub const MAX_BATCH: usize = 1000;

#[derive(Debug, Deserialize)]
pub struct PullQuery {
    pub wait_s: Option<u64>,
    pub max: Option<usize>,
}

/// Decrements the poll count however the handler ends (answer, disconnect, shutdown).
struct PollGuard<'a>(&'a Gateway, &'a str);
impl Drop for PollGuard<'_> {
    fn drop(&mut self) {
        self.0.poll_ended(self.1);
    }
}

/// `GET /v1/nodes/{id}/pull?wait_s=&max=`: `{"pending_count","envelopes":[…]}` in queue
/// order (stored messages first, because they were queued first). Waits on the node's
/// `Notify` until something is queued, the wait ends or the gateway shuts down.
pub async fn pull(
    State(gw): State<Arc<Gateway>>,
    Query(q): Query<PullQuery>,
    signed: SignedNode,
) -> ApiResult<Json<Value>> {
    let node = signed.node_id.as_str();
    let wait = Duration::from_secs(q.wait_s.unwrap_or(0).min(MAX_WAIT_S));
    let max = q
        .max
        .unwrap_or(gw.cfg.queue.flush_batch as usize)
        .clamp(1, MAX_BATCH);
    gw.poll_started(node);
    let _guard = PollGuard(&gw, node);
    let deadline = tokio::time::Instant::now() + wait;
    let waker = gw.waker(node);
    let batch = loop {
        // Register interest before looking, so an enqueue between the look and the
        // wait still wakes us.
        let notified = waker.notified();
        let batch = gw
            .store
            .next_batch(Q_NODE, node, max, gw.now_ms())
            .map_err(store_error)?;
        if !batch.is_empty() || tokio::time::Instant::now() >= deadline {
            break batch;
        }
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = gw.shutdown.cancelled() => break batch,
        }
    };
    let pending = gw.store.pending(Q_NODE, node).map_err(store_error)?;
    let ids: Vec<String> = batch.iter().map(|m| m.message_id.clone()).collect();
    if !ids.is_empty() {
        gw.store
            .mark_delivering(Q_NODE, node, ids)
            .await
            .map_err(store_error)?;
    }
    let envelopes: Vec<Value> = batch
        .iter()
        .filter_map(|m| serde_json::from_slice(&m.body).ok())
        .collect();
    Ok(Json(
        json!({"pending_count": pending, "envelopes": envelopes}),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AckBody {
    message_ids: Vec<String>,
}

/// `POST /v1/nodes/{id}/ack`: removes the messages from the node's queue and emits
/// `delivered` (with `was_stored`) for each that was there.
pub async fn ack(State(gw): State<Arc<Gateway>>, signed: SignedNode) -> ApiResult<Json<Value>> {
    let body: AckBody = parse(&signed.body)?;
    if body.message_ids.len() > MAX_BATCH {
        return Err(ApiError::bad_request("at most 1000 ids per ack"));
    }
    let node = signed.node_id;
    let out = gw
        .store
        .ack(Q_NODE, &node, body.message_ids, gw.now_ms())
        .await
        .map_err(store_error)?;
    let mut acked = Vec::new();
    for a in out.into_iter().filter(|a| a.was_stored) {
        let was_stored = gw.take_was_stored(&a.message_id);
        MessageEvent {
            queue: Q_NODE,
            event: "delivered",
            peer: &node,
            message_id: &a.message_id,
            reason: None,
        }
        .emit(&gw.metrics);
        gw.publish(GatewayEvent::Delivered {
            message_id: a.message_id.clone(),
            node_id: node.clone(),
            was_stored,
        });
        acked.push(a.message_id);
    }
    Ok(Json(json!({"acked": acked})))
}

#[derive(Debug, Deserialize)]
pub struct SinceQuery {
    pub since: Option<u64>,
}

/// `GET /v1/nodes/{id}/revocations?since=N`: revoked token ids added after version N,
/// and the current version to pass next time.
pub async fn revocations(
    State(gw): State<Arc<Gateway>>,
    Query(q): Query<SinceQuery>,
    _signed: SignedNode,
) -> ApiResult<Json<Value>> {
    let since = q.since.unwrap_or(0);
    let rows = gw.store.kv_list(KV_REVOCATIONS).map_err(store_error)?;
    let mut version = 0;
    let mut revoked = Vec::new();
    for (k, v) in rows {
        let n: u64 = k.parse().unwrap_or(0);
        version = version.max(n);
        if n > since {
            revoked.push(String::from_utf8_lossy(&v).into_owned());
        }
    }
    Ok(Json(json!({"version": version, "revoked": revoked})))
}
