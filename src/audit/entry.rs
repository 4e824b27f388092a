//! Audit entries and their canonical JSON bytes (the Merkle leaves).
//!
//! Canonical form (PROTOCOL §13): keys sorted, no whitespace, absent optional fields omitted.
//! We get it without relying on `serde_json::Map` ordering (which flips to insertion
//! order when any crate in the build enables `preserve_order`): the struct's fields are
//! declared in byte-wise key order and every value is a string, an integer or an enum
//! tag, so `serde_json::to_vec` of the struct *is* the canonical form. A unit test pins
//! the exact bytes.
//!
//! Only hashes of tool arguments and results go in here, never the data itself: the log
//! is synced upstream and kept for a long time, the data may be personal.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What happened. `#[non_exhaustive]` because new event kinds are added as features
/// grow; readers of the log must accept tags they do not know (verify does not parse
/// the event at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditEvent {
    /// A tool was called (or the call was refused); see `outcome`.
    ToolCall,
    EnvelopeAccepted,
    EnvelopeRejected,
    /// A queued message expired (`timeout_in_queue`).
    Expired,
    /// A queue or the store budget refused a message.
    Overflow,
    /// A message exhausted its attempts and moved to the dead-letter queue.
    DeadLetter,
    /// A signed checkpoint was written (not a leaf PROTOCOL §13.1 requires; available for callers
    /// that want checkpoints themselves in the trail).
    Checkpoint,
    /// Refusals over the audit budget, counted instead of written one by one: `detail`
    /// is `reason=count,…` for the minute before it.
    RefusalSummary,
    /// The gateway's own log (PROTOCOL §15.6): a device enrolled or waits for approval.
    Enroll,
    /// An operator approved a pending enrollment (a re-key retires the old key).
    Approve,
    /// An operator rejected a pending enrollment.
    Reject,
    /// An operator retired a node.
    Revoke,
    /// A node replaced its key pair by a signed rotation (PROTOCOL §15.7).
    Rotate,
    /// A rollout was created, halted, resumed or cancelled (PROTOCOL §17).
    Rollout,
    /// An operator trusted a peer by hand on the gateway host, or changed its document
    /// or rights (`outpost trust add`).
    TrustAdd,
    /// An operator removed a peer from the trust store by hand (`outpost trust rm`).
    TrustRemove,
    /// An operator made an enrollment token (`outpost enroll-token create`).
    EnrollTokenCreate,
    /// An operator revoked an enrollment token (`outpost enroll-token revoke`).
    EnrollTokenRevoke,
    /// An operator revoked a capability token (`POST /v1/revocations`, the console).
    TokenRevoke,
    /// An operator changed a node's labels (PROTOCOL §16.1).
    Labels,
    /// An operator wrote a node's desired state (PROTOCOL §16.4).
    Desired,
    /// An operator created a tenant, set its quotas or deleted it (PROTOCOL §18).
    Tenant,
}

impl AuditEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolCall => "tool_call",
            Self::EnvelopeAccepted => "envelope_accepted",
            Self::EnvelopeRejected => "envelope_rejected",
            Self::Expired => "expired",
            Self::Overflow => "overflow",
            Self::DeadLetter => "dead_letter",
            Self::Checkpoint => "checkpoint",
            Self::RefusalSummary => "refusal_summary",
            Self::Enroll => "enroll",
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::Revoke => "revoke",
            Self::Rotate => "rotate",
            Self::Rollout => "rollout",
            Self::TrustAdd => "trust_add",
            Self::TrustRemove => "trust_remove",
            Self::EnrollTokenCreate => "enroll_token_create",
            Self::EnrollTokenRevoke => "enroll_token_revoke",
            Self::TokenRevoke => "token_revoke",
            Self::Labels => "labels",
            Self::Desired => "desired",
            Self::Tenant => "tenant",
        }
    }
}

/// How it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditOutcome {
    Ok,
    Refused,
    Failed,
    Timeout,
    Rejected,
    Expired,
    Overflow,
    Dead,
}

impl AuditOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Refused => "refused",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Overflow => "overflow",
            Self::Dead => "dead",
        }
    }
}

/// Everything about an event except its position and time, which the log assigns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub event: AuditEvent,
    pub outcome: AuditOutcome,
    pub job_id: Option<String>,
    pub tool_name: Option<String>,
    /// Who asked: token subject, peer node id.
    pub actor: Option<String>,
    /// Lowercase hex SHA-256; use [`sha256_hex`] / [`json_sha256_hex`].
    pub args_sha256: Option<String>,
    pub result_sha256: Option<String>,
    pub message_id: Option<String>,
    /// Short machine-readable reason (an error code, `timeout_in_queue`…), never raw data.
    pub detail: Option<String>,
}

impl AuditRecord {
    pub fn new(event: AuditEvent, outcome: AuditOutcome) -> Self {
        Self {
            event,
            outcome,
            job_id: None,
            tool_name: None,
            actor: None,
            args_sha256: None,
            result_sha256: None,
            message_id: None,
            detail: None,
        }
    }

