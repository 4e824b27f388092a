//! What a node's enrollment records and the gateway's audit log say of each decision:
//! the audit entry of an enrollment, approval or rejection, and how a key rotation or a
//! retirement rewrites every record of the node id (pure; the state writes the result
//! in the decision's transaction).

use super::{Decision, EnrollmentRecord, Kind, RecordState};
use crate::audit::{AuditEvent, AuditOutcome, AuditRecord};
use crate::envelope::{b64_encode, IdentityDocument, KeyRotation};

/// A decision to write `record`, with its audit entry (the node is the actor).
pub(super) fn recorded_decision(record: EnrollmentRecord, consume: bool) -> Decision {
    let audit = audit(
        AuditEvent::Enroll,
        AuditOutcome::Ok,
        &record.node_id,
        &record,
        enrolled_or_pending(&record),
    );
    Decision::Record {
        record,
        consume,
        audit,
    }
}

pub(super) fn enrolled_or_pending(record: &EnrollmentRecord) -> &'static str {
    match record.state {
        RecordState::Enrolled => "enrolled",
        _ => "pending",
    }
}

/// The gateway audit entry of an enrollment decision: `detail` names the node, the
/// kind and the token; `args_sha256` binds the device key.
pub(super) fn audit(
    event: AuditEvent,
    outcome: AuditOutcome,
    actor: &str,
    r: &EnrollmentRecord,
    what: &str,
) -> AuditRecord {
    let mut a = AuditRecord::new(event, outcome)
        .actor(actor)
        .detail(format!(
            "{} {what} {} {}",
            r.node_id,
            r.kind.as_str(),
            r.token_id
        ));
    a.args_sha256 = Some(crate::audit::sha256_hex(r.node_sign_pk.as_bytes()));
    a
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
    doc: &IdentityDocument,
    now_ms: u64,
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
        Some(r) => r.decided_at_ms = Some(now_ms),
        None => out.push(EnrollmentRecord {
            node_id: doc.node_id.clone(),
            node_sign_pk: key,
            token_id: String::new(),
            document: doc.clone(),
            state: RecordState::Revoked,
            kind: Kind::New,
            created_at_ms: now_ms,
            decided_at_ms: Some(now_ms),
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
        node_id: rot.new_doc.node_id.clone(),
        node_sign_pk: b64_encode(&rot.new_doc.sign_pk),
        token_id: was.token_id.clone(),
        document: rot.new_doc.clone(),
        state: RecordState::Enrolled,
        kind: was.kind,
        created_at_ms: now_ms,
        decided_at_ms: Some(now_ms),
    };
    was.state = RecordState::Rotated;
    was.decided_at_ms = Some(now_ms);
    vec![was, new]
}
