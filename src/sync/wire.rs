//! The node ↔ gateway contract as types (PROTOCOL §12, §13.4): every request and answer of
//! the signed node API, the `TASK_REQUEST` / `TASK_RESULT` payloads, and the record the
//! inbox and tasks queues keep. The gateway serialises these, the node deserialises them
//! (and the other way round for requests), so both sides share one definition.
//!
//! **Bytes on the wire.** The JSON is the same, byte for byte, as when both sides built
//! it with `json!` (whose maps sort their keys): fields are declared in alphabetical
//! order, and optional fields are omitted exactly where they were before. The unit
//! tests pin the text of each message.
//!
//! **Unknown fields.** The gateway is upgraded first, so it may be newer than a node,
//! never (on purpose) older:
//! - answers the node reads (and the `TASK_REQUEST` it runs) ignore unknown fields, so
//!   a newer gateway that adds one does not cut off older nodes;
//! - request bodies the gateway reads keep `deny_unknown_fields`, as they always had: a
//!   newer node whose request carries something this gateway does not understand gets
//!   a loud 400 instead of having part of its request silently dropped.
//!
//! A missing or mistyped required field is an error on both sides, never a default: the
//! node treats a malformed answer like a network failure (logged, retried with backoff).
//!
//! Envelopes travel as raw JSON ([`RawValue`]): their format belongs to
//! [`crate::envelope`], and the receive pipeline checks each one on its own, so one bad
//! envelope never costs a batch. The gateway sends each as it stored it and the node
//! hands each to the pipeline as it came, neither building a JSON tree of a batch it
//! does not read (a pull of 500 is about 1 MiB).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::envelope::Opened;

/// `GET /v1/nodes/{id}/pull?wait_s=&max=` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct PullAnswer {
    /// In queue order, each exactly as the gateway stored it.
    #[cfg_attr(test, schemars(with = "Vec<crate::envelope::Envelope>"))]
    pub envelopes: Vec<Box<RawValue>>,
    /// Messages queued for the node, this batch included.
    pub pending_count: u64,
    /// The gateway's own key rotation while its grace lasts (PROTOCOL §15.7): the node
    /// applies it to its trust store before it opens this batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_rotation: Option<crate::envelope::KeyRotation>,
}

/// `POST /v1/nodes/{id}/ack` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AckRequest {
    pub message_ids: Vec<String>,
    /// Envelopes the node's pipeline refused: they leave the queue too (a resend would
    /// be refused again) but are reported as `rejected`, not `delivered`. Older nodes
    /// do not send it.
    #[serde(default)]
    pub rejected: Vec<AckRejected>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AckRejected {
    pub code: String,
    pub id: String,
}

/// `POST /v1/nodes/{id}/ack` answer: the ids that were still queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct AckAnswer {
    pub acked: Vec<String>,
}

/// `POST /v1/nodes/{id}/upload` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct UploadRequest {
    /// Each exactly as the node stored it (never built into a JSON tree on either side).
    pub envelopes: Vec<Box<RawValue>>,
}

/// The `message_id` of an envelope in transit, read without building its JSON tree;
/// `None` when it has none (or is not an object): the receive pipeline then refuses it
/// and says why.
pub fn raw_message_id(envelope: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Id {
        #[serde(default)]
        message_id: Option<String>,
    }
    serde_json::from_str::<Id>(envelope.get())
        .ok()
        .and_then(|i| i.message_id)
}

/// `POST /v1/nodes/{id}/upload` answer: each envelope's id in one of the three lists.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct UploadAnswer {
    pub accepted: Vec<String>,
    pub duplicates: Vec<String>,
    pub rejected: Vec<UploadRejected>,
}

/// A refused envelope; `id` is its `message_id` as far as it could be read (`""` when
/// the envelope had none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct UploadRejected {
    pub code: String,
    pub id: String,
}

/// `GET /v1/nodes/{id}/audit` answer: the gateway's verified copy of the node's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct AuditStatus {
    /// Merkle root, base64url without padding.
    pub root: String,
    pub size: u64,
}

/// `POST /v1/nodes/{id}/audit` body: entries from the confirmed size on, and a
/// checkpoint note signed for exactly the extended tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AuditUpload {
    pub checkpoint: String,
    pub entries: Vec<AuditEntryText>,
}

/// An uploaded audit entry: its canonical JSON text (what was hashed; what nodes send),
/// or the object itself, which re-serialises (sorted keys, no whitespace) to that text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(untagged, try_from = "Value")]
pub enum AuditEntryText {
    Text(String),
    Object(Map<String, Value>),
}

impl TryFrom<Value> for AuditEntryText {
    type Error = &'static str;
    fn try_from(v: Value) -> Result<Self, Self::Error> {
        match v {
            Value::String(s) => Ok(Self::Text(s)),
            Value::Object(m) => Ok(Self::Object(m)),
            _ => Err("entries must be JSON objects or their text"),
        }
    }
}

