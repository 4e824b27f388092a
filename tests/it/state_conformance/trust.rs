//! The trust store, key rotations, enrollment tokens, enrollments and retirements.

use super::*;

/// A peer's keys and document, made at a fixed date.
pub(super) fn peer(node_id: &str, role: &str, at: &str) -> (Keys, IdentityDocument) {
    let keys = Keys::generate();
    let doc = IdentityDocument::new(node_id, role, &keys, at);
    (keys, doc)
}

const SEND: Rights = Rights {
    send: true,
    issue: false,
};

/// A holder of the trust store as the trust cache is: the version it holds and its copy.
#[derive(Default)]
struct Held(Option<u64>, TrustStore);

impl Held {
    /// Ask the state; true when it answered a change (applied to the copy).
    fn check(&mut self, state: &dyn GatewayState) -> bool {
        match state.load_trust_since(self.0).unwrap() {
            None => false,
            Some((v, update)) => {
                update.apply_to(&mut self.1);
                self.0 = Some(v);
                true
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trust_store_round_trips_and_its_version_moves_only_when_it_changes() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    assert!(state.load_trust().unwrap().is_empty());
    let mut held = Held::default();
    assert!(held.check(state), "none held yet");
    assert!(held.1.is_empty());
    let v0 = held.0;

    let mut trust = TrustStore::new();
    let (_, admin) = peer("gateway:other", "gateway", "2026-11-20T06:00:00Z");
    let (_, node) = peer("node:a", "node", "2026-11-20T06:00:00Z");
    let issuer = Rights {
        send: false,
        issue: true,
    };
    trust.add(admin, issuer).unwrap();
    trust.add(node, SEND).unwrap();
    save_trust(state, &trust, &[]).await;
    assert_eq!(state.load_trust().unwrap(), trust);
    assert!(held.check(state), "changed");
    assert_ne!(held.0, v0);
    assert_eq!(held.1, trust);
    assert!(!held.check(state));

    // The same peers saved again: unchanged.
    save_trust(state, &trust, &[]).await;
    assert!(!held.check(state));

    // Other rights, then a peer removed: each a change.
    trust
        .add(trust.get("node:a").unwrap().doc.clone(), Rights::default())
        .unwrap();
    save_trust(state, &trust, &[]).await;
    let v1 = held.0;
    assert!(held.check(state), "rights changed");
    assert_ne!(held.0, v1);
    assert_eq!(held.1, trust);
    trust.remove("node:a");
    save_trust(state, &trust, &[]).await;
    let v2 = held.0;
    assert!(held.check(state), "peer removed");
    assert_ne!(held.0, v2);
    assert_eq!(held.1, trust);
    // A holder that knows nothing reads the same peers.
    let mut fresh = Held::default();
    assert!(fresh.check(state));
    assert_eq!(fresh.1, trust);

    let e = e.reopen().await;
    assert_eq!(e.state.load_trust().unwrap(), trust);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_key_rotation_is_applied_once_and_survives_a_restart() {
    let Some(e) = Engine::open().await else {
        return;
    };
    const GRACE_MS: u64 = 3_600_000;
    let (old, doc) = peer("node:r", "node", "2026-11-20T06:00:00Z");
    let mut trust = TrustStore::new();
    trust.add(doc, SEND).unwrap();
    save_trust(&*e.state, &trust, &[]).await;
    let mut held = Held::default();
    assert!(held.check(&*e.state));

    let new = Keys::generate();
    let new_doc = IdentityDocument::new("node:r", "node", &new, "2026-11-27T06:00:00Z");
    let rotation = KeyRotation::new(&old, &new, new_doc.clone());
    let applied = e
        .state
        .rotate_node(
            &rotation.new_doc.node_id,
            &rotation,
            T0,
            GRACE_MS,
            &entry("rotate"),
        )
        .await
        .unwrap();
    assert_eq!(applied, Ok(Rotated::Applied));
    let rotated = e
        .state
        .load_trust()
        .unwrap()
        .get("node:r")
        .cloned()
        .unwrap();
    assert_eq!(rotated.doc, new_doc);
    assert_eq!(rotated.rights, SEND);
    assert_eq!(rotated.previous.as_ref().unwrap().until_ms, T0 + GRACE_MS);
    assert_eq!(rotated.key_history(), [old.sign_pk(), new.sign_pk()]);
    let signers: Vec<_> = rotated.sign_keys(T0).copied().collect();
    assert_eq!(signers, [new.sign_pk(), old.sign_pk()]);
    assert!(held.check(&*e.state), "a change");
    assert_eq!(held.1, e.state.load_trust().unwrap());

    // A retry (its answer was lost) changes nothing, not even the grace.
    let again = e
        .state
        .rotate_node(
            &rotation.new_doc.node_id,
            &rotation,
            T0 + 1_000,
            GRACE_MS,
            &entry("rotate"),
        )
        .await;
    assert_eq!(again.unwrap(), Ok(Rotated::AlreadyApplied));
    let peer_now = e.state.load_trust().unwrap().get("node:r").cloned();
    assert_eq!(peer_now.as_ref(), Some(&rotated));

    // The retired key cannot rotate again; an unknown peer cannot rotate at all.
    let other = Keys::generate();
    let other_doc = IdentityDocument::new("node:r", "node", &other, "2026-11-28T06:00:00Z");
    let stale = KeyRotation::new(&old, &other, other_doc);
    let refused = e
        .state
        .rotate_node(
            &stale.new_doc.node_id,
            &stale,
            T0,
            GRACE_MS,
            &entry("rotate"),
        )
        .await
        .unwrap();
    assert_eq!(refused, Err(RotationError::Stale("node:r".into())));
    let (stranger, _) = peer("node:x", "node", "2026-11-20T06:00:00Z");
    let stranger_doc = IdentityDocument::new("node:x", "node", &other, "2026-11-28T06:00:00Z");
    let unknown = KeyRotation::new(&stranger, &other, stranger_doc);
    let refused = e
        .state
        .rotate_node(
            &unknown.new_doc.node_id,
            &unknown,
            T0,
            GRACE_MS,
            &entry("rotate"),
        )
        .await
        .unwrap();
    assert_eq!(refused, Err(RotationError::UnknownPeer("node:x".into())));
    let peer_now = e.state.load_trust().unwrap().get("node:r").cloned();
    assert_eq!(peer_now.as_ref(), Some(&rotated));

    let e = e.reopen().await;
    let reloaded = e.state.load_trust().unwrap().get("node:r").cloned();
    assert_eq!(reloaded.as_ref(), Some(&rotated));
    let again = e
        .state
        .rotate_node(
            &rotation.new_doc.node_id,
            &rotation,
            T0 + 2_000,
            GRACE_MS,
            &entry("rotate"),
        )
        .await;
    assert_eq!(again.unwrap(), Ok(Rotated::AlreadyApplied));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gateways_own_rotation_keeps_its_first_deadline_until_a_newer_statement() {
    let Some(e) = Engine::open().await else {
        return;
    };
    assert_eq!(e.state.gateway_rotation().await.unwrap(), None);
    let (k0, _) = peer("gateway:main", "gateway", "2026-11-20T06:00:00Z");
    let (k1, d1) = peer("gateway:main", "gateway", "2026-11-27T06:00:00Z");
    let (k2, d2) = peer("gateway:main", "gateway", "2026-11-28T06:00:00Z");
    let first = KeyRotation::new(&k0, &k1, d1);
    e.state
        .put_gateway_rotation(&first, T0 + 1_000, &entry("rotate"))
        .await
        .unwrap();
    let held = e.state.gateway_rotation().await.unwrap();
    assert_eq!(held, Some((first.clone(), T0 + 1_000)));
    e.state
        .put_gateway_rotation(&first, T0 + 9_000, &entry("rotate"))
        .await
        .unwrap();
    let held = e.state.gateway_rotation().await.unwrap();
    assert_eq!(held, Some((first.clone(), T0 + 1_000)));
    let second = KeyRotation::new(&k1, &k2, d2);
    e.state
        .put_gateway_rotation(&second, T0 + 5_000, &entry("rotate"))
        .await
        .unwrap();
    let held = e.state.gateway_rotation().await.unwrap();
    assert_eq!(held, Some((second.clone(), T0 + 5_000)));
    let e = e.reopen().await;
    let held = e.state.gateway_rotation().await.unwrap();
    assert_eq!(held, Some((second, T0 + 5_000)));
}

pub(crate) fn token(id: &str, approve: Approve) -> TokenRecord {
    TokenRecord {
        claims: TokenClaims {
            v: 1,
            id: id.into(),
            gateway_id: "gateway:main".into(),
            gateway_fp: "fp".into(),
            tls_spki_sha256: None,
            expires_at_ms: T0 + 3_600_000,
            max_uses: 5,
            node_prefix: None,
            approve,
        },
        created_at_ms: T0,
        revoked: false,
        uses: 0,
        labels: Default::default(),
        tenant: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn enrollment_tokens_are_listed_with_their_uses_and_revoked_once() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    assert!(state.enroll_tokens().await.unwrap().is_empty());
    for id in ["tok-1", "tok-2"] {
        state
            .enroll_token_add(token(id, Approve::Auto), &entry(&format!("created {id}")))
            .await
            .unwrap();
    }
    let mut listed = state.enroll_tokens().await.unwrap();
    listed.sort_by(|a, b| a.claims.id.cmp(&b.claims.id));
    assert_eq!(
        listed,
        [token("tok-1", Approve::Auto), token("tok-2", Approve::Auto)]
    );

    let revoke = |id: &'static str| async move {
        let audit = entry(&format!("revoked {id}"));
        state.enroll_token_revoke(id, &audit).await.unwrap()
    };
    assert_eq!(revoke("tok-1").await, Some(true));
    assert_eq!(revoke("tok-1").await, Some(false));
    assert_eq!(revoke("tok-9").await, None);
    // Each token made, and the one revocation that changed something, committed its
    // audit entry with it.
    let said: Vec<String> = state
        .audit_pending(10)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.entry.detail.unwrap_or_default())
        .collect();
    assert_eq!(said, ["created tok-1", "created tok-2", "revoked tok-1"]);
    let revoked: BTreeSet<(String, bool)> = state
        .enroll_tokens()
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.claims.id, t.revoked))
        .collect();
    assert_eq!(
        revoked,
        BTreeSet::from([("tok-1".into(), true), ("tok-2".into(), false)])
    );
}

/// Enroll `doc` with token `token_id`, deciding as the gateway does.
pub(super) async fn enroll(
    state: &dyn GatewayState,
    doc: &IdentityDocument,
    token_id: &str,
) -> Decision {
    let token = token_id.to_string();
    let decide =
        move |f: &outpost::gateway::enroll::Facts<'_>| decide(f, &token, &Default::default());
    state.enroll(doc, token_id, &[], &decide).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_enrollment_trusts_the_node_counts_a_use_and_a_retirement_refuses_its_messages() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    state
        .enroll_token_add(token("auto", Approve::Auto), &entry("created"))
        .await
        .unwrap();
    state
        .enroll_token_add(token("manual", Approve::Manual), &entry("created"))
        .await
        .unwrap();

    // Auto approval: trusted at once, a use counted; the same device again is answered.
    let (_, f) = peer("node:f", "node", "2026-11-20T06:00:00Z");
    let Decision::Record {
        record, consume, ..
    } = enroll(state, &f, "auto").await
    else {
        panic!("not recorded");
    };
    assert!(consume);
    assert_eq!(record.state, RecordState::Enrolled);
    let trusted = state.load_trust().unwrap().get("node:f").cloned().unwrap();
    assert_eq!((trusted.doc, trusted.rights), (f.clone(), NODE_RIGHTS));
    assert_eq!(
        enroll(state, &f, "auto").await,
        Decision::Answer(record.clone())
    );
    let uses: HashMap<String, u64> = state
        .enroll_tokens()
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.claims.id, t.uses))
        .collect();
    assert_eq!(
        uses,
        HashMap::from([("auto".into(), 1), ("manual".into(), 0)])
    );

