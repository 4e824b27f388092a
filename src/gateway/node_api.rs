//! Node side of the gateway (SPEC §6): long-poll pull, ack, upload, revocations.
//! Every handler takes a [`SignedNode`], so nothing here runs for an unsigned request.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use super::auth::SignedNode;
use super::events::GatewayEvent;
use super::state::{store_error, Gateway, KV_REVOCATIONS, Q_NODE};
use crate::api::json::{parse, QueryParams};
use crate::api::{ApiError, ApiResult};
use crate::store::{OpOutcome, WriteOp};
use crate::sync::wire::{AckAnswer, AckRequest, PullAnswer, Revocations};
use crate::telemetry::MessageEvent;

/// Upper bound of a long-poll, whatever the node asks for.
pub const MAX_WAIT_S: u64 = 60;
pub const MAX_BATCH: usize = 1000;

#[derive(Debug, Deserialize)]
pub struct PullQuery {
    pub wait_s: Option<u64>,
    pub max: Option<u64>,
}

/// Decrements the long-poll count however the handler ends (answer, disconnect,
/// shutdown).
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
    QueryParams(q): QueryParams<PullQuery>,
    signed: SignedNode,
) -> ApiResult<Json<PullAnswer>> {
    let node = signed.node_id.as_str();
    let wait = Duration::from_secs(q.wait_s.unwrap_or(0).min(MAX_WAIT_S));
    let max = q
        .max
        .unwrap_or(u64::from(gw.cfg.queue.flush_batch))
        .clamp(1, MAX_BATCH as u64) as usize;
    // Only a pull that waits holds the node "on the line": a message queued while it
    // is held goes out at once (`was_stored: false`). The handshake and flush pulls
    // (`wait_s = 0`) answer immediately, and the node does its chores before it
    // long-polls again, so counting them would call a message that then waits "live".
    let _guard = (!wait.is_zero()).then(|| {
        gw.poll_started(node);
        PollGuard(&gw, node)
    });
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
    Ok(Json(PullAnswer {
        envelopes,
        pending_count: pending as u64,
    }))
}

/// `POST /v1/nodes/{id}/ack`: removes the messages from the node's queue and emits
/// `delivered` (with `was_stored`) — or `rejected` with the node's code — for each that
/// was there.
pub async fn ack(State(gw): State<Arc<Gateway>>, signed: SignedNode) -> ApiResult<Json<AckAnswer>> {
    let body: AckRequest = parse(&signed.body)?;
    if body.message_ids.len() + body.rejected.len() > MAX_BATCH {
        return Err(ApiError::bad_request("at most 1000 ids per ack"));
    }
    // No message can have such an id; the store would refuse it as a bug (500).
    let impossible = |id: &str| id.is_empty() || id.len() > 255 || id.contains('\0');
    let ids = body
        .message_ids
        .iter()
        .chain(body.rejected.iter().map(|r| &r.id));
    if ids.into_iter().any(|id| impossible(id)) {
        return Err(ApiError::bad_request(
            "message ids are 1..=255 bytes without NUL",
        ));
    }
    let node = signed.node_id;
    let now = gw.now_ms();
    let mut ops = vec![WriteOp::Ack {
        queue: Q_NODE.into(),
        peer: node.clone(),
        ids: body.message_ids,
        now_ms: now,
    }];
    for r in &body.rejected {
        ops.push(WriteOp::Ack {
            queue: Q_NODE.into(),
            peer: node.clone(),
            ids: vec![r.id.clone()],
            now_ms: now,
        });
        ops.push(WriteOp::Reject {
            queue: Q_NODE.into(),
            peer: node.clone(),
            message_id: r.id.clone(),
            reason: r.code.chars().take(64).collect(),
            now_ms: now,
        });
    }
    let out = gw.store.write(ops).await.map_err(store_error)?;
    let removed: Vec<String> = out
        .into_iter()
        .filter_map(|o| match o {
            OpOutcome::Acked(a) => Some(a),
            _ => None,
        })
        .flatten()
        .filter(|a| a.was_stored)
        .map(|a| a.message_id)
        .collect();
    let mut acked = Vec::new();
    for id in removed {
        let was_stored = gw.take_was_stored(&id);
        let rejected = body.rejected.iter().find(|r| r.id == id);
        MessageEvent {
            queue: Q_NODE,
            event: if rejected.is_some() {
                "rejected"
            } else {
                "delivered"
            },
            peer: &node,
            message_id: &id,
            reason: rejected.map(|r| r.code.as_str()),
        }
        .emit(&gw.metrics);
        gw.publish(match rejected {
            Some(r) => GatewayEvent::Rejected {
                message_id: id.clone(),
                node_id: node.clone(),
                code: r.code.clone(),
            },
            None => GatewayEvent::Delivered {
                message_id: id.clone(),
                node_id: node.clone(),
                was_stored,
            },
        });
        acked.push(id);
    }
    Ok(Json(AckAnswer { acked }))
}

#[derive(Debug, Deserialize)]
pub struct SinceQuery {
    pub since: Option<u64>,
}

/// `GET /v1/nodes/{id}/revocations?since=N`: revoked token ids added after version N,
/// and the current version to pass next time.
pub async fn revocations(
    State(gw): State<Arc<Gateway>>,
    QueryParams(q): QueryParams<SinceQuery>,
    _signed: SignedNode,
) -> ApiResult<Json<Revocations>> {
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
    Ok(Json(Revocations { revoked, version }))
}
