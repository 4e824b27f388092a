//! Token revocations (with their audit entries), nodes' audit copies, time, readiness,
//! and what survives a restart.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn revoked_token_ids_get_growing_versions_and_are_listed_from_a_version_on() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    assert_eq!(
        state.revocations(0).await.unwrap(),
        RevocationList::default()
    );
    assert!(!state.is_revoked("j1").unwrap());
    let revoke = |jti: &'static str| async move {
        let audit = entry(&format!("revoked {jti}"));
        state.revoke(jti, &audit).await.unwrap()
    };
    let Revoked::Added { version: v1 } = revoke("j1").await else {
        panic!("j1 was not revoked before");
    };
    let Revoked::Added { version: v2 } = revoke("j2").await else {
        panic!("j2 was not revoked before");
    };
    assert!(0 < v1 && v1 < v2, "{v1} then {v2}");
    assert_eq!(revoke("j1").await, Revoked::Duplicate);
    // Each revocation that was added committed its audit entry with it; the repeat none.
    let pending: Vec<String> = state
        .audit_pending(10)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.entry.detail.unwrap_or_default())
        .collect();
    assert_eq!(pending, ["revoked j1", "revoked j2"]);
    let since = |v| async move {
        let list = state.revocations(v).await.unwrap();
        (sorted(list.revoked), list.version)
    };
    assert_eq!(since(0).await, (vec!["j1".into(), "j2".into()], v2));
    assert_eq!(since(v1).await, (vec!["j2".into()], v2));
    assert_eq!(since(v2).await, (vec![], v2));
    assert!(state.is_revoked("j1").unwrap());
    assert!(state.is_revoked("j2").unwrap());
    assert!(!state.is_revoked("j3").unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_audit_copy_grows_by_extensions_and_reads_back_in_order() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let entry = |i: u64| format!("entry {i}").into_bytes();
    assert!(state.audit_entries("node:a").await.unwrap().is_empty());
    assert_eq!(state.audit_size("node:a").await.unwrap(), 0);
    let extensions = [(0, 2), (2, 3), (3, 5)];
    for (start, end) in extensions {
        let ext = AuditExtension {
            start,
            entries: (start..end).map(entry).collect(),
            checkpoint_size: end,
            checkpoint: format!("checkpoint {end}"),
        };
        state.audit_extend("node:a", ext).await.unwrap();
    }
    let ext = AuditExtension {
        start: 0,
        entries: vec![b"b0".to_vec()],
        checkpoint_size: 1,
        checkpoint: "b at 1".into(),
    };
    state.audit_extend("node:b", ext).await.unwrap();

    let all: Vec<Vec<u8>> = (0..5).map(entry).collect();
    assert_eq!(state.audit_entries("node:a").await.unwrap(), all);
    assert_eq!(
        state.audit_entry("node:a", 3).await.unwrap(),
        Some(entry(3))
    );
    assert_eq!(state.audit_entry("node:a", 5).await.unwrap(), None);
    assert_eq!(state.audit_entry("node:c", 0).await.unwrap(), None);
    assert_eq!(state.audit_size("node:a").await.unwrap(), 5);
    let nodes: Vec<String> = ["node:a", "node:b", "node:c"].map(String::from).into();
    assert_eq!(
        state.audit_sizes(&nodes).await.unwrap(),
        HashMap::from([
            ("node:a".into(), 5),
            ("node:b".into(), 1),
            ("node:c".into(), 0)
        ])
    );
    assert_eq!(
        state.audit_checkpoints("node:a").await.unwrap(),
        [
            (2, "checkpoint 2".into()),
            (3, "checkpoint 3".into()),
            (5, "checkpoint 5".into())
        ]
    );
    assert_eq!(
        state.audit_checkpoints("node:b").await.unwrap(),
        [(1, "b at 1".into())]
    );
    let e = e.reopen().await;
    assert_eq!(e.state.audit_entries("node:a").await.unwrap(), all);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_state_keeps_the_time_it_was_given_and_is_ready_and_durable() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    assert_eq!(state.now_ms(), T0);
    e.clock.advance_ms(1_500);
    assert_eq!(state.now_ms(), T0 + 1_500);
    state.ready().await.unwrap();
    assert!(state.durable());
    // The replicas' part exactly where other processes share the state: on it, a first
    // signature is new and a repeat is not, and a peer lookup that missed can be
    // refreshed; a state one process writes has none of it.
    match (crate::GATEWAY_ENGINE, state.replicas()) {
        ("postgres", Some(replicas)) => {
            assert!(replicas.first_use(&[7; 64], T0 + MINUTE_MS).await.unwrap());
            assert!(!replicas.first_use(&[7; 64], T0 + MINUTE_MS).await.unwrap());
            replicas.refresh_peer("node:nobody").await.unwrap();
        }
        ("postgres", None) => panic!("a database-backed state has replicas"),
        (_, replicas) => assert!(replicas.is_none(), "the embedded state is one process's"),
    }
}

/// Queued messages survive a restart, in their order, with their ids still taken.
#[tokio::test(flavor = "multi_thread")]
async fn what_was_queued_survives_a_restart_in_order() {
    let Some(e) = Engine::open().await else {
        return;
    };
    for id in ["m1", "m2", "m3"] {
        let q = e.state.queue_command(command("node:a", id), None).await;
        assert_eq!(q.unwrap(), Queued::Queued);
    }
    let q = e.state.inbox_put(inbox_message("node:b", "i1")).await;
    assert_eq!(q.unwrap(), Queued::Queued);
    let removed = e.state.ack("node:a", delivered(&["m2"])).await.unwrap();
    assert_eq!(removed, ["m2"]);
    let e = e.reopen().await;
    let state = &*e.state;
    assert_eq!(ids(&pull(state, "node:a").await), ["m1", "m3"]);
    assert_eq!(state_of(state, "m2").await, Some(MessageState::Delivered));
    let q = state.queue_command(command("node:a", "m2"), None).await;
    assert_eq!(q.unwrap(), Queued::Duplicate);
    assert_eq!(state.inbox_list(None, 10).await.unwrap(), [b"i1".to_vec()]);
}