    // Manual approval: pending until an operator approves (or rejects).
    let (_, g) = peer("node:g", "node", "2026-11-20T06:00:00Z");
    let (_, h) = peer("node:h", "node", "2026-11-20T06:00:00Z");
    for doc in [&g, &h] {
        let Decision::Record { record, .. } = enroll(state, doc, "manual").await else {
            panic!("not recorded");
        };
        assert_eq!(record.state, RecordState::Pending);
    }
    assert!(state.load_trust().unwrap().get("node:g").is_none());
    let approved = state
        .settle_enrollment("node:g", true, T0 + 5, "admin:test", &settled)
        .await
        .unwrap();
    let approved = approved.expect("pending");
    assert_eq!(approved.state, RecordState::Enrolled);
    assert_eq!(approved.decided_at_ms, Some(T0 + 5));
    assert_eq!(approved.decided_by.as_deref(), Some("admin:test"));
    assert_eq!(state.load_trust().unwrap().get("node:g").unwrap().doc, g);
    assert_eq!(
        state
            .settle_enrollment("node:g", true, T0 + 6, "admin:test", &settled)
            .await
            .unwrap(),
        None
    );
    let rejected = state
        .settle_enrollment("node:h", false, T0 + 7, "admin:test", &settled)
        .await
        .unwrap();
    assert_eq!(rejected.map(|r| r.state), Some(RecordState::Rejected));
    assert!(state.load_trust().unwrap().get("node:h").is_none());
    let mut records: Vec<(String, RecordState)> = state
        .enrollments()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.node_id, r.state))
        .collect();
    records.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        records,
        [
            ("node:f".into(), RecordState::Enrolled),
            ("node:g".into(), RecordState::Enrolled),
            ("node:h".into(), RecordState::Rejected),
        ]
    );

    // Retirement: out of the trust store, its queue refused with `node_revoked`.
    for id in ["f1", "f2"] {
        let q = state.queue_command(command("node:f", id), None).await;
        assert_eq!(q.unwrap(), Queued::Queued);
    }
    assert_eq!(state.revoked_node("node:f").await.unwrap(), None);
    let refused = state
        .revoke_node("node:f", T0 + 10, "admin:test", &retired)
        .await
        .unwrap();
    assert_eq!(sorted(refused.expect("trusted")), ["f1", "f2"]);
    assert!(state.load_trust().unwrap().get("node:f").is_none());
    // Who retired it is kept on the record (what `trust add` and `command` tell later).
    let records = state.enrollments().await.unwrap();
    let retired_record = records
        .iter()
        .find(|r| r.node_id == "node:f" && r.state == RecordState::Revoked)
        .expect("the retired record");
    assert_eq!(retired_record.decided_by.as_deref(), Some("admin:test"));
    let status = state.message_status("f1").await.unwrap().unwrap();
    assert_eq!(status.state, MessageState::Rejected);
    assert_eq!(
        status.reason.as_deref(),
        Some(outpost::enroll::codes::NODE_REVOKED)
    );
    assert!(pull(state, "node:f").await.deliveries.is_empty());
    // The newest retirement, with when and by whom (what the node is told).
    let newest = state
        .revoked_node("node:f")
        .await
        .unwrap()
        .expect("retired");
    assert_eq!(newest.document, f);
    assert_eq!(
        (newest.decided_at_ms, newest.decided_by.as_deref()),
        (Some(T0 + 10), Some("admin:test"))
    );
    assert_eq!(
        state
            .revoke_node("node:f", T0 + 11, "admin:test", &retired)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        state
            .revoke_node("node:nobody", T0 + 11, "admin:test", &retired)
            .await
            .unwrap(),
        None
    );
}