    /// A tool call with its hashed arguments; add the result or failure with
    /// [`AuditRecord::result`] / [`AuditRecord::detail`].
    pub fn tool_call(
        outcome: AuditOutcome,
        tool_name: &str,
        job_id: &str,
        args: &serde_json::Value,
    ) -> Self {
        let mut r = Self::new(AuditEvent::ToolCall, outcome);
        r.tool_name = Some(tool_name.to_string());
        r.job_id = Some(job_id.to_string());
        r.args_sha256 = Some(json_sha256_hex(args));
        r
    }

    #[must_use]
    pub fn result(mut self, result: &serde_json::Value) -> Self {
        self.result_sha256 = Some(json_sha256_hex(result));
        self
    }

    #[must_use]
    pub fn actor(mut self, actor: impl Into<String>) -> Self {
        self.actor = Some(actor.into());
        self
    }

    #[must_use]
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }

    #[must_use]
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// One leaf of the audit tree. Field order is the canonical key order — do not reorder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditEntry {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub actor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub args_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
    pub event: AuditEvent,
    pub index: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub job_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message_id: Option<String>,
    pub outcome: AuditOutcome,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub result_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool_name: Option<String>,
    pub ts_ms: u64,
}

impl AuditEntry {
    pub fn from_record(index: u64, ts_ms: u64, r: AuditRecord) -> Self {
        Self {
            actor: r.actor,
            args_sha256: r.args_sha256,
            detail: r.detail,
            event: r.event,
            index,
            job_id: r.job_id,
            message_id: r.message_id,
            outcome: r.outcome,
            result_sha256: r.result_sha256,
            tool_name: r.tool_name,
            ts_ms,
        }
    }

    /// The canonical JSON bytes: what is stored, hashed and exported.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Serializing a struct of strings/integers/unit enums cannot fail; fall back to
        // an empty vector rather than panic if serde_json ever disagrees.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Lowercase hex SHA-256 of raw bytes.
pub fn sha256_hex(data: &[u8]) -> String {
    to_hex(&Sha256::digest(data))
}

/// Hex SHA-256 of a JSON value as serialized compactly by serde_json.
///
/// Args/result hashes let an auditor check "was this the call?" given the data, without
/// the log holding the data. serde_json's output is stable for a given `Value`, which is
/// what the node hashes at call time.
pub fn json_sha256_hex(value: &serde_json::Value) -> String {
    sha256_hex(&serde_json::to_vec(value).unwrap_or_default())
}

pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0x0f) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_bytes_are_sorted_compact_and_omit_absent_fields() {
        let mut r = AuditRecord::new(AuditEvent::ToolCall, AuditOutcome::Ok);
        r.tool_name = Some("echo".into());
        r.job_id = Some("j1".into());
        r.args_sha256 = Some(sha256_hex(b"{}"));
        let e = AuditEntry::from_record(7, 1_700_000_000_000, r);
        let s = String::from_utf8(e.canonical_bytes()).unwrap();
        assert_eq!(
            s,
            format!(
                "{{\"args_sha256\":\"{}\",\"event\":\"tool_call\",\"index\":7,\"job_id\":\"j1\",\
                 \"outcome\":\"ok\",\"tool_name\":\"echo\",\"ts_ms\":1700000000000}}",
                sha256_hex(b"{}")
            )
        );
        // Keys really are in byte order: re-sorting through a BTreeMap changes nothing.
        let v: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_str(&s).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), s);
    }

    #[test]
    fn all_fields_round_trip_in_key_order() {
        let mut r = AuditRecord::new(AuditEvent::EnvelopeRejected, AuditOutcome::Rejected);
        r.actor = Some("gateway:main".into());
        r.args_sha256 = Some("aa".into());
        r.detail = Some("bad_signature \"quoted\"".into());
        r.job_id = Some("j".into());
        r.message_id = Some("m".into());
        r.result_sha256 = Some("bb".into());
        r.tool_name = Some("t".into());
        let e = AuditEntry::from_record(1, 2, r);
        let bytes = e.canonical_bytes();
        let keys: Vec<String> = serde_json::from_slice::<serde_json::Value>(&bytes)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        // serde_json's Map may or may not preserve order; compare textual positions.
        let text = String::from_utf8(bytes.clone()).unwrap();
        let pos: Vec<usize> = sorted
            .iter()
            .map(|k| text.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert_eq!(keys.len(), 11);
        let back: AuditEntry = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn builder_hashes_and_never_stores_raw_data() {
        let args = serde_json::json!({"text": "call +49 30 1234567"});
        let result = serde_json::json!({"text": "call [PHONE]"});
        let r = AuditRecord::tool_call(AuditOutcome::Ok, "pii_redact", "j9", &args)
            .result(&result)
            .actor("field-engineer")
            .detail("ok");
        let bytes = AuditEntry::from_record(0, 1, r).canonical_bytes();
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            !text.contains("1234567") && !text.contains("PHONE"),
            "{text}"
        );
        assert!(text.contains(&json_sha256_hex(&args)) && text.contains(&json_sha256_hex(&result)));
    }

    #[test]
    fn hex_helpers() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            json_sha256_hex(&serde_json::json!({"a":1})),
            sha256_hex(b"{\"a\":1}")
        );
    }
}
