use super::*;
use crate::enroll::Approve;
use crate::enroll::TokenClaims;
use crate::envelope::IdentityDocument;
use crate::envelope::Keys;

fn doc(id: &str, k: &Keys) -> IdentityDocument {
    IdentityDocument::new(id, "node", k, "2026-11-27T00:00:00Z")
}

fn token(max_uses: u64, approve: Approve) -> TokenRecord {
    TokenRecord {
        claims: TokenClaims {
            v: 1,
            id: "et-1".into(),
            gateway_id: "gateway:main".into(),
            gateway_fp: "fp".into(),
            tls_spki_sha256: None,
            expires_at_ms: 1_000,
            max_uses,
            node_prefix: Some("node:pump-".into()),
            approve,
        },
        created_at_ms: 0,
        revoked: false,
        uses: 0,
        labels: Default::default(),
        tenant: None,
    }
}

fn facts<'a>(node: &'a IdentityDocument, token: Option<&'a TokenRecord>) -> Facts<'a> {
    Facts {
        now_ms: 10,
        node,
        token,
        same: None,
        trusted: None,
        pending_other: false,
        online: false,
        tenant: TenantRoom::Open,
    }
}

/// A token of a tenant enrolls the device at its address there; a tenant at its
/// `max_nodes` takes no new device (a known one is answered as before); a tenant that was
/// deleted takes none.
#[test]
fn a_tenant_token_enrolls_into_its_tenant_within_its_quota() {
    let k = Keys::generate();
    let d = doc("node:pump-1", &k);
    let mut t = token(5, Approve::Auto);
    t.tenant = Some("acme".into());
    match decide(&facts(&d, Some(&t)), "et-1", &Default::default()) {
        Decision::Record { record, .. } => {
            assert_eq!(record.node_id, "node:pump-1@acme");
            assert_eq!(record.document.node_id, "node:pump-1");
        }
        other => panic!("{other:?}"),
    }
    let mut full = facts(&d, Some(&t));
    full.tenant = TenantRoom::Full { max_nodes: 3 };
    assert!(matches!(
        decide(&full, "et-1", &Default::default()),
        Decision::Refuse(codes::TENANT_QUOTA, _)
    ));
    let known = EnrollmentRecord {
        node_id: "node:pump-1@acme".into(),
        node_sign_pk: b64_encode(&d.sign_pk),
        token_id: "et-1".into(),
        document: d.clone(),
        state: RecordState::Enrolled,
        kind: Kind::New,
        created_at_ms: 1,
        decided_at_ms: Some(1),
        labels: Default::default(),
        device: None,
        source: None,
        decided_by: None,
    };
    full.same = Some(&known);
    assert!(matches!(
        decide(&full, "et-1", &Default::default()),
        Decision::Answer(_)
    ));
    let mut gone = facts(&d, Some(&t));
    gone.tenant = TenantRoom::Missing;
    assert!(matches!(
        decide(&gone, "et-1", &Default::default()),
        Decision::Refuse(codes::TOKEN_REVOKED, _)
    ));
    assert!(!codes::is_final(codes::TENANT_QUOTA));
}

#[test]
fn a_new_device_is_enrolled_or_waits_as_the_token_says() {
    let k = Keys::generate();
    let d = doc("node:pump-1", &k);
    let auto = token(2, Approve::Auto);
    match decide(&facts(&d, Some(&auto)), "et-1", &Default::default()) {
        Decision::Record {
            record, consume, ..
        } => {
            assert!(consume);
            assert_eq!(record.state, RecordState::Enrolled);
            assert_eq!(record.kind, Kind::New);
            // Enrolled at once: the token decided it.
            assert_eq!(record.decided_by.as_deref(), Some("enroll-token:et-1"));
        }
        other => panic!("{other:?}"),
    }
    let manual = token(2, Approve::Manual);
    assert!(matches!(
        decide(&facts(&d, Some(&manual)), "et-1", &Default::default()),
        Decision::Record { record, .. }
            if record.state == RecordState::Pending && record.decided_by.is_none()
    ));
}

