//! Work for nodes: a caller's tool call or command is sealed to its node and queued
//! durably; a tool call waits (a bounded time) for the node's result.

use std::time::Duration;

use rand_core::OsRng;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::state::Gateway;
use super::storage::{
    job_key, CommandKey, ForNode, JobRecord, NewJob, Queued, StateError, QUEUE_TO_NODE as TO_NODE,
};
use crate::envelope::{seal, IdentityDocument, SealParams};
use crate::sync::wire::TaskRequest;
use crate::telemetry::MessageEvent;
use crate::token::{issue, Claims};

/// A caller's tool call for one node.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub node_id: String,
    pub tool_name: String,
    pub tool_args: Value,
    pub job_id: Option<String>,
    pub ttl_s: Option<u64>,
    /// How long to wait for the result when the node is online (0 = do not wait).
    pub wait: Duration,
    /// The caller's own token for the node; otherwise the gateway mints one for
    /// exactly this tool.
    pub token: Option<String>,
}

/// What became of a tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCallOutcome {
    /// The node answered (now, or earlier for a repeated job id).
    Answered {
        message_id: String,
        tool_name: String,
        result: Value,
    },
    /// Queued (durably); the result arrives later (`GET /v1/messages/{id}`, events).
    Queued { message_id: String, job_id: String },
}

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

/// The message id a caller's `Idempotency-Key` stands for: a UUID (version 8) from the
/// caller's token subject and the key, so a retry names the same message and two
/// callers' keys never meet.
pub fn message_id_for_key(subject: &str, key: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("outpost command key\n{subject}\n{key}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// What a message is stored with besides itself, in the same transaction.
enum Binding {
    None,
    /// A tool call's job.
    Job(NewJob),
    /// A command's idempotency key: the caller and the request's hash.
    Key {
        subject: String,
        request_sha256: String,
    },
}

/// The enrolled node `node_id`, or `UnknownNode`; `NodeWithoutSend` when it could never
/// pull what would be queued for it (trusted without `send`).
pub(super) async fn target(gw: &Gateway, node_id: &str) -> Result<IdentityDocument, GatewayError> {
    let doc = gw
        .enrolled(node_id)
        .await
        .ok_or_else(|| GatewayError::UnknownNode(node_id.to_string()))?;
    if !gw.trust().get(node_id).is_some_and(|p| p.rights.send) {
        return Err(GatewayError::NodeWithoutSend(node_id.to_string()));
    }
    Ok(doc)
}

/// Seal `plaintext` to `to` and queue it durably (with the job binding in the same
/// transaction). Returns after the write is durable, with the expiry.
async fn seal_and_queue(
    gw: &Gateway,
    to: &IdentityDocument,
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
    let pt = serde_json::to_vec(plaintext)
        .map_err(|e| GatewayError::Internal(format!("payload: {e}")))?;
    let env = seal(
        &gw.keys.current(),
        &gw.cfg.node_id,
        to,
        &params,
        &pt,
        &mut OsRng,
    )
    .map_err(|e| GatewayError::BadRequest(e.to_string()))?;
    let live = gw.polling(&to.node_id);
    let event = GatewayEvent::Queued {
        message_id: message_id.to_string(),
        node_id: to.node_id.clone(),
        payload_type: payload_type.to_string(),
        expires_at_ms: params.expires_at_ms,
    };
    // A shared state commits the event with the message: one commit before the 202.
    let staged = gw
        .state
        .replicas()
        .is_some()
        .then(|| serde_json::to_string(&event).map(|json| (now, json)))
        .transpose()
        .map_err(|e| GatewayError::Internal(format!("event: {e}")))?;
    let with_message = staged.is_some();
    let msg = ForNode {
        node_id: to.node_id.clone(),
        message_id: message_id.to_string(),
        payload_type: payload_type.to_string(),
        priority: 0,
        created_at_ms: now,
        expires_at_ms: params.expires_at_ms,
        envelope: env.to_json(),
        max_attempts: gw.cfg.queue.max_attempts,
        event: staged,
    };
    let outcome = match binding {
        Binding::None => gw.state.queue_command(msg, None).await?,
        Binding::Job(job) => gw.state.queue_command(msg, Some(job)).await?,
        Binding::Key {
            subject,
            request_sha256,
        } => {
            let key = CommandKey {
                message_id: message_id.to_string(),
                subject,
                request_sha256,
                expires_at_ms: params.expires_at_ms,
                keep_until_ms: params.expires_at_ms + KEY_KEEP_AFTER_EXPIRY_MS,
            };
            gw.state.queue_keyed_command(msg, key).await?
        }
    };
    if outcome == Queued::Duplicate {
        return Err(GatewayError::Duplicate);
    }
    if live {
        gw.mark_live_sent(message_id);
    }
    if with_message {
        gw.events.sequence_soon();
        announce_queued(gw, message_id, &to.node_id);
    } else {
        queued(
            gw,
            message_id,
            &to.node_id,
            payload_type,
            params.expires_at_ms,
        );
        gw.events_committed().await;
    }
    Ok(params.expires_at_ms)
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
        queue: TO_NODE,
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
) -> Result<Option<Value>, GatewayError> {
    Ok(match gw.state.result(message_id).await? {
        None => None,
        Some(b) => match serde_json::from_slice(&b) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(event = "result_unreadable", message_id, error = %e);
                None
            }
        },
    })
}

