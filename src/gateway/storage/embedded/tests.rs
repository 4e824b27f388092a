//! The embedded state's own tests (the shared suites run both engines: tests/it).

use super::*;
use crate::clock::ManualClock;

const T0: u64 = 1_780_000_000_000;

/// Found by the fault harness (scripts/chaos.py flap, docs/RELIABILITY.md F1): a
/// message that expired between two sweeps was still listed.
#[tokio::test]
async fn the_inbox_never_lists_a_message_past_its_expiry_even_before_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(
        dir.path(),
        crate::store::StoreOptions::default(),
        std::sync::Arc::new(clock.clone()),
    )
    .unwrap();
    let state = Embedded::new(store);
    for (id, ttl_ms) in [("short", 4_000), ("long", 86_400_000)] {
        let q = state
            .inbox_put(InboxMessage {
                from_node: "node:a".into(),
                message_id: id.into(),
                payload_type: "DATA".into(),
                priority: 0,
                created_at_ms: T0,
                expires_at_ms: T0 + ttl_ms,
                record: id.as_bytes().to_vec(),
                remember_until_ms: T0 + ttl_ms,
            })
            .await
            .unwrap();
        assert_eq!(q, Queued::Queued);
    }
    let listed = |rows: Vec<Vec<u8>>| -> Vec<String> {
        rows.into_iter()
            .map(|r| String::from_utf8(r).unwrap())
            .collect()
    };
    assert_eq!(
        listed(state.inbox_list(None, 10).await.unwrap()),
        ["short", "long"]
    );
    // Expired, and no sweep has run (none runs in this test).
    clock.advance_ms(4_000);
    assert_eq!(listed(state.inbox_list(None, 10).await.unwrap()), ["long"]);
}

fn command(id: &str, expires_at_ms: u64) -> ForNode {
    ForNode {
        node_id: "node:a".into(),
        message_id: id.into(),
        payload_type: "COMMAND".into(),
        priority: 0,
        created_at_ms: T0,
        expires_at_ms,
        envelope: b"{}".to_vec(),
        max_attempts: 0,
        event: None,
    }
}

fn key(id: &str, keep_until_ms: u64) -> CommandKey {
    CommandKey {
        message_id: id.into(),
        subject: "alice".into(),
        request_sha256: "00".into(),
        expires_at_ms: T0 + 1_000,
        keep_until_ms,
    }
}

/// Issue 25: a command's idempotency key is stored with it (and only with it), answered
/// while it is kept, then forgotten and swept.
#[tokio::test]
async fn a_command_key_is_stored_with_its_command_only_and_kept_until_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(
        dir.path(),
        crate::store::StoreOptions::default(),
        std::sync::Arc::new(clock.clone()),
    )
    .unwrap();
    let state = Embedded::new(store);
    let k = key("m1", T0 + 10_000);
    let q = state.queue_keyed_command(command("m1", T0 + 1_000), k.clone());
    assert_eq!(q.await.unwrap(), Queued::Queued);
    assert_eq!(state.command_key("m1").await.unwrap(), Some(k.clone()));
    let q = state.queue_keyed_command(command("m1", T0 + 1_000), k);
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    // A message id already taken (here by a forward): the key is not written.
    let fwd = state.forward(command("taken", T0 + 1_000)).await.unwrap();
    assert_eq!(fwd, Queued::Queued);
    let q = state.queue_keyed_command(command("taken", T0 + 1_000), key("taken", T0 + 10_000));
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    assert_eq!(state.command_key("taken").await.unwrap(), None);
    // Kept past the command's expiry, until its keep-until.
    clock.advance_ms(5_000);
    state.sweep_expired().await.unwrap();
    assert!(state.command_key("m1").await.unwrap().is_some());
    clock.advance_ms(5_000);
    assert_eq!(state.command_key("m1").await.unwrap(), None);
    state.sweep_expired().await.unwrap();
    assert_eq!(
        state
            .store
            .result_get(&format!("{RESULT_GW_COMMAND_KEY_PREFIX}m1"))
            .unwrap(),
        None
    );
}

/// The console's node page: what waits for one node, in pull order (priority first,
/// then arrival), other nodes' messages and what expired (before any sweep) left out.
#[tokio::test]
async fn queued_for_lists_one_nodes_queue_in_pull_order_without_the_expired() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(
        dir.path(),
        crate::store::StoreOptions::default(),
        std::sync::Arc::new(clock.clone()),
    )
    .unwrap();
    let state = Embedded::new(store);
    let urgent = ForNode {
        priority: 5,
        ..command("urgent", T0 + 60_000)
    };
    let other = ForNode {
        node_id: "node:b".into(),
        ..command("other", T0 + 60_000)
    };
    for m in [
        command("first", T0 + 60_000),
        command("short", T0 + 1_000),
        urgent,
        other,
    ] {
        assert_eq!(state.queue_command(m, None).await.unwrap(), Queued::Queued);
    }
    let ids = |v: Vec<QueuedMessage>| v.into_iter().map(|m| m.message_id).collect::<Vec<_>>();
    assert_eq!(
        ids(state.queued_for("node:a", 10).await.unwrap()),
        ["urgent", "first", "short"]
    );
    clock.advance_ms(1_000);
    let listed = state.queued_for("node:a", 10).await.unwrap();
    assert_eq!(ids(listed.clone()), ["urgent", "first"]);
    assert_eq!(listed[0].priority, 5);
    assert_eq!(listed[1].expires_at_ms, T0 + 60_000);
    assert_eq!(listed[1].payload_type, "COMMAND");
    assert_eq!(
        ids(state.queued_for("node:a", 1).await.unwrap()),
        ["urgent"]
    );
    assert_eq!(
        ids(state.queued_for("node:b", 10).await.unwrap()),
        ["other"]
    );
    assert!(state.queued_for("node:c", 10).await.unwrap().is_empty());
}
