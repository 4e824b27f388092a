//! Messages this node sends: sealed to the final recipient at once (so they sit
//! encrypted on flash), then queued per recipient in the `outbox` for the sync loop.

use rand_core::OsRng;
use serde_json::{json, Value};

use super::core::NodeCore;
use super::inbound::Q_OUTBOX;
use crate::api::ApiError;
use crate::config::Config;
use crate::envelope::{is_valid_payload_type, seal, Keys, SealParams, TrustStore};
use crate::store::{EnqueueOutcome, NewMessage};
use crate::telemetry::MessageEvent;

impl NodeCore {
    /// Seal `payload` to `to` and queue it durably. Returns the message id.
    pub async fn queue_outbox(
        &self,
        to: &str,
        payload_type: &str,
        payload: &Value,
        ttl_s: Option<u64>,
        priority: u8,
    ) -> Result<String, ApiError> {
        if !self.accepting() {
            return Err(ApiError::not_ready());
        }
        let sealed = seal_for(
            &self.cfg,
            &self.keys,
            &self.trust(),
            self.now_ms(),
            to,
            payload_type,
            payload,
            ttl_s,
            priority,
        )?;
        self.enqueue_outbox_envelope(to, &sealed.params, sealed.envelope_json)
            .await?;
        Ok(sealed.params.message_id)
    }

    pub async fn enqueue_outbox_envelope(
        &self,
        to: &str,
        params: &SealParams,
        envelope_json: Vec<u8>,
    ) -> Result<(), ApiError> {
        let msg = outbox_message(&self.cfg, to, params, envelope_json);
        match self.store.enqueue(msg).await {
            Ok(EnqueueOutcome::Duplicate) => Ok(()),
            Ok(_) => {
                MessageEvent {
                    queue: Q_OUTBOX,
                    event: "enqueued",
                    peer: to,
                    message_id: &params.message_id,
                    reason: None,
                }
                .emit(&self.metrics);
                if let Some(u) = self.upstream() {
                    u.wake();
                }
                Ok(())
            }
            Err(e) => {
                MessageEvent {
                    queue: Q_OUTBOX,
                    event: "rejected",
                    peer: to,
                    message_id: &params.message_id,
                    reason: Some("store_refused"),
                }
                .emit(&self.metrics);
                self.audit_overflow(&e, &params.message_id, to).await;
                Err(NodeCore::map_store_error(e))
            }
        }
    }

    /// `TASK_RESULT` for a task that came from `requester`.
    pub async fn queue_task_result(
        &self,
        requester: &str,
        result: Value,
    ) -> Result<String, ApiError> {
        self.queue_outbox(requester, "TASK_RESULT", &result, None, 0)
            .await
    }
}

/// An envelope ready for the outbox.
pub struct Sealed {
    pub params: SealParams,
    pub envelope_json: Vec<u8>,
}

/// Validate, pick the TTL (a COMMAND's own `command_type` decides: setpoint 60 s …),
/// and seal to the recipient's key from the trust store.
#[allow(clippy::too_many_arguments)]
pub fn seal_for(
    cfg: &Config,
    keys: &Keys,
    trust: &TrustStore,
    now: u64,
    to: &str,
    payload_type: &str,
    payload: &Value,
    ttl_s: Option<u64>,
    priority: u8,
) -> Result<Sealed, ApiError> {
    if !is_valid_payload_type(payload_type) {
        return Err(ApiError::bad_request(format!(
            "payload_type {payload_type:?} is not a valid type"
        )));
    }
    if !payload.is_object() {
        return Err(ApiError::bad_request("payload must be a JSON object"));
    }
    if ttl_s == Some(0) {
        return Err(ApiError::bad_request("ttl_s must be > 0"));
    }
    let Some(peer) = trust.get(to) else {
        return Err(ApiError::bad_request(format!(
            "unknown recipient {to:?}: add its identity with `outpost trust add`"
        )));
    };
    let kind = match payload.get("command_type").and_then(|c| c.as_str()) {
        Some(c) if payload_type == "COMMAND" => c.to_string(),
        _ => payload_type.to_string(),
    };
    let ttl = cfg.queue.ttl_for(&kind, ttl_s);
    let params = SealParams {
        message_id: uuid::Uuid::now_v7().to_string(),
        created_at_ms: now,
        expires_at_ms: now + ttl * 1000,
        payload_type: payload_type.to_string(),
        priority: priority as u64,
    };
    let plaintext = serde_json::to_vec(payload).unwrap_or_default();
    let env = seal(
        keys,
        &cfg.node_id,
        &peer.doc,
        &params,
        &plaintext,
        &mut OsRng,
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Sealed {
        params,
        envelope_json: env.to_json(),
    })
}

/// The outbox record for a sealed envelope.
pub fn outbox_message(
    cfg: &Config,
    to: &str,
    params: &SealParams,
    envelope_json: Vec<u8>,
) -> NewMessage {
    NewMessage {
        queue: Q_OUTBOX.to_string(),
        peer: to.to_string(),
        message_id: params.message_id.clone(),
        payload_type: params.payload_type.clone(),
        priority: params.priority.min(255) as u8,
        created_at_ms: params.created_at_ms,
        expires_at_ms: params.expires_at_ms,
        body: envelope_json,
        max_attempts: Some(cfg.queue.max_attempts),
        dedup_until_ms: None,
    }
}

pub fn task_result_ok(job_id: &str, request_id: &str, body: &Value) -> Value {
    json!({
        "job_id": job_id,
        "request_id": request_id,
        "ok": true,
        "result": body.get("result").cloned().unwrap_or(Value::Null),
        "evidence": body.get("evidence").cloned().unwrap_or(Value::Null),
    })
}

pub fn task_result_err(job_id: &str, request_id: &str, e: &ApiError) -> Value {
    json!({
        "job_id": job_id,
        "request_id": request_id,
        "ok": false,
        "error": {"code": e.code, "message": e.message},
        "evidence": Value::Null,
    })
}
