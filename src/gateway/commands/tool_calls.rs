//! A caller's tool call for one node (`POST /v1/tool_call`): bound to the caller's job id,
//! sealed and queued once (through [`Commands`]), answered from the node's result when it
//! arrives within the call's wait.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

use super::{result_of, seal_and_queue, target, Binding, Commands, Target};
use crate::gateway::error::GatewayError;
use crate::gateway::events::GatewayEvent;
use crate::gateway::state::Gateway;
use crate::gateway::storage::{job_key, JobRecord, NewJob};
use crate::sync::wire::{TaskRequest, TaskResult};
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
        result: TaskResult,
    },
    /// Queued (durably); the result arrives later (`GET /v1/messages/{id}`, events).
    Queued { message_id: String, job_id: String },
}

impl ToolCallOutcome {
    /// The `TASK_REQUEST`'s message id, however the call went.
    pub fn message_id(&self) -> &str {
        match self {
            Self::Answered { message_id, .. } | Self::Queued { message_id, .. } => message_id,
        }
    }
}

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
    /// A tool call from `subject` (the caller's token subject): bound to its job id,
    /// queued once, answered from the node's result when it arrives within `wait`.
    pub async fn tool_call(
        &self,
        subject: &str,
        call: ToolCall,
    ) -> Result<ToolCallOutcome, GatewayError> {
        let gw = self.gw;
        // A name no node can have would wait in the queue for nothing.
        if !crate::tools::valid_tool_name(&call.tool_name) {
            return Err(GatewayError::BadRequest(
                "tool_name must match [a-z][a-z0-9_]{0,63}".into(),
            ));
        }
        let to = target(gw, &call.node_id).await?;
        let ttl_s = gw.cfg.queue.checked_ttl("TASK_REQUEST", call.ttl_s)?;
        let job_id = job_id(&call)?;
        // A caller's job id is bound to this node, tool and arguments (held under a lock so
        // that concurrent repeats queue one request).
        let key = job_key(&to.address, subject, &job_id);
        let args = serde_json::to_vec(&call.tool_args)
            .map_err(|e| GatewayError::Internal(format!("tool_args: {e}")))?;
        let args_sha = crate::audit::sha256_hex(&args);
        let held = self.lock_job(&key).await;
        if let Some(rec) = gw.state.job(&key).await? {
            return existing_job(gw, rec, &call.tool_name, &args_sha, job_id, &to.address).await;
        }
        gw.admit_command(&to.address).await?;
        let message_id = uuid::Uuid::now_v7().to_string();
        let token = match call.token {
            Some(t) => t,
            // The node checks the audience against its own id, never an address.
            None => node_token(gw, subject, &to.doc.node_id, &call.tool_name, ttl_s)?,
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
                args_sha256: args_sha,
            },
        };
        if let Some(bound) = queue_task(gw, &to, ttl_s, &request, job, &job_id).await? {
            return Ok(bound);
        }
        drop(held);
        if !call.wait.is_zero() && gw.online(&to.address).await {
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

/// The call's job id, the caller's or a new one; refused unless it is 1..128 of
/// `[A-Za-z0-9._:-]`.
fn job_id(call: &ToolCall) -> Result<String, GatewayError> {
    let job_id = call
        .job_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    if !crate::tools::valid_job_id(&job_id) {
        return Err(GatewayError::BadRequest(
            "job_id must be 1..128 characters of [A-Za-z0-9._:-]".into(),
        ));
    }
    Ok(job_id)
}

/// Seals and queues the call's `TASK_REQUEST` bound to `job`. `Some` when another
/// replica bound the same job id first (the job lock is per process): the call is
/// answered from that binding, as a repeat here would be.
async fn queue_task(
    gw: &Gateway,
    to: &Target,
    ttl_s: u64,
    request: &TaskRequest,
    job: NewJob,
    job_id: &str,
) -> Result<Option<ToolCallOutcome>, GatewayError> {
    let job_key = job.key.clone();
    let JobRecord {
        message_id,
        tool_name,
        args_sha256: args_sha,
    } = job.record.clone();
    match seal_and_queue(
        gw,
        to,
        "TASK_REQUEST",
        ttl_s,
        request,
        &message_id,
        Binding::Job(job),
    )
    .await
    {
        Err(GatewayError::Duplicate) => {
            if let Some(rec) = gw.state.job(&job_key).await? {
                let bound = existing_job(
                    gw,
                    rec,
                    &tool_name,
                    &args_sha,
                    job_id.to_string(),
                    &to.address,
                );
                return bound.await.map(Some);
            }
            Err(GatewayError::Duplicate)
        }
        r => r.map(|_| None),
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
    events: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<crate::gateway::events::Event>>,
) -> Result<Option<TaskResult>, GatewayError> {
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
