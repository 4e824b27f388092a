//! The JSON bodies of the gateway's client API (PROTOCOL §11, §15) that the HTTP edge
//! defines: what a handler parses and what it answers. The node-facing routes' bodies
//! are the node ↔ gateway contract ([`crate::sync::wire`]); enrollment's exchange is
//! [`crate::enroll`]'s. `src/api/openapi_tests.rs` checks each against
//! `docs/openapi/gateway.json`.
//!
//! Answer fields are declared in alphabetical order, so those answers list their keys
//! sorted; an enrollment keeps its own order. Fields that are always `true` or `false`
//! say which kind of answer it is (`ok`, `queued`, `duplicate`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::gateway::enroll::{EnrollmentRecord, RecordState};
use crate::gateway::fleet::{MessageView, NodeView};
use crate::sync::wire::{InboxRecord, TaskError, TaskResult};

#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub node_id: String,
}

/// `POST /v1/tool_call` body.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolCallBody {
    pub target: Target,
    pub tool_name: String,
    #[serde(default)]
    pub tool_args: Value,
    pub job_id: Option<String>,
    pub ttl_s: Option<u64>,
    pub wait_s: Option<u64>,
    pub token: Option<String>,
}

/// `POST /v1/tool_call` 200: the node's `TASK_RESULT`, with the call's message id and
/// tool.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ToolCallAnswer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<TaskError>,
    pub evidence: Value,
    pub job_id: String,
    pub message_id: String,
    pub ok: bool,
    /// Present (possibly `null`) exactly when the call succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    pub tool_name: String,
}

impl ToolCallAnswer {
    /// The answer for the node's result `r` to call `message_id`.
    pub fn new(message_id: String, tool_name: String, r: TaskResult) -> Self {
        Self {
            error: r.error,
            evidence: r.evidence,
            job_id: r.job_id,
            message_id,
            ok: r.ok,
            result: r.result,
            tool_name,
        }
    }
}

/// `POST /v1/tool_call` 202: queued durably, the result comes later.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ToolCallQueued {
    pub job_id: String,
    pub message_id: String,
    pub ok: bool,
    pub queued: bool,
}

/// `POST /v1/commands` body.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CommandBody {
    pub target: Target,
    pub command_type: String,
    #[serde(default)]
    pub body: Value,
    pub ttl_s: Option<u64>,
    /// The caller's own id for this command (a UUID), for retries after a lost answer.
    pub message_id: Option<String>,
}

/// `POST /v1/commands` 202: queued durably until `expires_at_ms`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct CommandQueued {
    pub expires_at_ms: u64,
    pub message_id: String,
    pub ok: bool,
    pub queued: bool,
}

/// `GET /v1/messages/{id}`: the message's status as on the node, plus `result` once it
/// arrived.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct MessageAnswer {
    pub attempts: u32,
    pub message_id: String,
    pub next_attempt_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    pub state: &'static str,
}

impl MessageAnswer {
    pub fn new(message_id: String, view: MessageView) -> Self {
        match view.status {
            Some(s) => Self {
                attempts: s.attempts,
                message_id,
                next_attempt_at: s.next_attempt_at_ms,
                node_id: Some(s.peer),
                reason: s.reason,
                result: view.result,
                state: s.state.as_str(),
            },
            // A result and no status: the request was delivered, its record is gone.
            None => Self {
                attempts: 0,
                message_id,
                next_attempt_at: 0,
                node_id: None,
                reason: None,
                result: view.result,
                state: "delivered",
            },
        }
    }
}

/// `GET /v1/nodes`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct NodeList {
    pub nodes: Vec<NodeView>,
}

/// `PATCH /v1/nodes/{id}/labels`: the node's labels as they are now.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct LabelsAnswer {
    pub labels: crate::fleet::Labels,
    pub node_id: String,
}

/// `PUT`/`PATCH /v1/nodes/{id}/desired`: the version written.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct DesiredWritten {
    pub node_id: String,
    pub version: u64,
}

/// `GET /v1/rollouts`, newest first.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct RolloutList {
    pub rollouts: Vec<crate::gateway::rollout::RolloutView>,
}

/// `GET /v1/rollouts/{id}/nodes`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct RolloutNodes {
    pub nodes: Vec<crate::gateway::rollout::TargetView>,
    pub rollout_id: String,
}

/// `GET /v1/inbox`: the records as kept, in the node's inbox shape.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct InboxList {
    pub messages: Vec<InboxRecord>,
}

/// `POST /v1/inbox/{message_id}/ack`: `acked` is false when it was acknowledged before.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct InboxAcked {
    pub acked: bool,
    pub message_id: String,
    pub ok: bool,
}

/// `POST /v1/revocations` body.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    pub jti: String,
}

/// `POST /v1/revocations` 201: added to the list as `version`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct RevocationAdded {
    pub jti: String,
    pub ok: bool,
    pub version: u64,
}

/// `POST /v1/revocations` 200: the token id was on the list already.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct RevocationDuplicate {
    pub duplicate: bool,
    pub jti: String,
    pub ok: bool,
}

/// One enrollment as the operator's list shows it.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct EnrollmentView {
    pub node_id: String,
    pub state: RecordState,
    pub kind: &'static str,
    pub token_id: String,
    /// The device key (b64url), so two pending keys of one id can be told apart.
    pub node_sign_pk: String,
    pub created_at_ms: u64,
    pub decided_at_ms: Option<u64>,
    /// What the device said about itself when it asked (its inventory without the
    /// tools); `null` from a node that did not say.
    pub device: Option<crate::fleet::Inventory>,
    /// The address the request came from; `null` for records the gateway made itself.
    pub source: Option<String>,
    /// Who decided it: a token or console session's subject, `local:<user>` on the
    /// gateway host, `enroll-token:<id>` for an automatic enrollment, the node for its
    /// key rotation; `null` while pending and for a record decided before it was kept.
    pub decided_by: Option<String>,
}

impl From<EnrollmentRecord> for EnrollmentView {
    fn from(r: EnrollmentRecord) -> Self {
        Self {
            node_id: r.node_id,
            state: r.state,
            kind: r.kind.as_str(),
            token_id: r.token_id,
            node_sign_pk: r.node_sign_pk,
            created_at_ms: r.created_at_ms,
            decided_at_ms: r.decided_at_ms,
            device: r.device,
            source: r.source,
            decided_by: r.decided_by,
        }
    }
}

/// `GET /v1/enrollments`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct EnrollmentList {
    pub enrollments: Vec<EnrollmentView>,
}

/// `POST /v1/node_revocations` body.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RetireBody {
    pub node_id: String,
}

/// `POST /v1/node_grace_ends` body.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EndGraceBody {
    pub node_id: String,
}

/// `POST /v1/node_grace_ends` answer.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct GraceEnded {
    pub ok: bool,
    pub node_id: String,
    /// A grace was running and is over now (false: none was, the node never rotated or
    /// its grace had ended).
    pub ended: bool,
}

/// `POST /v1/node_revocations` answer.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Retired {
    pub ok: bool,
    pub node_id: String,
    /// Messages that were queued for it, now refused with reason `node_revoked`.
    pub refused_messages: Vec<String>,
}
