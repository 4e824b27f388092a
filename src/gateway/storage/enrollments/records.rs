//! What the state keeps of enrollment (PROTOCOL §15): a token with its uses, one
//! record per node id and device key, the facts an enrollment is decided on and the
//! decision the state writes; and how a retirement or a key rotation rewrites a node
//! id's records (pure; the state writes the result in the decision's transaction).
//! The flow that decides (`gateway::enroll`) and both engines share these types.

use serde::{Deserialize, Serialize};

use crate::audit::AuditRecord;
use crate::envelope::{b64_encode, IdentityDocument, KeyRotation, Rights, TrustStore};
use crate::fleet::{Inventory, Labels};

/// A token as the gateway keeps it: its claims, and how often it was used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub claims: crate::enroll::TokenClaims,
    pub created_at_ms: u64,
    pub revoked: bool,
    /// Enrollments recorded under it (each device key once).
    pub uses: u64,
    /// Labels every node it enrolls starts with (PROTOCOL §16.1); the gateway's own,
    /// never in the token the devices carry.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    /// The tenant every node it enrolls joins (PROTOCOL §18); `None` = `default`. The
    /// gateway's own, like the labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl TokenRecord {
    /// The address a node of id `node_id` enrolled with this token has.
    pub fn address_of(&self, node_id: &str) -> String {
        crate::fleet::tenant::address(
            node_id,
            self.tenant
                .as_deref()
                .unwrap_or(crate::fleet::tenant::DEFAULT_TENANT),
        )
    }

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
    /// The node's address (PROTOCOL §18): its node id, or `<node id>@<tenant>` for a node
    /// enrolled into a tenant; `document` names the node id alone.
    pub node_id: String,
    /// b64url of the device's signing key.
    pub node_sign_pk: String,
    pub token_id: String,
    pub document: IdentityDocument,
    pub state: RecordState,
    pub kind: Kind,
    pub created_at_ms: u64,
    pub decided_at_ms: Option<u64>,
    /// The token's labels when the record was made: the node starts with them once
    /// enrolled (written with the decision that trusts it).
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    /// What the device said about itself when it asked (PROTOCOL §15.3): its inventory
    /// (§16.3) without the tools, for the operator who approves it. `None` from a node
    /// older than that, and for records the gateway made itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<Inventory>,
    /// The address the enrollment request came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Who decided it (with `decided_at_ms`): the subject of the token or console
    /// session, `local:<user>` on the gateway host, `enroll-token:<id>` for an automatic
    /// enrollment, the node id for its key rotation. `None` while pending and for a
    /// record decided before the gateway recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
}

impl EnrollmentRecord {
    /// When it was decided, for a person (RFC 3339, UTC).
    pub fn decided_on(&self) -> String {
        self.decided_at_ms
            .and_then(crate::token::format_rfc3339_ms)
            .unwrap_or_else(|| "an unrecorded date".into())
    }

    /// Who decided it, as the record says; a record from before the gateway kept it
    /// points at the audit log, which always did.
    pub fn decider(&self) -> String {
        match &self.decided_by {
            Some(by) => by.clone(),
            None => "an operator (who: the gateway's audit log, `outpost audit export`)".into(),
        }
    }

    /// `<node> was retired on <date> by <who>`, for every message about a retired node.
    pub fn retirement(&self) -> String {
        format!(
            "{} was retired on {} by {}",
            self.node_id,
            self.decided_on(),
            self.decider()
        )
    }
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
    /// Where the token's tenant stands (PROTOCOL §18).
    pub tenant: TenantRoom,
}

/// Whether the tenant an enrollment token names can take one more node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantRoom {
    /// It can (the tenant `default`, or one below its `max_nodes`).
    Open,
    /// It has its `max_nodes` nodes already.
    Full { max_nodes: u64 },
    /// The tenant was deleted after the token was made.
    Missing,
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

/// The rights an enrolled node gets: what a hand enrollment gives (`trust add --send`).
pub const NODE_RIGHTS: Rights = Rights {
    send: true,
    issue: false,
};

