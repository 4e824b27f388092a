//! The event table (`GatewayState::events`): the rows a write carries are committed with
//! it and only with what it wrote; ids increase in commit order, one after another.

use super::*;

/// An event's JSON, as the table keeps it (the table does not read it).
fn event(what: &str) -> String {
    format!(r#"{{"type":"test","what":"{what}"}}"#)
}

/// `msg` carrying its event `what` at T0.
fn carrying(msg: ForNode, what: &str) -> ForNode {
    ForNode {
        event: Some((T0, event(what))),
        ..msg
    }
}

/// What the table holds after `after` once the sequencer ran: `(id, JSON)`, each at T0.
async fn rows_after(state: &dyn GatewayState, after: u64) -> Vec<(u64, String)> {
    state.events().sequence_events().await.unwrap();
    let rows = state.events().events_after(after, 100).await.unwrap();
    rows.into_iter()
        .map(|(id, ts_ms, json)| {
            assert_eq!(ts_ms, T0, "event {id}");
            (id, json)
        })
        .collect()
}

/// Ids follow each other, from just after `after`.
fn assert_ids_follow(after: u64, rows: &[(u64, String)]) {
    let ids: Vec<u64> = rows.iter().map(|r| r.0).collect();
    let want: Vec<u64> = (after + 1..=after + rows.len() as u64).collect();
    assert_eq!(ids, want, "{rows:?}");
}

fn jsons(rows: &[(u64, String)]) -> Vec<&str> {
    rows.iter().map(|r| r.1.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_message_commits_its_event_and_a_duplicate_none() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let start = state.events().newest_event().await.unwrap();
    assert_eq!(rows_after(state, start).await, []);

    let q = state.queue_command(carrying(command("node:a", "m1"), "queued m1"), None);
    assert_eq!(q.await.unwrap(), Queued::Queued);
    let q = state.queue_command(carrying(command("node:a", "m1"), "m1 again"), None);
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    let q = state.forward(carrying(command("node:b", "f1"), "forwarded f1"));
    assert_eq!(q.await.unwrap(), Queued::Queued);
    let key = |id: &str| CommandKey {
        message_id: id.into(),
        subject: "alice".into(),
        request_sha256: "00".into(),
        expires_at_ms: T0 + MINUTE_MS,
        keep_until_ms: T0 + 10 * MINUTE_MS,
    };
    let q = state.queue_keyed_command(carrying(command("node:a", "k1"), "keyed k1"), key("k1"));
    assert_eq!(q.await.unwrap(), Queued::Queued);
    let q = state.queue_keyed_command(carrying(command("node:a", "k1"), "k1 again"), key("k1"));
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    let job = |key: &str, id: &str| NewJob {
        key: key.into(),
        record: JobRecord {
            message_id: id.into(),
            tool_name: "echo".into(),
            args_sha256: "00".into(),
        },
    };
    let k = job_key("node:a", "alice", "job-1");
    let q = state.queue_command(
        carrying(command("node:a", "j1"), "job j1"),
        Some(job(&k, "j1")),
    );
    assert_eq!(q.await.unwrap(), Queued::Queued);
    let k = job_key("node:a", "alice", "job-2");
    let q = state.queue_command(
        carrying(command("node:a", "m1"), "job m1"),
        Some(job(&k, "m1")),
    );
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    // A message that carries none adds none.
    let q = state.queue_command(command("node:a", "plain"), None).await;
    assert_eq!(q.unwrap(), Queued::Queued);

    let rows = rows_after(state, start).await;
    assert_eq!(
        jsons(&rows),
        [
            event("queued m1"),
            event("forwarded f1"),
            event("keyed k1"),
            event("job j1")
        ]
    );
    assert_ids_follow(start, &rows);
    assert_eq!(state.events().newest_event().await.unwrap(), rows[3].0);
    assert_eq!(
        state.events().events_after(rows[1].0, 1).await.unwrap(),
        [(rows[2].0, T0, event("keyed k1"))]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ack_commits_the_events_of_what_it_removed_only() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    for id in ["m1", "m2", "m3"] {
        let q = state.queue_command(command("node:a", id), None).await;
        assert_eq!(q.unwrap(), Queued::Queued);
    }
    pull(state, "node:a").await;
    let start = state.events().newest_event().await.unwrap();
    let ack = NodeAck {
        delivered: vec!["m1".into(), "never".into()],
        rejected: vec![("m2".into(), "bad_payload".into())],
        events: (
            T0,
            vec![
                ("m1".into(), event("delivered m1")),
                ("never".into(), event("delivered never")),
                ("m2".into(), event("rejected m2")),
            ],
        ),
    };
    assert_eq!(
        sorted(state.ack("node:a", ack).await.unwrap()),
        ["m1", "m2"]
    );
    // Acknowledged again (removes nothing), or by another node: no event.
    let again = |id: &str| NodeAck {
        delivered: vec![id.into()],
        rejected: Vec::new(),
        events: (T0, vec![(id.into(), event(&format!("{id} again")))]),
    };
    assert_eq!(state.ack("node:a", again("m1")).await.unwrap(), [""; 0]);
    assert_eq!(state.ack("node:b", again("m3")).await.unwrap(), [""; 0]);
    let rows = rows_after(state, start).await;
    assert_eq!(jsons(&rows), [event("delivered m1"), event("rejected m2")]);
    assert_ids_follow(start, &rows);

    // An event no write carries comes after them, in the order given.
    let published = vec![(T0, event("published 1")), (T0, event("published 2"))];
    state.events().append_events(published).await.unwrap();
    let after = rows[1].0;
    let rows = rows_after(state, after).await;
    assert_eq!(jsons(&rows), [event("published 1"), event("published 2")]);
    assert_ids_follow(after, &rows);
}
