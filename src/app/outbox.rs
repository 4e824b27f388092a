//! Messages this node sends: sealed to the final recipient at once (so they sit
//! encrypted on flash), then queued per recipient in the `outbox` for the sync loop.

use std::sync::{Arc, Mutex};

use rand_core::OsRng;
use serde_json::{json, Value};

use super::base::Base;
use super::core::Upstream;
use super::error::NodeError;
use super::inbound::Q_OUTBOX;
use super::recorder::Recorder;
use crate::config::Config;
use crate::envelope::{is_valid_payload_type, seal, Keys, SealParams, TrustStore};

use super::calls::ToolCallDone;
use crate::store::{Batch, NewMessage};
use crate::sync::wire::{TaskError, TaskResult};
use crate::telemetry::MessageEvent;

use crate::store::names::SCOPE_OUTBOX_REQUESTS;

/// The message id a local client's idempotency key names (the one scheme,
/// [`crate::idempotency`]).
pub fn message_id_for_key(node_id: &str, key: &str) -> String {
    crate::idempotency::message_id(crate::idempotency::Owner::Outbox(node_id), key)
}

/// Messages this node sends, sealed and queued for the sync loop.
pub struct Outbox {
    base: Arc<Base>,
    recorder: Arc<Recorder>,
    /// One lock per client message id, so concurrent repeats queue one message.
    locks: crate::keyed_lock::KeyedLocks,
    upstream: Mutex<Option<Arc<dyn Upstream>>>,
}

impl Outbox {
    pub(super) fn new(base: Arc<Base>, recorder: Arc<Recorder>) -> Self {
        Self {
            base,
            recorder,
            locks: crate::keyed_lock::KeyedLocks::new(),
            upstream: Mutex::new(None),
        }
    }

    /// The sync loop, once started: woken when something is queued.
    pub fn set_upstream(&self, h: Arc<dyn Upstream>) {
        *self.upstream.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
    }