impl AuditEntryText {
    /// The bytes that were hashed into the tree.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Self::Text(s) => s.into_bytes(),
            Self::Object(m) => serde_json::to_vec(&m).unwrap_or_default(),
        }
    }
}

/// `POST /v1/nodes/{id}/audit` answer: the new confirmed size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct AuditAnswer {
    pub size: u64,
}

/// `POST /v1/nodes/{id}/rotate` answer (PROTOCOL §15.7): `applied` is false when the
/// gateway already had the new key (a retry after a lost answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct RotateAnswer {
    pub node_id: String,
    pub applied: bool,
    /// The rotation was asked with `grace=none` and the gateway refuses the retired key
    /// from now on (a gateway that does not know `grace=none` never says so).
    #[serde(default)]
    pub grace_ended: bool,
}

/// `GET /v1/nodes/{id}/revocations?since=N` answer: token ids revoked after version N,
/// and the version to ask from next time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Revocations {
    pub revoked: Vec<String>,
    pub version: u64,
}

/// `payload_type` of the envelope that carries a node's desired state (PROTOCOL §16.4).
pub const DESIRED_STATE: &str = "DESIRED_STATE";

/// The plaintext of a `DESIRED_STATE` envelope: the whole desired document at one
/// version. The gateway seals the newest version it holds for a node whose pull says it
/// holds an older one (`desired=` on the pull), so a node offline for a week gets only
/// the newest; the node keeps it only if it is newer than what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct DesiredState {
    /// A JSON object.
    pub desired: Value,
    pub version: u64,
}

/// The message id of desired version `version` for `node` (PROTOCOL §16.4): a UUID
/// (version 8) of the first 16 bytes of SHA-256(`"outpost desired\n" node "\n"
/// version`), so the same version sealed again is the same message (the node
/// deduplicates it).
pub fn desired_message_id(node: &str, version: u64) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("outpost desired\n{node}\n{version}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// `POST /v1/nodes/{id}/report` body (PROTOCOL §16.5): what the node holds and reports.
/// Sent on every (re)connection and whenever something in it changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StateReport {
    /// The desired version the node holds (0: none).
    pub desired_version: u64,
    /// The node's inventory; left out when unchanged since the gateway last took it on
    /// this connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<crate::fleet::Inventory>,
    /// The node's reported document and its version; left out while the node never
    /// reported anything (version 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<crate::fleet::Versioned>,
}

/// `POST /v1/nodes/{id}/report` answer: what the gateway now holds for the node (a
/// reported version below the node's own means the gateway kept a newer one; the node
/// never goes back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ReportAnswer {
    /// The newest desired version the gateway holds for the node.
    pub desired_version: u64,
    pub reported_version: u64,
}

/// The error shape of every non-2xx answer (`{"error": {"code", …}}`); the node only
/// needs the code.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorAnswer {
    pub error: ErrorCode,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorCode {
    pub code: String,
    #[serde(default)]
    pub message: String,
    /// With `clock_skew`: the gateway's signed time (PROTOCOL §5).
    #[serde(default)]
    pub time: Option<crate::envelope::TimeStatement>,
}

/// `TASK_REQUEST` payload: a tool call to run on the recipient. The gateway always sets
/// `job_id` and `token`; a node-to-node request may leave them out, as the node's own
/// `POST /v1/tool_call` may.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `{}` when absent; an explicit `null` stays `null` (the tool decides).
    #[serde(default = "empty_object")]
    pub tool_args: Value,
    pub tool_name: String,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// `TASK_RESULT` payload: the outcome of a `TASK_REQUEST`, sealed back to the requester.
/// Exactly one of `result` (when `ok`) and `error` is present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct TaskResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TaskError>,
    /// The audit evidence of the call (`null` when it failed before running).
    #[serde(default)]
    pub evidence: Value,
    pub job_id: String,
    pub ok: bool,
    /// Message id of the `TASK_REQUEST` answered; results from before it existed lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The tool's result; present (possibly `null`) exactly when `ok`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct TaskError {
    pub code: String,
    pub message: String,
}

/// A field that is there, even as `null`, is `Some` (plain `Option` would turn `null`
/// into `None` and drop it on the way back out).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// What the inbox and tasks queues keep for a received message (the message body in the
/// store): the decrypted payload plus who sent it. The node writes the envelope's
/// times too; the gateway's inbox never did, so they are optional and left out when
/// absent, which keeps every record already on disk readable and new ones identical.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct InboxRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    pub from: String,
    pub message_id: String,
    pub payload: Value,
    pub payload_type: String,
    pub received_at_ms: u64,
}

impl InboxRecord {
    /// The node's record for an opened envelope (with its times).
    pub fn new(o: &Opened, payload: Value, received_at_ms: u64) -> Self {
        Self {
            created_at_ms: Some(o.created_at_ms),
            expires_at_ms: Some(o.expires_at_ms),
            from: o.sender_node_id.clone(),
            message_id: o.message_id.clone(),
            payload,
            payload_type: o.payload_type.clone(),
            received_at_ms,
        }
    }

    /// The stored bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