/// A rejected device can be let in after all (issue 38: 11): approving an id with no
/// pending record approves its newest rejected one; a rejection needs a pending one.
/// A rejected key of an id trusted under another key is approved as a re-key: the key
/// it replaces reads revoked.
#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_enrollment_can_be_approved_later_as_what_it_is_now() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    state
        .enroll_token_add(token("manual", Approve::Manual), &entry("created"))
        .await
        .unwrap();
    let (_, h) = peer("node:h", "node", "2026-11-20T06:00:00Z");
    enroll(state, &h, "manual").await;
    let r = state.settle_enrollment("node:h", false, T0 + 1, "admin:test", &settled);
    assert_eq!(
        r.await.unwrap().map(|r| r.state),
        Some(RecordState::Rejected)
    );
    let again = state.settle_enrollment("node:h", false, T0 + 2, "admin:test", &settled);
    assert_eq!(again.await.unwrap(), None, "nothing pending to reject");
    let approved = state
        .settle_enrollment("node:h", true, T0 + 3, "admin:test", &settled)
        .await
        .unwrap()
        .expect("the rejected record");
    assert_eq!(
        (approved.state, approved.decided_at_ms),
        (RecordState::Enrolled, Some(T0 + 3))
    );
    assert_eq!(state.load_trust().unwrap().get("node:h").unwrap().doc, h);

    // A second key for node:h, rejected, then approved: a re-key of the trusted one.
    let (_, h2) = peer("node:h", "node", "2026-11-21T06:00:00Z");
    let Decision::Record { record, .. } = enroll(state, &h2, "manual").await else {
        panic!("not recorded");
    };
    assert_eq!(record.state, RecordState::Pending);
    state
        .settle_enrollment("node:h", false, T0 + 4, "admin:test", &settled)
        .await
        .unwrap();
    let rekey = state
        .settle_enrollment("node:h", true, T0 + 5, "admin:test", &settled)
        .await
        .unwrap()
        .expect("the rejected re-key");
    assert_eq!(rekey.kind.as_str(), "rekey");
    assert_eq!(state.load_trust().unwrap().get("node:h").unwrap().doc, h2);
    let mut states: Vec<(u64, String)> = state
        .enrollments()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.decided_at_ms.unwrap_or(0), format!("{:?}", r.state)))
        .collect();
    states.sort();
    assert_eq!(
        states,
        [(T0 + 5, "Enrolled".into()), (T0 + 5, "Revoked".into())]
    );
}