    pub fn upstream(&self) -> Option<Arc<dyn Upstream>> {
        self.upstream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Seal `payload` to `to` and queue it durably. Returns the message id.
    pub async fn queue_outbox(
        &self,
        to: &str,
        payload_type: &str,
        payload: &Value,
        ttl_s: Option<u64>,
        priority: u8,
    ) -> Result<String, NodeError> {
        self.queue_outbox_as(to, payload_type, payload, ttl_s, priority, None)
            .await
    }

    /// [`Outbox::queue_outbox`] with the client's own message id (from an
    /// idempotency key): a repeat of the same request is answered with the same id and
    /// queues nothing; the same id for another request gets 409 `idempotency_conflict`.
    pub async fn queue_outbox_as(
        &self,
        to: &str,
        payload_type: &str,
        payload: &Value,
        ttl_s: Option<u64>,
        priority: u8,
        client_id: Option<&str>,
    ) -> Result<String, NodeError> {
        if !self.base.life.accepting() {
            return Err(NodeError::NotReady(
                "the store is recovering or not writable",
            ));
        }
        let Some(id) = client_id else {
            return self
                .seal_and_enqueue(
                    to,
                    payload_type,
                    payload,
                    ttl_s,
                    priority,
                    None,
                    Batch::new(),
                )
                .await;
        };
        if uuid::Uuid::try_parse(id)
            .map(|u| u.hyphenated().to_string() != id)
            .unwrap_or(true)
        {
            return Err(NodeError::bad_request(
                "message_id must be a lowercase hyphenated UUID",
            ));
        }
        let fingerprint = crate::app::calls::sha256_hex(
            &serde_json::to_vec(&json!([to, payload_type, payload, ttl_s, priority]))
                .unwrap_or_default(),
        );
        let seen_id = format!("{id}/{fingerprint}");
        let _held = self.locks.lock(id).await;
        let known = self
            .base
            .store
            .status(id)
            .map_err(NodeError::Store)?
            .is_some();
        if known {
            let same = self
                .base
                .store
                .seen(SCOPE_OUTBOX_REQUESTS, &seen_id)
                .map_err(NodeError::Store)?;
            return match same {
                true => Ok(id.to_string()),
                false => Err(NodeError::IdempotencyConflict(format!(
                    "message {id} was queued for another request; nothing was queued"
                ))),
            };
        }
        let max_expiry = self.base.now_ms() + self.base.cfg.queue.max_ttl_s * 1000;
        let mut remember = Batch::new();
        remember.remember(
            SCOPE_OUTBOX_REQUESTS,
            &seen_id,
            max_expiry + super::calls::RESULT_KEEP_MS,
        );
        self.seal_and_enqueue(
            to,
            payload_type,
            payload,
            ttl_s,
            priority,
            Some(id),
            remember,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn seal_and_enqueue(
        &self,
        to: &str,
        payload_type: &str,
        payload: &Value,
        ttl_s: Option<u64>,
        priority: u8,
        message_id: Option<&str>,
        extra: Batch,
    ) -> Result<String, NodeError> {
        if self.upstream().is_some_and(|u| u.clock_ahead()) {
            // Sealed now, it would carry a time the gateway refuses (`not_yet_valid`):
            // a clear "not now" beats a 202 for a message that cannot be delivered.
            return Err(NodeError::NotReady(
                "this node's clock is ahead of its gateway's (the gateway's signed time says so): fix the clock (NTP), then retry",
            ));
        }
        let sealed = seal_for(
            &self.base.cfg,
            &self.base.keys.current(),
            &self.base.trust(),
            self.base.now_ms(),
            to,
            payload_type,
            payload,
            ttl_s,
            priority,
            message_id,
        )?;
        self.enqueue_outbox_envelope(to, &sealed.params, sealed.envelope_json, extra)
            .await?;
        Ok(sealed.params.message_id)
    }

    /// Queue a sealed envelope, with the changes of `extra` in the same atomic write.
    pub async fn enqueue_outbox_envelope(
        &self,
        to: &str,
        params: &SealParams,
        envelope_json: Vec<u8>,
        extra: Batch,
    ) -> Result<(), NodeError> {
        let msg = outbox_message(&self.base.cfg, to, params, envelope_json);
        let mut batch = Batch::new();
        batch.enqueue(msg).append(extra);
        match self.base.store.commit(batch).await {
            Ok(c) if c.had_duplicate() => Ok(()),
            Ok(_) => {
                MessageEvent {
                    queue: Q_OUTBOX,
                    event: "enqueued",
                    peer: to,
                    message_id: &params.message_id,
                    reason: None,
                }
                .emit(&self.base.metrics);
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
                .emit(&self.base.metrics);
                self.recorder
                    .audit_overflow(&e, &params.message_id, to)
                    .await;
                Err(NodeError::Store(e))
            }
        }
    }

    /// `TASK_RESULT` for a task that came from `requester`.
    pub async fn queue_task_result(
        &self,
        requester: &str,
        result: TaskResult,
    ) -> Result<String, NodeError> {
        let payload = serde_json::to_value(&result)
            .map_err(|e| NodeError::bad_request(format!("TASK_RESULT: {e}")))?;
        self.queue_outbox(requester, "TASK_RESULT", &payload, None, 0)
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
    message_id: Option<&str>,
) -> Result<Sealed, NodeError> {
    if !is_valid_payload_type(payload_type) {
        return Err(NodeError::bad_request(format!(
            "payload_type {payload_type:?} is not a valid type"
        )));
    }
    if !payload.is_object() {
        return Err(NodeError::bad_request("payload must be a JSON object"));
    }
    let Some(peer) = trust.get(to) else {
        return Err(NodeError::bad_request(format!(
            "unknown recipient {to:?}: add its identity with `outpost trust add`"
        )));
    };
    let kind = match payload.get("command_type").and_then(|c| c.as_str()) {
        Some(c) if payload_type == "COMMAND" => c.to_string(),
        _ => payload_type.to_string(),
    };
    let ttl = cfg
        .queue
        .checked_ttl(&kind, ttl_s)
        .map_err(NodeError::Ttl)?;
    let params = SealParams {
        message_id: message_id
            .map(str::to_string)
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
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
    .map_err(|e| NodeError::bad_request(e.to_string()))?;
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

pub fn task_result_ok(job_id: &str, request_id: &str, done: ToolCallDone) -> TaskResult {
    TaskResult {
        error: None,
        evidence: serde_json::to_value(&done.evidence).unwrap_or(Value::Null),
        job_id: job_id.to_string(),
        ok: true,
        request_id: Some(request_id.to_string()),
        result: Some(done.result),
    }
}

pub fn task_result_err(job_id: &str, request_id: &str, e: &NodeError) -> TaskResult {
    if e.is_internal() {
        tracing::error!(event = "internal_error", job_id, detail = %e);
    }
    TaskResult {
        error: Some(TaskError {
            code: e.code().to_string(),
            message: e.public_message(),
        }),
        evidence: Value::Null,
        job_id: job_id.to_string(),
        ok: false,
        request_id: Some(request_id.to_string()),
        result: None,
    }
}
