//! The gateway's inbox and nodes' uploads.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_keeps_what_nodes_sent_in_order_until_an_operator_acknowledges_it() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    for (node, id) in [("node:a", "a1"), ("node:b", "b1"), ("node:a", "a2")] {
        let q = state.inbox_put(inbox_message(node, id)).await;
        assert_eq!(q.unwrap(), Queued::Queued, "{id}");
    }
    assert_eq!(
        state
            .inbox_put(inbox_message("node:a", "a1"))
            .await
            .unwrap(),
        Queued::Duplicate
    );
    let text = |rows: Vec<Vec<u8>>| -> Vec<String> {
        rows.into_iter()
            .map(|r| String::from_utf8(r).unwrap())
            .collect()
    };
    // Oldest first per sender (the order between senders is not promised).
    let all = text(state.inbox_list(None, 10).await.unwrap());
    assert_eq!(all.len(), 3, "{all:?}");
    let a: Vec<&String> = all.iter().filter(|r| r.starts_with('a')).collect();
    assert_eq!(a, ["a1", "a2"]);
    assert_eq!(
        text(state.inbox_list(Some("node:a"), 10).await.unwrap()),
        ["a1", "a2"]
    );
    assert_eq!(
        text(state.inbox_list(Some("node:a"), 1).await.unwrap()),
        ["a1"]
    );
    assert!(state
        .inbox_list(Some("node:c"), 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        state
            .message_status("a1")
            .await
            .unwrap()
            .map(|s| (s.state, s.queue, s.peer)),
        Some((MessageState::Queued, QUEUE_INBOX.into(), "node:a".into()))
    );

    assert_eq!(state.inbox_ack("a1").await.unwrap(), Some(true));
    assert_eq!(state.inbox_ack("a1").await.unwrap(), Some(false));
    assert_eq!(state.inbox_ack("nothing").await.unwrap(), None);
    assert_eq!(state_of(state, "a1").await, Some(MessageState::Delivered));
    assert_eq!(
        text(state.inbox_list(Some("node:a"), 10).await.unwrap()),
        ["a2"]
    );
    // Its id is still refused as a replay.
    assert!(state.upload_seen("a1").await.unwrap());
    assert_eq!(
        state
            .inbox_put(inbox_message("node:a", "a1"))
            .await
            .unwrap(),
        Queued::Duplicate
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inbox_message_past_its_expiry_is_never_listed_and_the_sweep_expires_it_once() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let short = InboxMessage {
        expires_at_ms: T0 + 4_000,
        ..inbox_message("node:a", "short")
    };
    for m in [short, inbox_message("node:a", "long")] {
        assert_eq!(state.inbox_put(m).await.unwrap(), Queued::Queued);
    }
    e.clock.advance_ms(4_000);
    let listed = state.inbox_list(None, 10).await.unwrap();
    assert_eq!(listed, [b"long".to_vec()]);
    let listed = state.inbox_list(Some("node:a"), 10).await.unwrap();
    assert_eq!(listed, [b"long".to_vec()]);
    let expired = state.sweep_expired().await.unwrap();
    let expired: Vec<(&str, &str, &str)> = expired
        .iter()
        .map(|x| (x.message_id.as_str(), x.queue.as_str(), x.peer.as_str()))
        .collect();
    assert_eq!(expired, [("short", QUEUE_INBOX, "node:a")]);
    assert!(state.sweep_expired().await.unwrap().is_empty());
    assert_eq!(state_of(state, "short").await, Some(MessageState::Expired));
    // Remembered until its time: a replay is refused.
    let replay = InboxMessage {
        expires_at_ms: T0 + MINUTE_MS,
        ..inbox_message("node:a", "short")
    };
    assert_eq!(state.inbox_put(replay).await.unwrap(), Queued::Duplicate);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upload_files_its_results_and_keeps_its_inbox_messages_in_one_go() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let filed = |request: &str, result_id: &str, text: &str| FiledResult {
        request_id: request.into(),
        result_message_id: result_id.into(),
        plaintext: text.as_bytes().to_vec(),
        remember_until_ms: T0 + MINUTE_MS,
    };
    let out = state
        .receive_uploads(vec![
            Upload::Result(filed("req-1", "res-1", "one")),
            Upload::Inbox(inbox_message("node:a", "in-1")),
            Upload::Inbox(inbox_message("node:a", "in-1")),
            Upload::Inbox(inbox_message("node:a", "in-2")),
        ])
        .await
        .unwrap();
    assert_eq!(
        out,
        [
            Queued::Queued,
            Queued::Queued,
            Queued::Duplicate,
            Queued::Queued
        ]
    );
    assert_eq!(state.result("req-1").await.unwrap(), Some(b"one".to_vec()));
    assert_eq!(state.result("req-2").await.unwrap(), None);
    for id in ["res-1", "in-1", "in-2"] {
        assert!(state.upload_seen(id).await.unwrap(), "{id}");
    }
    assert!(!state.upload_seen("req-1").await.unwrap());
    let asked: Vec<String> = ["res-1", "in-2", "other"].map(String::from).into();
    let seen = state.uploads_seen(&asked).await.unwrap();
    assert_eq!(
        seen,
        HashSet::from(["res-1".to_string(), "in-2".to_string()])
    );
    assert_eq!(
        state.inbox_list(Some("node:a"), 10).await.unwrap(),
        [b"in-1".to_vec(), b"in-2".to_vec()]
    );

    // The same upload again: the inbox message is a duplicate, the result harmless.
    let out = state
        .receive_uploads(vec![
            Upload::Inbox(inbox_message("node:a", "in-1")),
            Upload::Result(filed("req-1", "res-1", "one")),
        ])
        .await
        .unwrap();
    assert_eq!(out, [Queued::Duplicate, Queued::Queued]);
    assert_eq!(state.result("req-1").await.unwrap(), Some(b"one".to_vec()));
    state
        .file_result(filed("req-2", "res-2", "two"))
        .await
        .unwrap();
    assert_eq!(state.result("req-2").await.unwrap(), Some(b"two".to_vec()));
    assert!(state.upload_seen("res-2").await.unwrap());
}
