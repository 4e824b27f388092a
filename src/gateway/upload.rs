//! `POST /v1/nodes/{id}/upload`: envelopes a node sends upstream.
//!
//! Each envelope goes through the receive pipeline on its own, so one bad envelope
//! never costs the others:
//! - addressed to the gateway, `TASK_RESULT` → stored as the result of the original
//!   request (found through the `job_id` → `message_id` map), `result` event;
//! - addressed to the gateway, anything else → the gateway inbox;
//! - addressed to another enrolled node → forwarded unopened into that node's queue
//!   (the gateway cannot read it: it is sealed to the recipient).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::auth::SignedNode;
use super::events::GatewayEvent;
use super::state::{store_error, Gateway, KV_REQUESTS, KV_RESULTS, Q_INBOX, Q_NODE, SCOPE_RESULTS};
use crate::api::json::parse;
use crate::api::{ApiError, ApiResult};
use crate::envelope::{
    check_relay, open_parsed, replay_keep_until_ms, Envelope, OpenContext, OpenError,
};
use crate::store::{EnqueueOutcome, NewMessage, WriteOp};
use crate::sync::wire::{InboxRecord, TaskResult, UploadAnswer, UploadRejected, UploadRequest};
use crate::telemetry::{EnvelopeReceived, MessageEvent};

enum Verdict {
    Accepted,
    Duplicate,
    Rejected(String),
}

pub async fn upload(
    State(gw): State<Arc<Gateway>>,
    signed: SignedNode,
) -> ApiResult<Json<UploadAnswer>> {
    let body: UploadRequest = parse(&signed.body)?;
    if body.envelopes.len() > super::node_api::MAX_BATCH {
        return Err(ApiError::bad_request("at most 1000 envelopes per upload"));
    }
    let (mut accepted, mut duplicates, mut rejected) = (Vec::new(), Vec::new(), Vec::new());
    for v in body.envelopes {
        let id = v
            .get("message_id")
            .and_then(|x| x.as_str())
            .map(|s| s.chars().take(100).collect::<String>())
            .unwrap_or_default();
        match receive_one(&gw, &signed.node_id, &v).await {
            Ok(Verdict::Accepted) => accepted.push(id),
            Ok(Verdict::Duplicate) => duplicates.push(id),
            Ok(Verdict::Rejected(code)) => {
                EnvelopeReceived {
                    result: &code,
                    sender: &signed.node_id,
                    message_id: &id,
                }
                .emit(&gw.metrics);
                gw.publish(GatewayEvent::Rejected {
                    message_id: id.clone(),
                    node_id: signed.node_id.clone(),
                    code: code.clone(),
                });
                rejected.push(UploadRejected { code, id });
            }
            // Storage trouble is the gateway's, not the envelope's: fail the request so
            // the node keeps everything queued and retries.
            Err(e) => return Err(e),
        }
    }
    Ok(Json(UploadAnswer {
        accepted,
        duplicates,
        rejected,
    }))
}

