//! Expiry and the sweep, one node's queue as listed, queue statistics.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_message_past_its_expiry_is_never_handed_out_and_the_sweep_expires_it_once() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let short = ForNode {
        expires_at_ms: T0 + 1_000,
        ..command("node:a", "short")
    };
    for m in [short, command("node:a", "long")] {
        assert_eq!(state.queue_command(m, None).await.unwrap(), Queued::Queued);
    }
    assert_eq!(ids(&pull(state, "node:a").await), ["short", "long"]);

    // At the expiry instant, before any sweep: neither pulled nor listed.
    e.clock.advance_ms(1_000);
    assert_eq!(ids(&pull(state, "node:a").await), ["long"]);
    let listed = state.queued_for("node:a", 10).await.unwrap();
    let listed: Vec<&str> = listed.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(listed, ["long"]);

    let expired = state.sweep_expired().await.unwrap();
    assert_eq!(
        expired,
        [ExpiredMessage {
            message_id: "short".into(),
            queue: QUEUE_TO_NODE.into(),
            peer: "node:a".into(),
            payload_type: "COMMAND".into(),
            expires_at_ms: T0 + 1_000,
        }]
    );
    assert!(state.sweep_expired().await.unwrap().is_empty());
    let status = state.message_status("short").await.unwrap().unwrap();
    assert_eq!(status.state, MessageState::Expired);
    assert_eq!(status.reason.as_deref(), Some(REASON_TIMEOUT));
    assert_eq!(
        state.ack("node:a", delivered(&["short"])).await.unwrap(),
        Vec::<String>::new()
    );
    // The id stays taken.
    let again = ForNode {
        expires_at_ms: T0 + MINUTE_MS,
        ..command("node:a", "short")
    };
    assert_eq!(
        state.queue_command(again, None).await.unwrap(),
        Queued::Duplicate
    );
    assert_eq!(ids(&pull(state, "node:a").await), ["long"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_for_lists_one_nodes_queue_in_pull_order_without_the_expired() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let msgs = [
        command("node:a", "first"),
        ForNode {
            expires_at_ms: T0 + 1_000,
            ..command("node:a", "short")
        },
        ForNode {
            priority: 5,
            ..command("node:a", "urgent")
        },
        command("node:b", "other"),
    ];
    for m in msgs {
        assert_eq!(state.queue_command(m, None).await.unwrap(), Queued::Queued);
    }
    let listed = |node: &'static str, limit| async move {
        let v: Vec<QueuedMessage> = state.queued_for(node, limit).await.unwrap();
        v.into_iter().map(|m| m.message_id).collect::<Vec<_>>()
    };
    assert_eq!(listed("node:a", 10).await, ["urgent", "first", "short"]);
    e.clock.advance_ms(1_000);
    let page = state.queued_for("node:a", 10).await.unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(
        (page[0].message_id.as_str(), page[0].priority),
        ("urgent", 5)
    );
    assert_eq!(page[1].payload_type, "COMMAND");
    assert_eq!(page[1].created_at_ms, T0);
    assert_eq!(page[1].expires_at_ms, T0 + MINUTE_MS);
    assert_eq!(listed("node:a", 1).await, ["urgent"]);
    assert_eq!(listed("node:b", 10).await, ["other"]);
    assert!(listed("node:c", 10).await.is_empty());
}

/// `(queue, peer) → depth` of the queues that hold something.
async fn depths(state: &dyn GatewayState) -> HashMap<(String, String), u64> {
    let stats = state.queue_stats().await.unwrap();
    stats
        .into_iter()
        .filter(|s| s.depth > 0)
        .map(|s| ((s.queue, s.peer), s.depth))
        .collect()
}

/// `(queue, peer)`, as [`depths`] keys them.
fn key(queue: &str, peer: &str) -> (String, String) {
    (queue.to_string(), peer.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_stats_count_what_waits_in_each_node_queue_and_each_senders_inbox() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    for m in [
        command("node:a", "a1"),
        command("node:a", "a2"),
        command("node:b", "b1"),
    ] {
        assert_eq!(state.queue_command(m, None).await.unwrap(), Queued::Queued);
    }
    for m in [inbox_message("node:a", "i1"), inbox_message("node:a", "i2")] {
        assert_eq!(state.inbox_put(m).await.unwrap(), Queued::Queued);
    }
    let expected = HashMap::from([
        (key(QUEUE_TO_NODE, "node:a"), 2),
        (key(QUEUE_TO_NODE, "node:b"), 1),
        (key(QUEUE_INBOX, "node:a"), 2),
    ]);
    assert_eq!(depths(state).await, expected);
    state.ack("node:a", delivered(&["a1"])).await.unwrap();
    state.inbox_ack("i1").await.unwrap();
    let expected = HashMap::from([
        (key(QUEUE_TO_NODE, "node:a"), 1),
        (key(QUEUE_TO_NODE, "node:b"), 1),
        (key(QUEUE_INBOX, "node:a"), 1),
    ]);
    assert_eq!(depths(state).await, expected);
}

/// `queue_stats` promises each queue's "head age", and [`outpost::store::QueueStat`]
/// says which message that is: "the message at the head of the queue (next to
/// deliver)" — here one of higher priority queued after an older one.
#[tokio::test(flavor = "multi_thread")]
async fn queue_stats_give_the_age_of_the_message_a_pull_hands_out_next() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let old = ForNode {
        created_at_ms: T0 - 30_000,
        ..command("node:a", "old")
    };
    let urgent = ForNode {
        priority: 5,
        created_at_ms: T0 - 10_000,
        ..command("node:a", "urgent")
    };
    for m in [old, urgent] {
        assert_eq!(state.queue_command(m, None).await.unwrap(), Queued::Queued);
    }
    assert_eq!(ids(&pull(state, "node:a").await), ["urgent", "old"]);
    let head_age = || async {
        let stats = state.queue_stats().await.unwrap();
        let s = stats
            .iter()
            .find(|s| s.queue == QUEUE_TO_NODE && s.peer == "node:a");
        s.map(|s| s.oldest_age_s)
    };
    assert_eq!(head_age().await, Some(10), "the head is `urgent`, 10 s old");
    state.ack("node:a", delivered(&["urgent"])).await.unwrap();
    assert_eq!(head_age().await, Some(30), "the head is `old`, 30 s old");
}
