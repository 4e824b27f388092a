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
