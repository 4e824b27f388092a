//! The fleet's history: each decision's gateway audit entry is committed with it (as
//! pending) and moved into the gateway's log once, and a key rotation or a retirement
//! rewrites every enrollment record of the node id.

use super::trust::{enroll, peer, token};
use super::*;
use outpost::audit::AuditEntry;
use outpost::gateway::storage::PendingAudit;

const GW: &str = "gateway:main";

async fn pending(state: &dyn GatewayState) -> Vec<PendingAudit> {
    state.audit_pending(100).await.unwrap()
}

fn details(p: &[PendingAudit]) -> Vec<String> {
    p.iter()
        .map(|p| p.entry.detail.clone().unwrap_or_default())
        .collect()
}

/// The extension that appends `p` at `start` (the checkpoint's text is the flow's).
fn extension(start: u64, p: &[PendingAudit]) -> (AuditExtension, Vec<u64>) {
    let entries: Vec<Vec<u8>> = p
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let mut e: AuditEntry = p.entry.clone();
            e.index = start + k as u64;
            e.canonical_bytes()
        })
        .collect();
    let end = start + entries.len() as u64;
    let ext = AuditExtension {
        start,
        entries,
        checkpoint_size: end,
        checkpoint: format!("checkpoint {end}"),
    };
    (ext, p.iter().map(|p| p.seq).collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn each_decision_commits_its_audit_entry_pending_and_an_append_moves_it_once() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    for (id, approve) in [("auto", Approve::Auto), ("manual", Approve::Manual)] {
        let made = entry(&format!("created {id}"));
        state
            .enroll_token_add(token(id, approve), &made)
            .await
            .unwrap();
    }
    // An enrollment: its entry, from the decision, at the decision's time.
    let (f_keys, f) = peer("node:f", "node", "2026-11-20T06:00:00Z");
    let Decision::Record { audit, .. } = enroll(state, &f, "auto").await else {
        panic!("not recorded");
    };
    let p = pending(state).await;
    assert_eq!(p.len(), 3);
    assert_eq!(p[2].entry, AuditEntry::from_record(0, T0, audit));
    // An answer from the record writes nothing.
    assert!(matches!(
        enroll(state, &f, "auto").await,
        Decision::Answer(_)
    ));
    assert_eq!(pending(state).await.len(), 3);

    // An approval; nothing pending to settle writes nothing.
    let (_, g) = peer("node:g", "node", "2026-11-20T06:00:00Z");
    enroll(state, &g, "manual").await;
    let settled_g = state
        .settle_enrollment("node:g", true, T0 + 5, "admin:test", &settled)
        .await
        .unwrap();
    assert!(settled_g.is_some());
    let none = state.settle_enrollment("node:x", true, T0 + 5, "admin:test", &settled);
    assert_eq!(none.await.unwrap(), None);

    // A node's key rotation, once (a retry or a stale statement writes nothing).
    let f2_keys = Keys::generate();
    let f2 = IdentityDocument::new("node:f", "node", &f2_keys, "2026-11-27T06:00:00Z");
    let rot = KeyRotation::new(&f_keys, &f2_keys, f2.clone());
    for _ in 0..2 {
        state
            .rotate_node(
                &rot.new_doc.node_id,
                &rot,
                T0 + 6,
                3_600_000,
                &entry("rotated node:f"),
            )
            .await
            .unwrap()
            .unwrap();
    }
    // The gateway's own rotation, once however often it is stored.
    let (gw_old, _) = peer(GW, "gateway", "2026-11-20T06:00:00Z");
    let gw_new = Keys::generate();
    let gw_doc = IdentityDocument::new(GW, "gateway", &gw_new, "2026-11-27T06:00:00Z");
    let gw_rot = KeyRotation::new(&gw_old, &gw_new, gw_doc);
    for _ in 0..2 {
        let audit = entry("rotated gateway");
        let put = state.put_gateway_rotation(&gw_rot, T0 + 9, &audit);
        put.await.unwrap();
    }
    // A retirement; an unknown node writes nothing.
    state
        .revoke_node("node:f", T0 + 10, "admin:test", &retired)
        .await
        .unwrap()
        .expect("trusted");
    let none = state
        .revoke_node("node:nobody", T0 + 10, "admin:test", &retired)
        .await;
    assert_eq!(none.unwrap(), None);

    let want = [
        "created auto",
        "created manual",
        "node:f enrolled new auto",
        "node:g pending new manual",
        "settled node:g",
        "rotated node:f",
        "rotated gateway",
        "retired node:f 0",
    ];
    let p = pending(state).await;
    assert_eq!(details(&p), want);
    assert!(p.windows(2).all(|w| w[0].seq < w[1].seq), "oldest first");
    assert_eq!(state.audit_pending(2).await.unwrap(), p[..2]);

    // A crash before any append: every entry is still pending after the restart.
    let e = e.reopen().await;
    let state = &*e.state;
    let p = pending(state).await;
    assert_eq!(details(&p), want);

    // Racing another replica: an extension that does not start at the log's end, or
    // whose entries another append took, writes nothing and leaves them pending.
    let (ext, seqs) = extension(1, &p[..2]);
    assert!(!state.audit_append_pending(GW, ext, &seqs).await.unwrap());
    assert_eq!(state.audit_size(GW).await.unwrap(), 0);
    let (ext, seqs) = extension(0, &p[..2]);
    assert!(state.audit_append_pending(GW, ext, &seqs).await.unwrap());
    assert_eq!(details(&pending(state).await), want[2..]);
    // The same entries again, at the new end: never appended twice.
    let (ext, seqs) = extension(2, &p[..2]);
    assert!(!state.audit_append_pending(GW, ext, &seqs).await.unwrap());
    let (ext, seqs) = extension(0, &p[2..]);
    assert!(!state.audit_append_pending(GW, ext, &seqs).await.unwrap());
    assert_eq!(state.audit_size(GW).await.unwrap(), 2);
    let (ext, seqs) = extension(2, &p[2..]);
    assert!(state.audit_append_pending(GW, ext, &seqs).await.unwrap());
    assert!(pending(state).await.is_empty());

    let log: Vec<AuditEntry> = state
        .audit_entries(GW)
        .await
        .unwrap()
        .iter()
        .map(|b| serde_json::from_slice(b).unwrap())
        .collect();
    let indexed: Vec<(u64, String)> = log
        .iter()
        .map(|e| (e.index, e.detail.clone().unwrap()))
        .collect();
    let expected: Vec<(u64, String)> = (0..).zip(want.map(String::from)).collect();
    assert_eq!(indexed, expected);
    assert_eq!(
        state.audit_checkpoints(GW).await.unwrap(),
        [(2, "checkpoint 2".into()), (8, "checkpoint 8".into())]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_rotation_and_a_retirement_rewrite_every_record_of_the_node_id() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    state
        .enroll_token_add(token("auto", Approve::Auto), &entry("created auto"))
        .await
        .unwrap();
    let (a_keys, a) = peer("node:r", "node", "2026-11-20T06:00:00Z");
    assert!(matches!(
        enroll(state, &a, "auto").await,
        Decision::Record { .. }
    ));
    let b_keys = Keys::generate();
    let b = IdentityDocument::new("node:r", "node", &b_keys, "2026-11-21T06:00:00Z");
    let c_keys = Keys::generate();
    let c = IdentityDocument::new("node:r", "node", &c_keys, "2026-11-22T06:00:00Z");
    for (at, (old, new, doc)) in [(&a_keys, &b_keys, &b), (&b_keys, &c_keys, &c)]
        .into_iter()
        .enumerate()
    {
        let rot = KeyRotation::new(old, new, doc.clone());
        let audit = entry("rotated node:r");
        let applied = state.rotate_node(
            &rot.new_doc.node_id,
            &rot,
            T0 + 1 + at as u64,
            3_600_000,
            &audit,
        );
        assert_eq!(applied.await.unwrap(), Ok(Rotated::Applied));
    }
    let docs = [a.clone(), b.clone(), c.clone()];
    let records = |want: [RecordState; 3]| {
        let docs = docs.clone();
        async move {
            let mut got: Vec<(String, RecordState, String)> = state
                .enrollments()
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r.node_sign_pk, r.state, r.token_id))
                .collect();
            got.sort_by(|x, y| x.0.cmp(&y.0));
            let key = |d: &IdentityDocument| outpost::envelope::b64_encode(&d.sign_pk);
            let mut expected: Vec<(String, RecordState, String)> = docs
                .iter()
                .zip(want)
                .map(|(d, s)| (key(d), s, "auto".to_string()))
                .collect();
            expected.sort_by(|x, y| x.0.cmp(&y.0));
            assert_eq!(got, expected);
        }
    };
    use RecordState::{Enrolled, Revoked, Rotated as Away};
    records([Away, Away, Enrolled]).await;
    for old in [&a, &b] {
        let d = enroll(state, old, "auto").await;
        assert!(
            matches!(d, Decision::Refuse(c, _) if c == outpost::enroll::codes::NODE_REVOKED),
            "{d:?}"
        );
    }
    assert!(matches!(
        enroll(state, &c, "auto").await,
        Decision::Answer(r) if r.state == Enrolled
    ));

    state
        .revoke_node("node:r", T0 + 10, "admin:test", &retired)
        .await
        .unwrap()
        .expect("trusted");
    records([Revoked, Revoked, Revoked]).await;
    let newest = state
        .revoked_node("node:r")
        .await
        .unwrap()
        .expect("retired");
    assert_eq!(newest.document, c);
    for old in [&a, &b, &c] {
        let d = enroll(state, old, "auto").await;
        assert!(
            matches!(d, Decision::Refuse(c, _) if c == outpost::enroll::codes::NODE_REVOKED),
            "{d:?}"
        );
    }
}

