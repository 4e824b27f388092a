//! The pure core of an enrollment (PROTOCOL §15.3): the records the state keeps (tokens,
//! one record per node id and device key), what the state knows when a request
//! arrives ([`Facts`]) and [`decide`]: what to answer and what to write. No I/O, no
//! clock; the storage engines run it inside their transaction.

use serde::{Deserialize, Serialize};

use super::history::recorded_decision;
use crate::audit::AuditRecord;
use crate::enroll::{codes, Approve};
use crate::envelope::{b64_encode, IdentityDocument, Rights, TrustStore};

/// A token as the gateway keeps it: its claims, and how often it was used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub claims: crate::enroll::TokenClaims,
    pub created_at_ms: u64,
    pub revoked: bool,
    /// Enrollments recorded under it (each device key once).
    pub uses: u64,
}

impl TokenRecord {
    /// `active`, `expired`, `exhausted` or `revoked`.
    pub fn state(&self, now_ms: u64) -> &'static str {
        if self.revoked {
            "revoked"
        } else if now_ms >= self.claims.expires_at_ms {
            "expired"
        } else if self.uses >= self.claims.max_uses {
            "exhausted"
        } else {
            "active"
        }
    }
}

/// Where one device key's enrollment under a node id stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    Enrolled,
    Pending,
    Rejected,
    /// The node was retired (`outpost nodes revoke`): this key is refused for good.
    Revoked,
    /// The node rotated away from this key (PROTOCOL §15.7): its newer key is the
    /// node's; this one is refused for good.
    Rotated,
}

/// A new device, or a known id with a new key (a reflashed device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    New,
    Rekey,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::New => "new",
            Kind::Rekey => "rekey",
        }
    }
}

/// One device key's enrollment under a node id (keyed by both).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollmentRecord {
    pub node_id: String,
    /// b64url of the device's signing key.
    pub node_sign_pk: String,
    pub token_id: String,
    pub document: IdentityDocument,
    pub state: RecordState,
    pub kind: Kind,
    pub created_at_ms: u64,
    pub decided_at_ms: Option<u64>,
}

/// What the state knows when an enrollment arrives (read in its transaction).
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub now_ms: u64,
    pub node: &'a IdentityDocument,
    pub token: Option<&'a TokenRecord>,
    /// The record of this node id with this key, if any.
    pub same: Option<&'a EnrollmentRecord>,
    /// The document trusted for this node id now, if any.
    pub trusted: Option<&'a IdentityDocument>,
    /// Another key of this node id waits for approval.
    pub pending_other: bool,
    /// The node now trusted under this id (another key) was heard from recently: a
    /// second device, not a reflashed one.
    pub online: bool,
}

/// What to answer, and what to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Answer from a record already there; nothing is written.
    Answer(EnrollmentRecord),
    /// Refuse with a code of PROTOCOL §15.4; nothing is written.
    Refuse(&'static str, String),
    /// Write `record` (and count a use of the token when `consume`); when the record is
    /// `Enrolled`, the node is trusted with `send` in the same transaction; `audit` is
    /// the gateway's audit entry of it, pending in the same transaction.
    Record {
        record: EnrollmentRecord,
        consume: bool,
        audit: AuditRecord,
    },
}

/// The pure core of an enrollment.
pub fn decide(f: &Facts<'_>, token_id: &str) -> Decision {
    let key = b64_encode(&f.node.sign_pk);
    if let Some(r) = f.same {
        return match r.state {
            RecordState::Enrolled | RecordState::Pending => Decision::Answer(r.clone()),
            RecordState::Rejected => Decision::Refuse(
                codes::REJECTED,
                "an operator rejected this device's enrollment".into(),
            ),
            RecordState::Revoked => Decision::Refuse(
                codes::NODE_REVOKED,
                "this device key was retired (`outpost nodes revoke`); a reflashed device enrolls with a new key".into(),
            ),
            RecordState::Rotated => Decision::Refuse(
                codes::NODE_REVOKED,
                "this device key was retired by a key rotation: the node signs with its newer key".into(),
            ),
        };
    }
    let Some(t) = f.token.filter(|t| !t.revoked) else {
        return Decision::Refuse(
            codes::TOKEN_REVOKED,
            "the enrollment token was revoked".into(),
        );
    };
    if f.now_ms >= t.claims.expires_at_ms {
        return Decision::Refuse(codes::TOKEN_EXPIRED, "the enrollment token expired".into());
    }
    if t.uses >= t.claims.max_uses {
        return Decision::Refuse(
            codes::TOKEN_EXHAUSTED,
            format!("the enrollment token was used {} times, its limit", t.uses),
        );
    }
    if let Some(p) = &t.claims.node_prefix {
        if !f.node.node_id.starts_with(p.as_str()) {
            return Decision::Refuse(
                codes::NODE_ID_NOT_ALLOWED,
                format!("this token enrolls node ids starting with {p:?} only"),
            );
        }
    }
    let trusted_same = f.trusted.is_some_and(|d| d.sign_pk == f.node.sign_pk);
    let record = |state, kind| EnrollmentRecord {
        node_id: f.node.node_id.clone(),
        node_sign_pk: key.clone(),
        token_id: token_id.to_string(),
        document: f.node.clone(),
        state,
        kind,
        created_at_ms: f.now_ms,
        decided_at_ms: (state == RecordState::Enrolled).then_some(f.now_ms),
    };
    if trusted_same {
        // Trusted by hand before: nothing to change, no use counted.
        return recorded_decision(record(RecordState::Enrolled, Kind::New), false);
    }
    if f.trusted.is_some() || f.pending_other {
        if f.online || f.pending_other {
            return Decision::Refuse(
                codes::DUPLICATE_NODE_ID,
                format!(
                    "{} is enrolled with another key{}: a second device with the same id is never merged (give each device its own id: identity.node_id_from)",
                    f.node.node_id,
                    if f.online { " and online now" } else { " waiting for approval" }
                ),
            );
        }
        // Enrolled, silent, and now a new key: a reflashed device. An operator decides.
        return recorded_decision(record(RecordState::Pending, Kind::Rekey), true);
    }
    let state = match t.claims.approve {
        Approve::Auto => RecordState::Enrolled,
        Approve::Manual => RecordState::Pending,
    };
    recorded_decision(record(state, Kind::New), true)
}

/// The rights an enrolled node gets: what a hand enrollment gives (`trust add --send`).
pub const NODE_RIGHTS: Rights = Rights {
    send: true,
    issue: false,
};

/// Put `doc` into `t` as an enrolled node (replacing a retired key).
pub fn trust_node(t: &mut TrustStore, doc: &IdentityDocument) -> Result<(), String> {
    t.add(doc.clone(), NODE_RIGHTS)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
