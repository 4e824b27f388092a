//! What the gateway's audit log says of each enrollment decision: the audit entry of an
//! enrollment, approval or rejection (pure; the state writes it, pending, in the
//! decision's transaction).

use crate::audit::{AuditEvent, AuditOutcome, AuditRecord};
use crate::gateway::storage::{Decision, EnrollmentRecord, RecordState};

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