/// A hand edit of the trust store (`outpost trust add|rm` on the gateway host) commits
/// the caller's audit entries with the trust rows: both are there at once, with no
/// second write to make, pending after what was pending before, and survive a restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_trust_save_commits_its_audit_entries_pending_with_the_trust_change() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    state
        .enroll_token_add(token("auto", Approve::Auto), &entry("created auto"))
        .await
        .unwrap();
    let (_, f) = peer("node:f", "node", "2026-11-20T06:00:00Z");
    enroll(state, &f, "auto").await;
    let mut trust = state.load_trust().unwrap();
    let (_, a) = peer("node:a", "node", "2026-11-20T06:00:00Z");
    let (_, b) = peer("node:b", "node", "2026-11-20T06:00:00Z");
    let rights = outpost::envelope::Rights {
        send: true,
        issue: false,
    };
    trust.add(a, rights).unwrap();
    trust.add(b, rights).unwrap();
    e.clock.advance_ms(7);
    let added = [entry("trusted node:a"), entry("trusted node:b")];
    save_trust(state, &trust, &added).await;
    assert_eq!(state.load_trust().unwrap(), trust);
    let p = pending(state).await;
    assert_eq!(
        details(&p),
        [
            "created auto",
            "node:f enrolled new auto",
            "trusted node:a",
            "trusted node:b"
        ]
    );
    assert_eq!(
        p[2].entry,
        AuditEntry::from_record(0, T0 + 7, added[0].clone())
    );
    assert!(p.windows(2).all(|w| w[0].seq < w[1].seq), "oldest first");

    // A save with no entries adds none; one with an entry, after the rest.
    trust.remove("node:b");
    save_trust(state, &trust, &[]).await;
    assert_eq!(pending(state).await.len(), 4);
    trust.remove("node:a");
    save_trust(state, &trust, &[entry("removed node:a")]).await;
    let want = [
        "created auto",
        "node:f enrolled new auto",
        "trusted node:a",
        "trusted node:b",
        "removed node:a",
    ];
    let e = e.reopen().await;
    let state = &*e.state;
    assert_eq!(state.load_trust().unwrap(), trust);
    let p = pending(state).await;
    assert_eq!(details(&p), want);
    // They are appended like any decision's.
    let (ext, seqs) = extension(0, &p);
    assert!(state.audit_append_pending(GW, ext, &seqs).await.unwrap());
    assert!(pending(state).await.is_empty());
    assert_eq!(state.audit_size(GW).await.unwrap(), 5);
}
