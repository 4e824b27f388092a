//! Work for nodes: a caller's command (here) or tool call (`tool_calls.rs`) is sealed to
//! its node and queued durably; a tool call waits (a bounded time) for the node's
//! result. The job locks are this service's own.

mod quota;
mod tool_calls;

pub use tool_calls::{ToolCall, ToolCallOutcome};

use rand_core::OsRng;
use serde_json::{json, Value};

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::state::Gateway;
use super::storage::{CommandKey, ForNode, NewJob, Queued, StateError, QUEUE_TO_NODE};
use crate::envelope::{seal, IdentityDocument, SealParams};
use crate::keyed_lock::KeyedLocks;
use crate::sync::wire::TaskResult;
use crate::telemetry::MessageEvent;

/// A command for one node.
#[derive(Debug, Clone)]
pub struct Command {
    pub node_id: String,
    pub command_type: String,
    pub body: Value,
    pub ttl_s: Option<u64>,
    /// The caller's own message id (from its idempotency key, [`message_id_for_key`],
    /// or given as is): a repeat of the same request is answered as the first was.
    pub message_id: Option<String>,
}

/// A command's idempotency key is kept this long after the command's expiry (as the
/// node's outbox keeps its keys): a retry within the command's life always finds it.
pub const KEY_KEEP_AFTER_EXPIRY_MS: u64 = 25 * 3600 * 1000;

/// The message id a caller's idempotency key names (the one scheme,
/// [`crate::idempotency`]).
pub fn message_id_for_key(subject: &str, key: &str) -> String {
    crate::idempotency::message_id(crate::idempotency::Owner::Command(subject), key)
}

/// What a message is stored with besides itself, in the same transaction.
pub(super) enum Binding {
    None,
    /// A tool call's job.
    Job(NewJob),
    /// A command's idempotency key: the caller and the request's hash.
    Key {
        subject: String,
        request_sha256: String,
    },
}

/// A node something is sealed to and queued for: its address (the queue's key:
/// `<node id>@<tenant>` for a tenant's node, PROTOCOL §18) and its document (whose node
/// id the envelope names).
pub(super) struct Target {
    pub address: String,
    pub doc: IdentityDocument,
}

/// The enrolled node at address `node_id`, or `UnknownNode`; `NodeWithoutSend` when it
/// could never pull what would be queued for it (trusted without `send`).
pub(super) async fn target(gw: &Gateway, node_id: &str) -> Result<Target, GatewayError> {
    let doc = gw
        .enrolled(node_id)
        .await?
        .ok_or_else(|| GatewayError::UnknownNode(node_id.to_string()))?;
    if !gw.trust().get(node_id).is_some_and(|p| p.rights.send) {
        return Err(GatewayError::NodeWithoutSend(node_id.to_string()));
    }
    Ok(Target {
        address: node_id.to_string(),
        doc,
    })
}

/// Seal `plaintext` to `to` and queue it durably (with the job binding in the same
/// transaction). Returns after the write is durable, with the expiry.
pub(super) async fn seal_and_queue(
    gw: &Gateway,
    target: &Target,
    payload_type: &str,
    ttl_s: u64,
    plaintext: &impl serde::Serialize,
    message_id: &str,
    binding: Binding,
) -> Result<u64, GatewayError> {
    let now = gw.now_ms();
    let params = SealParams {
        message_id: message_id.to_string(),
        created_at_ms: now,
        expires_at_ms: now + ttl_s * 1000,
        payload_type: payload_type.to_string(),
        priority: 0,
    };
    let envelope = seal_to(gw, &target.doc, &params, plaintext)?.to_json();
    let to = &target.address;
    gw.admit_queued(to, envelope.len() as u64).await?;
    let live = gw.polling(to);
    let event = GatewayEvent::Queued {
        message_id: message_id.to_string(),
        node_id: to.clone(),
        payload_type: payload_type.to_string(),
        expires_at_ms: params.expires_at_ms,
    };
    // The state commits the event with the message: one commit before the 202.
    let mut staged = gw
        .events
        .stage(now, [(message_id.to_string(), event)])
        .map_err(|e| GatewayError::Internal(format!("event: {e}")))?;
    let msg = ForNode {
        node_id: to.clone(),
        message_id: message_id.to_string(),
        payload_type: payload_type.to_string(),
        priority: 0,
        created_at_ms: now,
        expires_at_ms: params.expires_at_ms,
        envelope,
        max_attempts: gw.cfg.queue.max_attempts,
        event: staged.take_row(),
    };
    let outcome = queue(gw, msg, binding, &params).await?;
    if outcome == Queued::Duplicate {
        return Err(GatewayError::Duplicate);
    }
    if live {
        gw.mark_live_sent(message_id);
    }
    gw.events.committed(staged);
    announce_queued(gw, message_id, to);
    Ok(params.expires_at_ms)
}