/// Put `doc` into `t` as an enrolled node at `address` (its node id, or `<node
/// id>@<tenant>`: PROTOCOL §18), replacing a retired key.
pub fn trust_node(t: &mut TrustStore, address: &str, doc: &IdentityDocument) -> Result<(), String> {
    let tenant = crate::fleet::tenant::tenant_of(address);
    t.add_in(doc.clone(), NODE_RIGHTS, Some(tenant))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The record an operator's decision on `node_id` settles, from `records` (every record
/// of the id): the pending one; or, to approve, the newest rejected one (a device
/// rejected by mistake is let in again: its retries answer from this record). A rejected
/// record's kind is what it would be now: a re-key when the id is trusted under
/// `trusted_key`, another key (approving it retires that key).
pub fn settleable(
    records: &[EnrollmentRecord],
    approve: bool,
    trusted_key: Option<&str>,
) -> Option<EnrollmentRecord> {
    if let Some(p) = records.iter().find(|r| r.state == RecordState::Pending) {
        return Some(p.clone());
    }
    if !approve {
        return None;
    }
    let mut r = records
        .iter()
        .filter(|r| r.state == RecordState::Rejected)
        .max_by_key(|r| r.decided_at_ms)?
        .clone();
    r.kind = if trusted_key.is_some_and(|k| k != r.node_sign_pk) {
        Kind::Rekey
    } else {
        Kind::New
    };
    Some(r)
}

/// The records to write when the node trusted as `doc` is retired at `now_ms`, from
/// `records` (every record of its id): each enrolled, pending or rotated-away key reads
/// revoked (a rejected one stays rejected), and the trusted key's record is there even
/// when it was trusted by hand. Only the trusted key's is decided now (the others keep
/// their time), so the newest retired key is the one last trusted.
pub fn retired_records(
    records: Vec<EnrollmentRecord>,
    address: &str,
    doc: &IdentityDocument,
    now_ms: u64,
    by: &str,
) -> Vec<EnrollmentRecord> {
    let key = b64_encode(&doc.sign_pk);
    let mut out: Vec<EnrollmentRecord> = records
        .into_iter()
        .filter(|r| match r.state {
            RecordState::Rejected => false,
            RecordState::Revoked => r.node_sign_pk == key,
            _ => true,
        })
        .map(|mut r| {
            r.state = RecordState::Revoked;
            r
        })
        .collect();
    match out.iter_mut().find(|r| r.node_sign_pk == key) {
        Some(r) => {
            r.decided_at_ms = Some(now_ms);
            r.decided_by = Some(by.to_string());
        }
        None => out.push(EnrollmentRecord {
            node_id: address.to_string(),
            node_sign_pk: key,
            token_id: String::new(),
            document: doc.clone(),
            state: RecordState::Revoked,
            kind: Kind::New,
            created_at_ms: now_ms,
            decided_at_ms: Some(now_ms),
            labels: Labels::default(),
            device: None,
            source: None,
            decided_by: Some(by.to_string()),
        }),
    }
    out
}

/// The records to write when `rot` is applied at `now_ms`, from `records` (every
/// record of the node id): the retired key's enrolled record reads rotated, and the new
/// key gets an enrolled record under the same token and kind. A node trusted by hand
/// (no enrolled record of the retired key) has none to change.
pub fn rotated_records(
    records: Vec<EnrollmentRecord>,
    rot: &KeyRotation,
    now_ms: u64,
) -> Vec<EnrollmentRecord> {
    let old = b64_encode(&rot.old_sign_pk);
    let Some(mut was) = records
        .into_iter()
        .find(|r| r.node_sign_pk == old && r.state == RecordState::Enrolled)
    else {
        return Vec::new();
    };
    let new = EnrollmentRecord {
        node_id: was.node_id.clone(),
        node_sign_pk: b64_encode(&rot.new_doc.sign_pk),
        token_id: was.token_id.clone(),
        document: rot.new_doc.clone(),
        state: RecordState::Enrolled,
        kind: was.kind,
        created_at_ms: now_ms,
        decided_at_ms: Some(now_ms),
        labels: was.labels.clone(),
        device: was.device.clone(),
        source: None,
        // The node decided it: the rotation statement is signed by its retired key.
        decided_by: Some(rot.new_doc.node_id.clone()),
    };
    was.state = RecordState::Rotated;
    was.decided_at_ms = Some(now_ms);
    was.decided_by = new.decided_by.clone();
    vec![was, new]
}
