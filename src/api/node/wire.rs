//! The JSON bodies of the node's local API (PROTOCOL §10) that the HTTP edge defines:
//! what a handler parses and what it answers. Bodies that belong to a lower layer are
//! that layer's types (the envelope of `POST /v1/envelopes`, a tool's contract).
//! `src/api/openapi_tests.rs` checks each against `docs/openapi/node.json`.
//!
//! Answer fields are declared in alphabetical order: every answer lists its keys sorted.
//! Fields that are always `true` say which kind of answer it is (`accepted`, `queued`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::app::calls::ToolCallDone;
use crate::app::inbox::Inboxed;
use crate::store::MessageStatus;
use crate::tools::ToolSpec;

/// `GET /v1/tools`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ToolList {
    pub tools: Vec<ToolSpec>,
}

/// `POST /v1/tool_call`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ToolCallBody {
    pub job_id: Option<String>,
    pub tool_name: String,
    #[serde(default = "empty_object")]
    pub tool_args: Value,
    pub token: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// `POST /v1/tool_call` 200: the call that ran (or the kept one, for a repeat of its
/// job id). Failures answer the error shape.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ToolCallAnswer {
    #[serde(flatten)]
    pub done: ToolCallDone,
    /// Always `true`.
    pub ok: bool,
}

/// `POST /v1/envelopes` 202: stored durably.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct EnvelopeAccepted {
    pub accepted: bool,
    pub message_id: String,
}

/// `POST /v1/envelopes` 200: received before, not processed again.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct EnvelopeDuplicate {
    pub duplicate: bool,
    pub message_id: String,
}

/// `GET /v1/inbox`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct InboxList {
    pub messages: Vec<InboxMessage>,
}

/// One unacknowledged message as `GET /v1/inbox` lists it.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct InboxMessage {
    pub expires_at_ms: u64,
    pub from: String,
    pub message_id: String,
    pub payload: Value,
    pub payload_type: String,
    pub received_at_ms: u64,
}

impl From<Inboxed> for InboxMessage {
    fn from(m: Inboxed) -> Self {
        Self {
            expires_at_ms: m.expires_at_ms,
            from: m.record.from,
            message_id: m.message_id,
            payload: m.record.payload,
            payload_type: m.record.payload_type,
            received_at_ms: m.record.received_at_ms,
        }
    }
}

/// `POST /v1/inbox/{message_id}/ack`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct InboxAcked {
    pub message_id: String,
    pub ok: bool,
}

/// `POST /v1/outbox` body.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct OutboxRequest {
    pub to: String,
    pub payload_type: String,
    pub payload: Value,
    pub ttl_s: Option<u64>,
    pub priority: Option<u8>,
    /// The client's own id for this message (a UUID), for retries after a lost answer.
    pub message_id: Option<String>,
}

/// `POST /v1/outbox` 202: queued durably (or the same request queued before).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct OutboxQueued {
    pub message_id: String,
    pub queued: bool,
}

/// `GET /v1/messages/{message_id}`: where a message this node queued or received is.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct MessageAnswer {
    pub attempts: u32,
    pub message_id: String,
    pub next_attempt_at: u64,
    pub peer: String,
    pub queue: String,
    /// Why it reached a terminal state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub state: &'static str,
}

impl MessageAnswer {
    pub fn new(message_id: String, s: MessageStatus) -> Self {
        Self {
            attempts: s.attempts,
            message_id,
            next_attempt_at: s.next_attempt_at_ms,
            peer: s.peer,
            queue: s.queue,
            reason: s.reason,
            state: s.state.as_str(),
        }
    }
}

/// `GET /v1/state`, `PATCH /v1/state/reported` 200: both documents with their versions
/// (a document never written is `{}` at version 0).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct StateAnswer {
    pub desired: Value,
    pub desired_version: u64,
    pub reported: Value,
    pub reported_version: u64,
}

impl From<crate::app::state::StateDocs> for StateAnswer {
    fn from(s: crate::app::state::StateDocs) -> Self {
        Self {
            desired: s.desired.doc,
            desired_version: s.desired.version,
            reported: s.reported.doc,
            reported_version: s.reported.version,
        }
    }
}