/// A tool call from `subject` (the caller's token subject): bound to its job id, queued
/// once, answered from the node's result when it arrives within `wait`.
/// The caller's job id is already bound: the same call again is answered from it (its
/// result, or that it is queued); another tool or other arguments is a conflict.
async fn existing_job(
    gw: &Gateway,
    rec: JobRecord,
    tool_name: &str,
    args_sha: &str,
    job_id: String,
    doc_node_id: &str,
) -> Result<ToolCallOutcome, GatewayError> {
    if rec.tool_name != tool_name || rec.args_sha256 != args_sha {
        return Err(GatewayError::JobConflict(format!(
            "job_id {job_id:?} was already used by this caller for {} with other \
                 arguments or another tool; nothing was queued",
            doc_node_id
        )));
    }
    // The same job again: answer what is known of it, queue nothing.
    Ok(match result_of(gw, &rec.message_id).await? {
        Some(result) => ToolCallOutcome::Answered {
            message_id: rec.message_id,
            tool_name: tool_name.to_string(),
            result,
        },
        None => ToolCallOutcome::Queued {
            message_id: rec.message_id,
            job_id,
        },
    })
}

impl Commands<'_> {
    pub async fn tool_call(
        &self,
        subject: &str,
        call: ToolCall,
    ) -> Result<ToolCallOutcome, GatewayError> {
        let gw = self.0;
        // A name no node can have would wait in the queue for nothing.
        if !crate::tools::valid_tool_name(&call.tool_name) {
            return Err(GatewayError::BadRequest(
                "tool_name must match [a-z][a-z0-9_]{0,63}".into(),
            ));
        }
        let doc = target(gw, &call.node_id).await?;
        let ttl_s = gw.cfg.queue.checked_ttl("TASK_REQUEST", call.ttl_s)?;
        let job_id = call
            .job_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        if !crate::tools::valid_job_id(&job_id) {
            return Err(GatewayError::BadRequest(
                "job_id must be 1..128 characters of [A-Za-z0-9._:-]".into(),
            ));
        }
        // A caller's job id is bound to this node, tool and arguments (held under a lock so
        // that concurrent repeats queue one request).
        let key = job_key(&doc.node_id, subject, &job_id);
        let args = serde_json::to_vec(&call.tool_args)
            .map_err(|e| GatewayError::Internal(format!("tool_args: {e}")))?;
        let args_sha = crate::audit::sha256_hex(&args);
        let held = gw.job_locks.lock(&key).await;
        if let Some(rec) = gw.state.job(&key).await? {
            return existing_job(gw, rec, &call.tool_name, &args_sha, job_id, &doc.node_id).await;
        }
        let message_id = uuid::Uuid::now_v7().to_string();
        let token = match call.token {
            Some(t) => t,
            None => node_token(gw, subject, &doc.node_id, &call.tool_name, ttl_s)?,
        };
        let request = TaskRequest {
            job_id: Some(job_id.clone()),
            token: Some(token),
            tool_args: call.tool_args,
            tool_name: call.tool_name.clone(),
        };
        // Subscribe before queueing, so a fast answer cannot slip past us.
        let mut events = gw.events.subscribe();
        let job = NewJob {
            key,
            record: JobRecord {
                message_id: message_id.clone(),
                tool_name: call.tool_name.clone(),
                args_sha256: args_sha.clone(),
            },
        };
        let job_key = job.key.clone();
        match seal_and_queue(
            gw,
            &doc,
            "TASK_REQUEST",
            ttl_s,
            &request,
            &message_id,
            Binding::Job(job),
        )
        .await
        {
            // Another replica bound the same job id first (the lock above is per process):
            // answer from its binding, as a repeat here would be.
            Err(GatewayError::Duplicate) => {
                if let Some(rec) = gw.state.job(&job_key).await? {
                    return existing_job(gw, rec, &call.tool_name, &args_sha, job_id, &doc.node_id)
                        .await;
                }
                return Err(GatewayError::Duplicate);
            }
            r => r?,
        };
        drop(held);
        if !call.wait.is_zero() && gw.online(&doc.node_id).await {
            if let Some(result) = wait_for_result(gw, &message_id, call.wait, &mut events).await? {
                return Ok(ToolCallOutcome::Answered {
                    message_id,
                    tool_name: call.tool_name,
                    result,
                });
            }
        }
        Ok(ToolCallOutcome::Queued { message_id, job_id })
    }
}