/// `plaintext` as JSON, sealed from this gateway's current key to `to`.
fn seal_to(
    gw: &Gateway,
    to: &IdentityDocument,
    params: &SealParams,
    plaintext: &impl serde::Serialize,
) -> Result<crate::envelope::Envelope, GatewayError> {
    let pt = serde_json::to_vec(plaintext)
        .map_err(|e| GatewayError::Internal(format!("payload: {e}")))?;
    seal(
        &gw.keys.current(),
        &gw.cfg.node_id,
        to,
        params,
        &pt,
        &mut OsRng,
    )
    .map_err(|e| GatewayError::BadRequest(e.to_string()))
}

/// Stores `msg` in its node's queue with what `binding` ties to it, in one
/// transaction: a tool call's job, or a command's idempotency key (kept
/// [`KEY_KEEP_AFTER_EXPIRY_MS`] past the message's expiry).
async fn queue(
    gw: &Gateway,
    msg: ForNode,
    binding: Binding,
    params: &SealParams,
) -> Result<Queued, GatewayError> {
    Ok(match binding {
        Binding::None => gw.state.queue_command(msg, None).await?,
        Binding::Job(job) => gw.state.queue_command(msg, Some(job)).await?,
        Binding::Key {
            subject,
            request_sha256,
        } => {
            let key = CommandKey {
                message_id: params.message_id.clone(),
                subject,
                request_sha256,
                expires_at_ms: params.expires_at_ms,
                keep_until_ms: params.expires_at_ms + KEY_KEEP_AFTER_EXPIRY_MS,
            };
            gw.state.queue_keyed_command(msg, key).await?
        }
    })
}

/// A message is durable in a node's queue: metric, log, event, and wake its long-poll.
pub(super) fn queued(
    gw: &Gateway,
    message_id: &str,
    node_id: &str,
    payload_type: &str,
    expires: u64,
) {
    gw.publish(GatewayEvent::Queued {
        message_id: message_id.to_string(),
        node_id: node_id.to_string(),
        payload_type: payload_type.to_string(),
        expires_at_ms: expires,
    });
    announce_queued(gw, message_id, node_id);
}

/// Metric, log, and wake the node's long-poll (the event is already committed).
fn announce_queued(gw: &Gateway, message_id: &str, node_id: &str) {
    MessageEvent {
        queue: QUEUE_TO_NODE,
        event: "enqueued",
        peer: node_id,
        message_id,
        reason: None,
    }
    .emit(&gw.metrics);
    gw.wake_node(node_id);
}

/// The result filed for a request, as the node sent it. An unreadable record counts
/// as none (logged): the caller sees the request as still waiting.
pub(super) async fn result_of(
    gw: &Gateway,
    message_id: &str,
) -> Result<Option<TaskResult>, GatewayError> {
    Ok(match gw.state.result(message_id).await? {
        None => None,
        // Filed only after it parsed as a `TaskResult` (`uploads`): this fails only on
        // storage damage.
        Some(b) => match serde_json::from_slice(&b) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(event = "result_unreadable", message_id, error = %e);
                None
            }
        },
    })
}

