//! What is true about a retired node, said where an operator meets it: `trust add` of a
//! key the gateway retired is refused (it would list the node again while the gateway
//! refuses it as `node_revoked` for good), and `command`/`call` for a retired node say
//! it was retired, not "add it".

use crate::config::Config;
use crate::envelope::{b64_encode, IdentityDocument};
use crate::gateway::enroll::{EnrollmentRecord, RecordState};

/// The record that retired `doc`'s signing key (by `nodes revoke` or a key rotation),
/// if it was retired here.
pub fn retired_key<'r>(
    records: &'r [EnrollmentRecord],
    doc: &IdentityDocument,
) -> Option<&'r EnrollmentRecord> {
    let key = b64_encode(&doc.sign_pk);
    records.iter().find(|r| {
        r.node_id == doc.node_id
            && r.node_sign_pk == key
            && matches!(r.state, RecordState::Revoked | RecordState::Rotated)
    })
}

/// The newest retirement of `node_id` (`outpost nodes revoke`), if it was retired.
pub fn retired_node<'r>(
    records: &'r [EnrollmentRecord],
    node_id: &str,
) -> Option<&'r EnrollmentRecord> {
    records
        .iter()
        .filter(|r| r.node_id == node_id && r.state == RecordState::Revoked)
        .max_by_key(|r| r.decided_at_ms)
}

/// Why this key cannot be trusted again, and what brings the device back.
pub fn explain(r: &EnrollmentRecord) -> String {
    match r.state {
        RecordState::Rotated => format!(
            "{} rotated away from this key on {} (PROTOCOL §15.7): the gateway refuses it \
             for good and trusts the node's newer key",
            r.node_id,
            r.decided_on()
        ),
        _ => format!(
            "{} (`outpost nodes revoke`): the gateway refuses its key for good and queues \
             nothing for it. A reflashed device (a new key) enrolls again with an enrollment \
             token (`outpost enroll-token create`, docs/INSTALL.md §4)",
            r.retirement()
        ),
    }
}

/// The gateway's enrollment records, read on its host (the store in the data dir, or
/// the replicas' database); `None` when they cannot be read (the caller says what it
/// would have said anyway).
pub fn records(cfg: &Config) -> Option<Vec<EnrollmentRecord>> {
    let st = super::enroll_cmd::Opened::open(cfg).ok()?;
    let r = st.rt.block_on(st.state.enrollments()).ok();
    st.close();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::enroll::Kind;

    fn record(state: RecordState, at: u64) -> EnrollmentRecord {
        let keys = crate::envelope::Keys::generate();
        let doc = crate::envelope::IdentityDocument::new(
            "node:old",
            "node",
            &keys,
            "2025-11-01T00:00:00Z",
        );
        EnrollmentRecord {
            node_id: "node:old".into(),
            node_sign_pk: b64_encode(&doc.sign_pk),
            token_id: String::new(),
            document: doc,
            state,
            kind: Kind::New,
            created_at_ms: 0,
            decided_at_ms: Some(at),
            labels: Default::default(),
            device: None,
            source: None,
            decided_by: Some("admin:ops".into()),
        }
    }

    #[test]
    fn a_retired_key_is_explained_with_its_date_and_the_way_back() {
        let r = record(RecordState::Revoked, 1_764_345_600_000);
        let recs = vec![record(RecordState::Enrolled, 5), r.clone()];
        assert_eq!(retired_key(&recs, &r.document), Some(&recs[1]));
        assert_eq!(retired_key(&recs[..1], &r.document), None);
        assert_eq!(retired_node(&recs, "node:old"), Some(&recs[1]));
        let e = explain(&r);
        assert!(e.contains("retired on 2025-11-28T16:00:00"), "{e}");
        assert!(e.contains("by admin:ops"), "{e}");
        let older = EnrollmentRecord {
            decided_by: None,
            ..r.clone()
        };
        assert!(explain(&older).contains("audit log"), "{}", explain(&older));
        assert!(
            e.contains("enrollment token") && !e.contains("trust add"),
            "{e}"
        );
    }
}
