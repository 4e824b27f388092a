//! Node side of the gateway: long-poll pull, ack, upload, audit sync, revocations.
//! Every handler takes a [`SignedNode`], so nothing here runs for an unsigned request.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use super::auth::SignedNode;
use crate::api::json::{parse, QueryParams};
use crate::api::ApiResult;
use crate::gateway::storage::NodeAck;
use crate::gateway::{delivery, Gateway};
use crate::sync::wire::{
    AckAnswer, AckRequest, AuditAnswer, AuditStatus, AuditUpload, PullAnswer, ReportAnswer,
    Revocations, RotateAnswer, StateReport, UploadAnswer, UploadRequest,
};

#[derive(Debug, Deserialize)]
pub struct PullQuery {
    pub wait_s: Option<u64>,
    pub max: Option<u64>,
    /// The last message id of the node's previous batch (PROTOCOL §12.1, §12.6: pipelining).
    pub after: Option<String>,
    /// The desired version the node holds (PROTOCOL §16.4); a newer one goes first.
    pub desired: Option<u64>,
}

/// `GET /v1/nodes/{id}/pull?wait_s=&max=&after=`: `{"pending_count","envelopes":[…]}`
/// in queue order, waiting up to `wait_s` for the first.
pub async fn pull(
    State(gw): State<Arc<Gateway>>,
    QueryParams(q): QueryParams<PullQuery>,
    signed: SignedNode,
) -> ApiResult<Json<PullAnswer>> {
    let max = q.max.map(|m| m.min(delivery::MAX_BATCH as u64) as usize);
    let p = gw
        .delivery()
        .pull(
            &signed.node_id,
            q.wait_s,
            max,
            q.after.as_deref(),
            q.desired,
        )
        .await?;
    Ok(Json(PullAnswer {
        envelopes: p.envelopes,
        pending_count: p.pending,
        gateway_rotation: gw.rotation_for_nodes(),
    }))
}

/// `POST /v1/nodes/{id}/report`: the node's inventory and reported state (PROTOCOL
/// §16.5).
pub async fn report(
    State(gw): State<Arc<Gateway>>,
    signed: SignedNode,
) -> ApiResult<Json<ReportAnswer>> {
    let body: StateReport = parse(&signed.body)?;
    Ok(Json(
        gw.node_states().take_report(&signed.node_id, &body).await?,
    ))
}

/// `POST /v1/nodes/{id}/ack`: removes the messages from the node's queue.
pub async fn ack(State(gw): State<Arc<Gateway>>, signed: SignedNode) -> ApiResult<Json<AckAnswer>> {
    let body: AckRequest = parse(&signed.body)?;
    let ack = NodeAck {
        delivered: body.message_ids,
        rejected: body.rejected.into_iter().map(|r| (r.id, r.code)).collect(),
        events: (0, Vec::new()),
    };
    let acked = gw.delivery().ack(&signed.node_id, ack).await?;
    Ok(Json(AckAnswer { acked }))
}

/// `POST /v1/nodes/{id}/upload`: envelopes the node sends upstream.
pub async fn upload(
    State(gw): State<Arc<Gateway>>,
    signed: SignedNode,
) -> ApiResult<Json<UploadAnswer>> {
    let body: UploadRequest = parse(&signed.body)?;
    Ok(Json(
        gw.uploads().upload(&signed.node_id, body.envelopes).await?,
    ))
}

/// `POST /v1/nodes/{id}/audit`: entries from the confirmed size plus a signed
/// checkpoint; 409 `audit_gap`/`audit_mismatch` when they would not extend the copy.
pub async fn audit_upload(
    State(gw): State<Arc<Gateway>>,
    signed: SignedNode,
) -> ApiResult<Json<AuditAnswer>> {
    // Entries that are neither text nor objects fail here, as 400 bad_request.
    let body: AuditUpload = parse(&signed.body)?;
    let size = gw.audit_sync().extend(&signed.node_id, body).await?;
    Ok(Json(AuditAnswer { size }))
}

/// `GET /v1/nodes/{id}/audit`: the confirmed size and root.
pub async fn audit_status(
    State(gw): State<Arc<Gateway>>,
    signed: SignedNode,
) -> ApiResult<Json<AuditStatus>> {
    Ok(Json(gw.audit_sync().status(&signed.node_id).await?))
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
    let list = gw.delivery().revocations(q.since.unwrap_or(0)).await?;
    Ok(Json(Revocations {
        revoked: list.revoked,
        version: list.version,
    }))
}

/// A node's key rotation statement, signed by the key it retires (PROTOCOL §15.7).
pub async fn rotate(
    State(gw): State<Arc<Gateway>>,
    QueryParams(q): QueryParams<RotateQuery>,
    signed: SignedNode,
) -> ApiResult<Json<RotateAnswer>> {
    let body: crate::envelope::KeyRotation = parse(&signed.body)?;
    let no_grace = match q.grace.as_deref() {
        None => false,
        Some("none") => true,
        Some(_) => return Err(crate::api::ApiError::bad_request("grace must be \"none\"")),
    };
    let applied = gw
        .rotations()
        .rotate_node(&signed.node_id, &body, no_grace)
        .await?;
    Ok(Json(RotateAnswer {
        // The device's own id, never its address (PROTOCOL §18.1).
        node_id: crate::fleet::tenant::node_of(&signed.node_id).to_string(),
        applied,
        grace_ended: no_grace,
    }))
}

/// `POST /v1/nodes/{id}/rotate?grace=none`: the retired key is compromised, so it gets
/// no grace (PROTOCOL §15.7). The query is covered by the request's signature.
#[derive(Debug, Deserialize)]
pub struct RotateQuery {
    pub grace: Option<String>,
}
