//! Queue order, acknowledgements, redelivery, batch limits, unique ids, job bindings and command keys.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_hands_out_a_nodes_messages_in_queue_order_and_an_ack_removes_them() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let queued = [
        state.queue_command(command("node:a", "a1"), None).await,
        state.forward(command("node:a", "a2")).await,
        state
            .queue_command(
                ForNode {
                    priority: 5,
                    ..command("node:a", "urgent")
                },
                None,
            )
            .await,
        state.queue_command(command("node:b", "b1"), None).await,
    ];
    assert!(
        queued.iter().all(|q| q == &Ok(Queued::Queued)),
        "{queued:?}"
    );
    assert_eq!(
        state
            .message_status("a1")
            .await
            .unwrap()
            .map(|s| (s.state, s.queue, s.peer)),
        Some((MessageState::Queued, QUEUE_TO_NODE.into(), "node:a".into()))
    );

    // Priority first, then arrival; the envelopes exactly as queued.
    let batch = pull(state, "node:a").await;
    assert_eq!(ids(&batch), ["urgent", "a1", "a2"]);
    assert_eq!(batch.pending, 3);
    assert!(!batch.superseded);
    assert_eq!(
        batch.deliveries[1].envelope,
        command("node:a", "a1").envelope
    );
    assert_eq!(state_of(state, "a1").await, Some(MessageState::Delivering));
    assert_eq!(ids(&pull(state, "node:b").await), ["b1"]);

    // An id acknowledged twice is removed once; another node's ack removes nothing.
    assert_eq!(
        state.ack("node:b", delivered(&["a2"])).await.unwrap(),
        Vec::<String>::new()
    );
    let removed = state
        .ack("node:a", delivered(&["urgent", "a1", "urgent"]))
        .await
        .unwrap();
    assert_eq!(sorted(removed), ["a1", "urgent"]);
    assert_eq!(state_of(state, "a1").await, Some(MessageState::Delivered));
    let batch = pull(state, "node:a").await;
    assert_eq!(ids(&batch), ["a2"]);
    assert_eq!(batch.pending, 1);

    // A refusal removes the message too, with the node's code as the reason.
    let refused = NodeAck {
        delivered: Vec::new(),
        rejected: vec![("a2".into(), "bad_payload".into())],
        events: (0, Vec::new()),
    };
    assert_eq!(state.ack("node:a", refused).await.unwrap(), ["a2"]);
    let status = state.message_status("a2").await.unwrap().unwrap();
    assert_eq!(status.state, MessageState::Rejected);
    assert_eq!(status.reason.as_deref(), Some("bad_payload"));
    assert!(pull(state, "node:a").await.deliveries.is_empty());
    assert_eq!(ids(&pull(state, "node:b").await), ["b1"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn what_is_not_acknowledged_is_handed_out_again_and_a_superseded_pull_hands_out_nothing() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    for id in ["m1", "m2"] {
        let q = state.queue_command(command("node:a", id), None).await;
        assert_eq!(q.unwrap(), Queued::Queued);
    }
    let first = state.begin_pull("node:a").await.unwrap();
    let batch = state
        .take_batch("node:a", take(first, 10, 1 << 20, None))
        .await
        .unwrap();
    assert_eq!(ids(&batch), ["m1", "m2"]);

    // No ack came: the node's next pull gets both again; the older pull gets nothing.
    let second = state.begin_pull("node:a").await.unwrap();
    assert!(second > first, "pull {second} after {first}");
    let stale = state
        .take_batch("node:a", take(first, 10, 1 << 20, None))
        .await
        .unwrap();
    assert!(stale.superseded);
    assert!(stale.deliveries.is_empty());
    let again = state
        .take_batch("node:a", take(second, 10, 1 << 20, None))
        .await
        .unwrap();
    assert!(!again.superseded);
    assert_eq!(ids(&again), ["m1", "m2"]);
    // Another node's pulls are its own.
    let other = state.begin_pull("node:b").await.unwrap();
    let b = state.take_batch("node:b", take(other, 10, 1 << 20, None));
    assert!(!b.await.unwrap().superseded);
    let again = state.take_batch("node:a", take(second, 10, 1 << 20, None));
    assert!(!again.await.unwrap().superseded);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_holds_at_most_max_messages_and_about_max_bytes_but_always_one() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    for id in ["m1", "m2", "m3"] {
        let q = state.queue_command(command("node:a", id), None).await;
        assert_eq!(q.unwrap(), Queued::Queued);
    }
    let size = command("node:a", "m1").envelope.len();
    let n = state.begin_pull("node:a").await.unwrap();
    let batch = |max, max_bytes| state.take_batch("node:a", take(n, max, max_bytes, None));
    assert_eq!(ids(&batch(2, 1 << 20).await.unwrap()), ["m1", "m2"]);
    assert_eq!(ids(&batch(10, 1).await.unwrap()), ["m1"]);
    assert_eq!(ids(&batch(10, 2 * size).await.unwrap()), ["m1", "m2"]);
    assert_eq!(ids(&batch(10, 1 << 20).await.unwrap()), ["m1", "m2", "m3"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pipelining_node_gets_its_next_batch_after_the_previous_one_while_that_is_unacknowledged()
{
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    for id in ["m1", "m2", "m3", "m4"] {
        let q = state.queue_command(command("node:a", id), None).await;
        assert_eq!(q.unwrap(), Queued::Queued);
    }
    let n = state.begin_pull("node:a").await.unwrap();
    let batch = |after| state.take_batch("node:a", take(n, 2, 1 << 20, after));
    assert_eq!(ids(&batch(None).await.unwrap()), ["m1", "m2"]);
    assert_eq!(ids(&batch(Some("m2")).await.unwrap()), ["m3", "m4"]);
    assert!(batch(Some("m4")).await.unwrap().deliveries.is_empty());
    // Once `after` is no longer queued, the batch begins at the queue's head.
    let removed = state.ack("node:a", delivered(&["m1", "m2"])).await;
    assert_eq!(sorted(removed.unwrap()), ["m1", "m2"]);
    assert_eq!(ids(&batch(Some("m2")).await.unwrap()), ["m3", "m4"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_id_is_taken_once_whichever_way_it_was_queued_and_after_its_delivery() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let q = state.queue_command(command("node:a", "m1"), None).await;
    assert_eq!(q.unwrap(), Queued::Queued);
    let other = ForNode {
        envelope: b"{\"other\":true}".to_vec(),
        ..command("node:b", "m1")
    };
    let q = state.queue_command(other.clone(), None).await;
    assert_eq!(q.unwrap(), Queued::Duplicate);
    assert_eq!(state.forward(other).await.unwrap(), Queued::Duplicate);
    assert!(pull(state, "node:b").await.deliveries.is_empty());
    let batch = pull(state, "node:a").await;
    assert_eq!(ids(&batch), ["m1"]);
    assert_eq!(
        batch.deliveries[0].envelope,
        command("node:a", "m1").envelope
    );

    // Delivered: still known.
    let removed = state.ack("node:a", delivered(&["m1"])).await.unwrap();
    assert_eq!(removed, ["m1"]);
    let q = state.queue_command(command("node:a", "m1"), None).await;
    assert_eq!(q.unwrap(), Queued::Duplicate);
    assert!(pull(state, "node:a").await.deliveries.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ack_changes_nothing_for_ids_never_queued_for_that_node() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    for id in ["m0", "m1"] {
        let q = state.queue_command(command("node:a", id), None).await;
        assert_eq!(q.unwrap(), Queued::Queued);
    }
    assert_eq!(ids(&pull(state, "node:a").await), ["m0", "m1"]);
    let removed = state.ack("node:a", delivered(&["m0"])).await.unwrap();
    assert_eq!(removed, ["m0"]);
    let stray = NodeAck {
        delivered: vec!["never".into()],
        rejected: vec![
            ("m0".into(), "bad".into()),
            ("m1".into(), "bad".into()),
            ("unknown".into(), "bad".into()),
        ],
        events: (0, Vec::new()),
    };
    assert_eq!(
        state.ack("node:b", stray).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(state_of(state, "m0").await, Some(MessageState::Delivered));
    assert_eq!(state_of(state, "m1").await, Some(MessageState::Delivering));
    assert_eq!(state.message_status("unknown").await.unwrap(), None);
    assert_eq!(state.message_status("never").await.unwrap(), None);
    // Ids nobody queued stay free.
    for id in ["never", "unknown"] {
        let q = state.queue_command(command("node:a", id), None).await;
        assert_eq!(q.unwrap(), Queued::Queued, "{id}");
    }
    assert_eq!(
        ids(&pull(state, "node:a").await),
        ["m1", "never", "unknown"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_binding_is_stored_with_its_command_or_not_at_all() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let job = |key: &str, message_id: &str| NewJob {
        key: key.into(),
        record: JobRecord {
            message_id: message_id.into(),
            tool_name: "echo".into(),
            args_sha256: "00".into(),
        },
    };
    let k1 = job_key("node:a", "alice", "job-1");
    assert_ne!(k1, job_key("node:a", "bob", "job-1"), "scoped per caller");
    assert_ne!(k1, job_key("node:b", "alice", "job-1"), "scoped per node");
    let q = state
        .queue_command(command("node:a", "r1"), Some(job(&k1, "r1")))
        .await;
    assert_eq!(q.unwrap(), Queued::Queued);
    assert_eq!(state.job(&k1).await.unwrap(), Some(job(&k1, "r1").record));
    assert_eq!(
        state.request_node("r1").await.unwrap().as_deref(),
        Some("node:a")
    );
    assert_eq!(state.job("no such key").await.unwrap(), None);
    assert_eq!(state.request_node("no such request").await.unwrap(), None);

    // A message id already taken: nothing is written, the job binding included.
    let q = state.queue_command(command("node:a", "plain"), None).await;
    assert_eq!(q.unwrap(), Queued::Queued);
    let k2 = job_key("node:b", "alice", "job-2");
    let q = state
        .queue_command(command("node:b", "plain"), Some(job(&k2, "plain")))
        .await;
    assert_eq!(q.unwrap(), Queued::Duplicate);
    assert_eq!(
        state.job(&k2).await.unwrap(),
        None,
        "a binding without its command"
    );
    assert_eq!(state.request_node("plain").await.unwrap(), None);
    assert!(pull(state, "node:b").await.deliveries.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_key_is_stored_with_its_command_only_and_kept_until_its_time() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let key = |id: &str| CommandKey {
        message_id: id.into(),
        subject: "alice".into(),
        request_sha256: "00".into(),
        expires_at_ms: T0 + MINUTE_MS,
        keep_until_ms: T0 + 10 * MINUTE_MS,
    };
    let q = state.queue_keyed_command(command("node:a", "k1"), key("k1"));
    assert_eq!(q.await.unwrap(), Queued::Queued);
    assert_eq!(state.command_key("k1").await.unwrap(), Some(key("k1")));
    let q = state.queue_keyed_command(command("node:a", "k1"), key("k1"));
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    // A message id already taken (here by a forward): the key is not written.
    let q = state.forward(command("node:a", "taken")).await;
    assert_eq!(q.unwrap(), Queued::Queued);
    let q = state.queue_keyed_command(command("node:a", "taken"), key("taken"));
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    assert_eq!(state.command_key("taken").await.unwrap(), None);
    assert_eq!(ids(&pull(state, "node:a").await), ["k1", "taken"]);
    // Kept past the command's expiry, until its keep-until.
    e.clock.advance_ms(5 * MINUTE_MS);
    state.sweep_expired().await.unwrap();
    assert_eq!(state.command_key("k1").await.unwrap(), Some(key("k1")));
    e.clock.advance_ms(5 * MINUTE_MS);
    assert_eq!(state.command_key("k1").await.unwrap(), None);
}