#[test]
fn token_limits_are_refusals_but_a_repeat_is_answered() {
    let k = Keys::generate();
    let d = doc("node:pump-1", &k);
    let mut t = token(1, Approve::Auto);
    t.uses = 1;
    let code = |f: &Facts<'_>| match decide(f, "et-1", &Default::default()) {
        Decision::Refuse(c, _) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(code(&facts(&d, Some(&t))), codes::TOKEN_EXHAUSTED);
    t.uses = 0;
    let mut f2 = facts(&d, Some(&t));
    f2.now_ms = 1_000;
    assert_eq!(code(&f2), codes::TOKEN_EXPIRED);
    let mut r = t.clone();
    r.revoked = true;
    assert_eq!(code(&facts(&d, Some(&r))), codes::TOKEN_REVOKED);
    assert_eq!(code(&facts(&d, None)), codes::TOKEN_REVOKED);
    let other = doc("node:tank-1", &k);
    assert_eq!(code(&facts(&other, Some(&t))), codes::NODE_ID_NOT_ALLOWED);
    // The same key again, even with the token spent or expired: its first answer.
    let rec = match decide(
        &facts(&d, Some(&token(1, Approve::Auto))),
        "et-1",
        &Default::default(),
    ) {
        Decision::Record { record, .. } => record,
        other => panic!("{other:?}"),
    };
    let mut spent = token(1, Approve::Auto);
    spent.uses = 1;
    let mut again = facts(&d, Some(&spent));
    again.same = Some(&rec);
    again.now_ms = 5_000;
    assert_eq!(
        decide(&again, "et-1", &Default::default()),
        Decision::Answer(rec.clone())
    );
}

#[test]
fn another_key_for_an_enrolled_id_is_a_duplicate_or_a_rekey() {
    let old = Keys::generate();
    let new = Keys::generate();
    let enrolled = doc("node:pump-1", &old);
    let reflashed = doc("node:pump-1", &new);
    let t = token(5, Approve::Auto);
    let mut f = facts(&reflashed, Some(&t));
    f.trusted = Some(&enrolled);
    f.online = true;
    assert!(matches!(
        decide(&f, "et-1", &Default::default()),
        Decision::Refuse(codes::DUPLICATE_NODE_ID, _)
    ));
    f.online = false;
    match decide(&f, "et-1", &Default::default()) {
        Decision::Record {
            record, consume, ..
        } => {
            assert!(consume);
            assert_eq!(
                (record.state, record.kind),
                (RecordState::Pending, Kind::Rekey)
            );
        }
        other => panic!("{other:?}"),
    }
    // The trusted key itself (enrolled by hand before): enrolled, no use counted.
    let mut same = facts(&enrolled, Some(&t));
    same.trusted = Some(&enrolled);
    assert!(matches!(
        decide(&same, "et-1", &Default::default()),
        Decision::Record { consume: false, record, .. } if record.state == RecordState::Enrolled
    ));
}

#[test]
fn rejected_retired_and_rotated_away_keys_stay_out() {
    let k = Keys::generate();
    let d = doc("node:pump-1", &k);
    let t = token(5, Approve::Auto);
    let mut rec = match decide(&facts(&d, Some(&t)), "et-1", &Default::default()) {
        Decision::Record { record, .. } => record,
        other => panic!("{other:?}"),
    };
    for (state, code) in [
        (RecordState::Rejected, codes::REJECTED),
        (RecordState::Revoked, codes::NODE_REVOKED),
        (RecordState::Rotated, codes::NODE_REVOKED),
    ] {
        rec.state = state;
        let mut f = facts(&d, Some(&t));
        f.same = Some(&rec);
        assert!(
            matches!(decide(&f, "et-1", &Default::default()), Decision::Refuse(c, _) if c == code)
        );
    }
}