/// A hand edit (`outpost trust add|rm`) is applied to the peers as they are when it is
/// written: a node another writer trusted between the command's read and its write stays
/// (writing the command's whole copy deleted it, on PostgreSQL and the embedded store).
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_edit_keeps_what_another_writer_did_meanwhile() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let (_, a) = peer("node:a", "node", "2026-11-20T06:00:00Z");
    let mut start = TrustStore::new();
    start.add(a, SEND).unwrap();
    save_trust(state, &start, &[]).await;

    // The command reads the peers…
    let before = state.load_trust().unwrap();
    // …another writer trusts node:m and retires nothing…
    let (_, m) = peer("node:m", "node", "2026-11-20T06:00:00Z");
    let mut other = before.clone();
    other.add(m, SEND).unwrap();
    save_trust(state, &other, &[]).await;
    // …and the command writes its edit: node:x added, node:a removed.
    let (_, x) = peer("node:x", "node", "2026-11-20T06:00:00Z");
    let mut after = before.clone();
    after.add(x, SEND).unwrap();
    after.remove("node:a");
    let edit = outpost::gateway::storage::TrustEdit::between(&before, &after);
    state.save_trust(&edit, &[]).await.unwrap();

    let now = state.load_trust().unwrap();
    let ids: Vec<&str> = now.list().map(|p| p.doc.node_id.as_str()).collect();
    assert_eq!(ids, ["node:m", "node:x"], "node:m stays, node:a goes");
    let e = e.reopen().await;
    assert_eq!(e.state.load_trust().unwrap(), now);
}