async fn receive_one(gw: &Gateway, uploader: &str, v: &Value) -> Result<Verdict, ApiError> {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    if bytes.len() as u64 > gw.cfg.queue.max_message_bytes {
        return Ok(Verdict::Rejected("payload_too_large".into()));
    }
    let env = match Envelope::from_json(&bytes) {
        Ok(e) => e,
        Err(e) => return Ok(Verdict::Rejected(OpenError::from(e).code().into())),
    };
    if env.sender_node_id != uploader {
        return Ok(Verdict::Rejected("forbidden".into()));
    }
    if env.recipient_node_id != gw.cfg.node_id {
        return forward(gw, env, bytes).await;
    }
    let now = gw.now_ms();
    let trust = gw.trust();
    let ctx = OpenContext {
        me: &gw.cfg.node_id,
        keys: &gw.keys,
        trust: &trust,
        now_ms: now,
        skew_ms: gw.skew_ms(),
        max_bytes: gw.cfg.queue.max_message_bytes as usize,
        max_ttl_ms: gw.cfg.queue.max_ttl_s * 1000,
    };
    let seen = |_s: &str, id: &str| {
        gw.store.seen(SCOPE_RESULTS, id).unwrap_or(false)
            || gw.store.seen(Q_INBOX, id).unwrap_or(false)
    };
    let opened = match open_parsed(&env, &ctx, &seen) {
        Ok(o) => o,
        Err(OpenError::Duplicate) => return Ok(Verdict::Duplicate),
        Err(e) => return Ok(Verdict::Rejected(e.code().into())),
    };
    let keep = replay_keep_until_ms(opened.expires_at_ms, 2 * gw.skew_ms());
    if opened.payload_type == "TASK_RESULT" {
        let Ok(result) = serde_json::from_slice::<TaskResult>(&opened.plaintext) else {
            return Ok(Verdict::Rejected("bad_request".into()));
        };
        // The result names its request (`request_id`); it is filed under that request
        // only if the request really went to this node. Anything else (a node-initiated
        // call, a request id of another node's) is kept under the result's own id.
        let request_id = match &result.request_id {
            Some(rid) => match gw.store.kv_get(KV_REQUESTS, rid).map_err(store_error)? {
                Some(node) if node == uploader.as_bytes() => rid.clone(),
                _ => opened.message_id.clone(),
            },
            None => opened.message_id.clone(),
        };
        // Stored as the node sent it: `GET /v1/messages/{id}` shows those bytes.
        gw.store
            .write(vec![
                WriteOp::KvPut {
                    ns: KV_RESULTS.into(),
                    key: request_id.clone(),
                    value: opened.plaintext.clone(),
                },
                WriteOp::Remember {
                    scope: SCOPE_RESULTS.into(),
                    id: opened.message_id.clone(),
                    keep_until_ms: keep,
                },
            ])
            .await
            .map_err(store_error)?;
        let (job_id, ok) = (result.job_id, result.ok);
        tracing::info!(event = "task_result", node_id = uploader, message_id = %request_id, job_id = %job_id, ok);
        gw.publish(GatewayEvent::Result {
            message_id: request_id,
            job_id,
            node_id: uploader.to_string(),
            ok,
        });
        return Ok(Verdict::Accepted);
    }
    // The gateway's inbox record never carried the envelope times (see InboxRecord).
    let record = InboxRecord {
        created_at_ms: None,
        expires_at_ms: None,
        ..InboxRecord::new(
            &opened,
            serde_json::from_slice(&opened.plaintext).unwrap_or(Value::Null),
            now,
        )
    };
    let msg = NewMessage {
        queue: Q_INBOX.into(),
        peer: uploader.to_string(),
        message_id: opened.message_id.clone(),
        payload_type: opened.payload_type.clone(),
        priority: opened.priority.min(255) as u8,
        created_at_ms: opened.created_at_ms,
        expires_at_ms: opened.expires_at_ms,
        body: record.to_bytes(),
        max_attempts: Some(0),
        dedup_until_ms: Some(keep),
    };
    match gw.store.enqueue(msg).await {
        Ok(EnqueueOutcome::Duplicate) => Ok(Verdict::Duplicate),
        Ok(EnqueueOutcome::Queued { .. }) => Ok(Verdict::Accepted),
        Err(crate::store::StoreError::Expired) => Ok(Verdict::Rejected("expired".into())),
        Err(e) => Err(store_error(e)),
    }
}

/// Node → node: queue the sealed envelope for its recipient, unopened.
async fn forward(gw: &Gateway, env: Envelope, bytes: Vec<u8>) -> Result<Verdict, ApiError> {
    let to = env.recipient_node_id.clone();
    if gw.enrolled(&to).is_none() {
        return Ok(Verdict::Rejected("unknown_recipient".into()));
    }
    // What a hop that cannot decrypt can check: time window, sender trusted with `send`,
    // strict signature; the recipient still runs the whole pipeline.
    let trust = gw.trust();
    let max_ttl_ms = gw.cfg.queue.max_ttl_s * 1000;
    if let Err(e) = check_relay(&env, &trust, gw.now_ms(), gw.skew_ms(), max_ttl_ms) {
        return Ok(Verdict::Rejected(e.code().into()));
    }
    let msg = NewMessage {
        queue: Q_NODE.into(),
        peer: to.clone(),
        message_id: env.message_id.clone(),
        payload_type: env.payload_type.clone(),
        priority: env.priority.min(255) as u8,
        created_at_ms: env.created_at_ms,
        expires_at_ms: env.expires_at_ms,
        body: bytes,
        max_attempts: Some(gw.cfg.queue.max_attempts),
        dedup_until_ms: None,
    };
    match gw.store.enqueue(msg).await {
        Ok(EnqueueOutcome::Duplicate) => Ok(Verdict::Duplicate),
        Ok(EnqueueOutcome::Queued { .. }) => {
            MessageEvent {
                queue: Q_NODE,
                event: "enqueued",
                peer: &to,
                message_id: &env.message_id,
                reason: None,
            }
            .emit(&gw.metrics);
            gw.publish(GatewayEvent::Queued {
                message_id: env.message_id.clone(),
                node_id: to.clone(),
                payload_type: env.payload_type.clone(),
                expires_at_ms: env.expires_at_ms,
            });
            gw.wake_node(&to);
            Ok(Verdict::Accepted)
        }
        Err(crate::store::StoreError::Expired) => Ok(Verdict::Rejected("expired".into())),
        Err(e @ crate::store::StoreError::QueueFull { .. }) => {
            tracing::warn!(event = "forward_refused", to = %to, error = %e);
            Ok(Verdict::Rejected("queue_full".into()))
        }
        Err(e) => Err(store_error(e)),
    }
}
