//! `POST /v1/nodes/{id}/upload`: envelopes a node sends upstream.
//!
//! Each envelope goes through the receive pipeline on its own, so one bad envelope
//! never costs the others:
//! - addressed to the gateway, `TASK_RESULT` → stored as the result of the original
//!   request (found through the `job_id` → `message_id` map), `result` event;
//! - addressed to the gateway, anything else → the gateway inbox;
//! - addressed to another enrolled node → forwarded unopened into that node's queue
//!   (the gateway cannot read it: it is sealed to the recipient).

use serde_json::Value;

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::state::Gateway;
use super::storage::{FiledResult, ForNode, InboxMessage, Queued, StateError};
use crate::envelope::{open_parsed, replay_keep_until_ms, Envelope, OpenContext, OpenError};
use crate::store::StoreError;
use crate::sync::wire::{InboxRecord, TaskResult, UploadAnswer, UploadRejected};
use crate::telemetry::EnvelopeReceived;

enum Verdict {
    Accepted,
    Duplicate,
    Rejected(String),
}

/// Receive what `uploader` sent upstream, envelope by envelope. Fails as a whole only
/// for the gateway's own trouble (storage), so the node keeps everything and retries.
pub async fn upload(
    gw: &Gateway,
    uploader: &str,
    envelopes: Vec<Value>,
) -> Result<UploadAnswer, GatewayError> {
    if envelopes.len() > super::delivery::MAX_BATCH {
        return Err(GatewayError::BadRequest(
            "at most 1000 envelopes per upload".into(),
        ));
    }
    let (mut accepted, mut duplicates, mut rejected) = (Vec::new(), Vec::new(), Vec::new());
    for v in envelopes {
        let id = v
            .get("message_id")
            .and_then(|x| x.as_str())
            .map(|s| s.chars().take(100).collect::<String>())
            .unwrap_or_default();
        match receive_one(gw, uploader, &v).await {
            Ok(Verdict::Accepted) => accepted.push(id),
            Ok(Verdict::Duplicate) => duplicates.push(id),
            Ok(Verdict::Rejected(code)) => {
                EnvelopeReceived {
                    result: &code,
                    sender: uploader,
                    message_id: &id,
                }
                .emit(&gw.metrics);
                gw.publish(GatewayEvent::Rejected {
                    message_id: id.clone(),
                    node_id: uploader.to_string(),
                    code: code.clone(),
                });
                rejected.push(UploadRejected { code, id });
            }
            // Storage trouble is the gateway's, not the envelope's: fail the request so
            // the node keeps everything queued and retries.
            Err(e) => return Err(e),
        }
    }
    Ok(UploadAnswer {
        accepted,
        duplicates,
        rejected,
    })
}

async fn receive_one(gw: &Gateway, uploader: &str, v: &Value) -> Result<Verdict, GatewayError> {
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
    // The replay check is pure; ask the state about this envelope's id first.
    let known = gw.state.upload_seen(&env.message_id).await?;
    let seen = |_s: &str, id: &str| known && id == env.message_id;
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
            Some(rid) => match gw.state.request_node(rid).await? {
                Some(node) if node == uploader => rid.clone(),
                _ => opened.message_id.clone(),
            },
            None => opened.message_id.clone(),
        };
        // Stored as the node sent it: `GET /v1/messages/{id}` shows those bytes.
        gw.state
            .file_result(FiledResult {
                request_id: request_id.clone(),
                result_message_id: opened.message_id.clone(),
                plaintext: opened.plaintext.clone(),
                remember_until_ms: keep,
            })
            .await?;
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
    let msg = InboxMessage {
        from_node: uploader.to_string(),
        message_id: opened.message_id.clone(),
        payload_type: opened.payload_type.clone(),
        priority: opened.priority.min(255) as u8,
        created_at_ms: opened.created_at_ms,
        expires_at_ms: opened.expires_at_ms,
        record: record.to_bytes(),
        remember_until_ms: keep,
    };
    match gw.state.inbox_put(msg).await {
        Ok(Queued::Duplicate) => Ok(Verdict::Duplicate),
        Ok(Queued::Queued) => Ok(Verdict::Accepted),
        Err(StateError::Store(StoreError::Expired)) => Ok(Verdict::Rejected("expired".into())),
        Err(e) => Err(e.into()),
    }
}

/// Node → node: queue the sealed envelope for its recipient, unopened.
async fn forward(gw: &Gateway, env: Envelope, bytes: Vec<u8>) -> Result<Verdict, GatewayError> {
    let to = env.recipient_node_id.clone();
    if gw.enrolled(&to).is_none() {
        return Ok(Verdict::Rejected("unknown_recipient".into()));
    }
    let now = gw.now_ms();
    if now >= env.expires_at_ms.saturating_add(gw.skew_ms()) {
        return Ok(Verdict::Rejected("expired".into()));
    }
    let msg = ForNode {
        node_id: to.clone(),
        message_id: env.message_id.clone(),
        payload_type: env.payload_type.clone(),
        priority: env.priority.min(255) as u8,
        created_at_ms: env.created_at_ms,
        expires_at_ms: env.expires_at_ms,
        envelope: bytes,
        max_attempts: gw.cfg.queue.max_attempts,
    };
    match gw.state.forward(msg).await {
        Ok(Queued::Duplicate) => Ok(Verdict::Duplicate),
        Ok(Queued::Queued) => {
            super::commands::queued(
                gw,
                &env.message_id,
                &to,
                &env.payload_type,
                env.expires_at_ms,
            );
            Ok(Verdict::Accepted)
        }
        Err(StateError::Store(StoreError::Expired)) => Ok(Verdict::Rejected("expired".into())),
        Err(StateError::Store(e @ StoreError::QueueFull { .. })) => {
            tracing::warn!(event = "forward_refused", to = %to, error = %e);
            Ok(Verdict::Rejected("queue_full".into()))
        }
        Err(e) => Err(e.into()),
    }
}