/// PROTOCOL §18.1: a tenant's node rotates at its address; the node of the same id in
/// `default` keeps its key, and a statement applied at the other's address is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_nodes_rotation_changes_only_the_node_at_its_address() {
    let Some(e) = Engine::open().await else {
        return;
    };
    const GRACE_MS: u64 = 3_600_000;
    let (plain_keys, plain) = peer("node:r", "node", "2026-11-20T06:00:00Z");
    let (old, doc) = peer("node:r", "node", "2026-11-20T06:00:00Z");
    let mut trust = TrustStore::new();
    trust.add(plain, SEND).unwrap();
    trust.add_in(doc, SEND, Some("acme")).unwrap();
    save_trust(&*e.state, &trust, &[]).await;
    let before = e
        .state
        .load_trust()
        .unwrap()
        .get("node:r")
        .cloned()
        .unwrap();

    let new = Keys::generate();
    let new_doc = IdentityDocument::new("node:r", "node", &new, "2026-11-27T06:00:00Z");
    let rotation = KeyRotation::new(&old, &new, new_doc.clone());
    // At the plain node's address the statement is stale: its retired key is not that
    // node's.
    let refused = e
        .state
        .rotate_node("node:r", &rotation, T0, GRACE_MS, &entry("rotate"))
        .await
        .unwrap();
    assert_eq!(refused, Err(RotationError::Stale("node:r".into())));
    let applied = e
        .state
        .rotate_node("node:r@acme", &rotation, T0, GRACE_MS, &entry("rotate"))
        .await
        .unwrap();
    assert_eq!(applied, Ok(Rotated::Applied));
    let e = e.reopen().await;
    let now = e.state.load_trust().unwrap();
    let acme = now.get("node:r@acme").unwrap();
    assert_eq!(acme.doc, new_doc);
    assert_eq!(acme.tenant.as_deref(), Some("acme"));
    assert_eq!(acme.key_history(), [old.sign_pk(), new.sign_pk()]);
    assert_eq!(now.get("node:r"), Some(&before), "the plain node changed");
    assert_eq!(before.keys.sign, plain_keys.sign_pk());
    let again = e
        .state
        .rotate_node("node:r@acme", &rotation, T0 + 1, GRACE_MS, &entry("rotate"))
        .await;
    assert_eq!(again.unwrap(), Ok(Rotated::AlreadyApplied));
}