impl Commands<'_> {
    /// Queue a command from `subject` (the caller's token subject); returns its message id
    /// and expiry. With the caller's own message id, the request is bound to it: a repeat
    /// by the same caller with the same request is answered as the first was and queues
    /// nothing; another request is [`GatewayError::IdempotencyConflict`].
    pub async fn command(&self, subject: &str, c: Command) -> Result<(String, u64), GatewayError> {
        let gw = self.gw;
        let to = target(gw, &c.node_id).await?;
        if c.command_type.is_empty() || c.command_type.len() > 64 {
            return Err(GatewayError::BadRequest(
                "command_type must be 1..=64 characters".into(),
            ));
        }
        let queueable = gw.cfg.queue.is_queueable(&c.command_type);
        let mut ttl_s = gw.cfg.queue.checked_ttl(&c.command_type, c.ttl_s)?;
        let request_sha256 = crate::audit::sha256_hex(
            &serde_json::to_vec(&json!([to.address, c.command_type, c.body, c.ttl_s]))
                .map_err(|e| GatewayError::Internal(format!("request: {e}")))?,
        );
        // Concurrent repeats on this replica queue one command (other replicas race at the
        // database: the key's row decides).
        let (message_id, _held) = match &c.message_id {
            Some(id) => {
                let held = self.job_locks.lock(&format!("command/{id}")).await;
                if let Some(k) = gw.state.command_key(id).await? {
                    return repeat(k, subject, &request_sha256);
                }
                (id.clone(), Some(held))
            }
            None => (uuid::Uuid::now_v7().to_string(), None),
        };
        gw.admit_command(&to.address).await?;
        if !queueable && !gw.reachable(&to.address).await {
            return Err(GatewayError::RecipientOffline(format!(
                "{} holds no long-poll now and {:?} commands are not queued",
                to.address, c.command_type
            )));
        }
        if !queueable {
            // Delivered now or never (PROTOCOL §11.2).
            ttl_s = ttl_s.min(super::liveness::NOT_QUEUEABLE_TTL_S);
        }
        let mut payload = match c.body {
            Value::Object(m) => Value::Object(m),
            Value::Null => json!({}),
            other => json!({"value": other}),
        };
        payload["command_type"] = Value::String(c.command_type.clone());
        let binding = match c.message_id {
            Some(_) => Binding::Key {
                subject: subject.to_string(),
                request_sha256: request_sha256.clone(),
            },
            None => Binding::None,
        };
        let keyed = !matches!(binding, Binding::None);
        match seal_and_queue(gw, &to, "COMMAND", ttl_s, &payload, &message_id, binding).await {
            Ok(expires) => Ok((message_id, expires)),
            // Another replica bound the key first, or the first attempt of a commit that was
            // lost landed: answer from the key.
            Err(GatewayError::Duplicate) if keyed => match gw.state.command_key(&message_id).await?
            {
                Some(k) => repeat(k, subject, &request_sha256),
                None => Err(GatewayError::Duplicate),
            },
            Err(GatewayError::State(StateError::OutcomeUnknown(why))) => {
                tracing::warn!(event = "command_outcome_unknown", message_id, detail = %why);
                Err(GatewayError::OutcomeUnknown(message_id))
            }
            Err(e) => Err(e),
        }
    }
}

/// The answer to a command whose message id is already bound to a caller's key.
fn repeat(
    k: CommandKey,
    subject: &str,
    request_sha256: &str,
) -> Result<(String, u64), GatewayError> {
    if k.subject != subject {
        // Only a `message_id` given as is can name another caller's command.
        return Err(GatewayError::Duplicate);
    }
    if k.request_sha256 != request_sha256 {
        return Err(GatewayError::IdempotencyConflict(format!(
            "message {} was queued for another request with this key; nothing was queued",
            k.message_id
        )));
    }
    Ok((k.message_id, k.expires_at_ms))
}

/// Tool calls and commands for nodes: sealed, queued durably, answered when the node's
/// result comes in.
pub struct Commands<'g> {
    pub(super) gw: &'g Gateway,
    /// Its own state: one lock per caller's job (and per command key), so concurrent
    /// repeats queue one message.
    job_locks: &'g KeyedLocks,
}

impl Gateway {
    pub fn commands(&self) -> Commands<'_> {
        Commands {
            gw: self,
            job_locks: &self.job_locks,
        }
    }
}

impl Commands<'_> {
    /// The lock of one caller's job or command key.
    pub(super) async fn lock_job(&self, key: &str) -> crate::keyed_lock::KeyedGuard {
        self.job_locks.lock(key).await
    }
}