/// The token the gateway mints for a call that brought none: issued by the gateway,
/// for `subject`, to `node`, for this tool only, expiring with the message.
fn node_token(
    gw: &Gateway,
    subject: &str,
    node: &str,
    tool: &str,
    ttl_s: u64,
) -> Result<String, GatewayError> {
    let claims = Claims::new(
        &gw.cfg.node_id,
        subject,
        node,
        vec![format!("tool:{tool}")],
        gw.now_ms(),
        ttl_s * 1000,
        &uuid::Uuid::now_v7().to_string(),
    )
    .map_err(|e| GatewayError::BadRequest(e.to_string()))?;
    issue(&gw.keys.current(), &claims).map_err(|e| GatewayError::Internal(e.to_string()))
}

/// The result filed for `message_id`, waiting up to `wait` for it (woken by `result`
/// events, subscribed before the request was queued); `None` when it did not come.
async fn wait_for_result(
    gw: &Gateway,
    message_id: &str,
    wait: Duration,
    events: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<super::events::Event>>,
) -> Result<Option<Value>, GatewayError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Some(result) = result_of(gw, message_id).await? {
            return Ok(Some(result));
        }
        tokio::select! {
            ev = events.recv() => match ev {
                Ok(e) if matches!(e.event, GatewayEvent::Result { .. }) => {}
                Err(RecvError::Lagged(_)) => {}
                Ok(_) => continue,
                Err(RecvError::Closed) => return Ok(None),
            },
            _ = tokio::time::sleep_until(deadline) => return Ok(None),
            _ = gw.shutdown.cancelled() => return Ok(None),
        }
    }
}

impl Commands<'_> {
    /// Queue a command from `subject` (the caller's token subject); returns its message id
    /// and expiry. With the caller's own message id, the request is bound to it: a repeat
    /// by the same caller with the same request is answered as the first was and queues
    /// nothing; another request is [`GatewayError::IdempotencyConflict`].
    pub async fn command(&self, subject: &str, c: Command) -> Result<(String, u64), GatewayError> {
        let gw = self.0;
        let doc = target(gw, &c.node_id).await?;
        if c.command_type.is_empty() || c.command_type.len() > 64 {
            return Err(GatewayError::BadRequest(
                "command_type must be 1..=64 characters".into(),
            ));
        }
        let queueable = gw.cfg.queue.is_queueable(&c.command_type);
        let mut ttl_s = gw.cfg.queue.checked_ttl(&c.command_type, c.ttl_s)?;
        let request_sha256 = crate::audit::sha256_hex(
            &serde_json::to_vec(&json!([doc.node_id, c.command_type, c.body, c.ttl_s]))
                .map_err(|e| GatewayError::Internal(format!("request: {e}")))?,
        );
        // Concurrent repeats on this replica queue one command (other replicas race at the
        // database: the key's row decides).
        let (message_id, _held) = match &c.message_id {
            Some(id) => {
                let held = gw.job_locks.lock(&format!("command/{id}")).await;
                if let Some(k) = gw.state.command_key(id).await? {
                    return repeat(k, subject, &request_sha256);
                }
                (id.clone(), Some(held))
            }
            None => (uuid::Uuid::now_v7().to_string(), None),
        };
        if !queueable && !gw.reachable(&doc.node_id).await {
            return Err(GatewayError::RecipientOffline(format!(
                "{} holds no long-poll now and {:?} commands are not queued",
                doc.node_id, c.command_type
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
        match seal_and_queue(gw, &doc, "COMMAND", ttl_s, &payload, &message_id, binding).await {
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

/// Tool calls and commands for nodes: sealed, queued durably, answered when the node's result comes in.
pub struct Commands<'g>(pub(super) &'g Gateway);

impl Gateway {
    pub fn commands(&self) -> Commands<'_> {
        Commands(self)
    }
}
