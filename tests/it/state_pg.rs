//! The PostgreSQL gateway state on its own (the `gateway_pg` binary only), with a clock
//! the test moves: what the embedded state's unit tests check of the promises both
//! engines make (`gateway::storage::embedded::tests`), against a real database.

use outpost::clock::ManualClock;
use outpost::gateway::storage::postgres::Postgres;
use outpost::gateway::storage::{
    CommandKey, ForNode, GatewayState, InboxMessage, Queued, StateError,
};

use crate::pg::PgCluster;

const T0: u64 = 1_780_000_000_000;

/// A gateway state on the database at `url`, on `clock`.
async fn open(url: &str, clock: &ManualClock) -> std::sync::Arc<Postgres> {
    let cfg = outpost::config::from_str(&format!(
        "[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n[store]\nengine = \"postgres\"\npostgres_url = \"{url}\"\n"
    ))
    .unwrap();
    Postgres::open(
        cfg.gateway_db.as_ref().unwrap(),
        &cfg.queue,
        std::sync::Arc::new(clock.clone()),
    )
    .await
    .unwrap()
}

/// RELIABILITY F1 on PostgreSQL: a message that expired between two sweeps must not be
/// listed (no sweeper runs here; the listing alone must leave it out).
#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_never_lists_a_message_past_its_expiry_even_before_the_sweep() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let url = pg.create_database();
    let clock = ManualClock::new(T0);
    let state = open(&url, &clock).await;
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
    // At the expiry instant, and no sweep has run: still in the table, never listed.
    clock.advance_ms(4_000);
    assert_eq!(listed(state.inbox_list(None, 10).await.unwrap()), ["long"]);
    assert_eq!(
        listed(state.inbox_list(Some("node:a"), 10).await.unwrap()),
        ["long"]
    );
    assert_eq!(
        pg.psql(
            &url,
            "SELECT count(*) FROM messages WHERE message_id = 'short'"
        ),
        "1",
        "the test is about the listing, not the sweep"
    );
}

/// Every message queued at once; the answers by message id, in the messages' order.
async fn all_at_once(
    state: &std::sync::Arc<Postgres>,
    msgs: Vec<ForNode>,
) -> Vec<(String, Result<Queued, StateError>)> {
    futures_util::future::join_all(msgs.into_iter().map(|m| {
        let state = state.clone();
        async move {
            let id = m.message_id.clone();
            (id, state.queue_command(m, None).await)
        }
    }))
    .await
}

fn command(id: &str, payload_type: &str, expires_at_ms: u64) -> ForNode {
    ForNode {
        node_id: "node:a".into(),
        message_id: id.into(),
        payload_type: payload_type.into(),
        priority: 0,
        created_at_ms: T0,
        expires_at_ms,
        envelope: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        max_attempts: 0,
        event: None,
    }
}

/// Enqueues that arrive together are committed in groups (`postgres::group`), and a
/// group answers each caller as if it had been alone: one `Queued` per id and
/// `Duplicate` for the rest, also within one group; an expired message refused; and a
/// message the database rejects fails only its own caller, not the others of its group.
#[tokio::test(flavor = "multi_thread")]
async fn enqueues_that_arrive_together_commit_in_groups_and_each_gets_its_own_answer() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let url = pg.create_database();
    let state = open(&url, &ManualClock::new(T0)).await;
    // 150 ids, 40 of them sent twice, and one already expired, all at once.
    let mut msgs: Vec<ForNode> = (0..150)
        .map(|i| command(&format!("m{i}"), "T", T0 + 60_000))
        .collect();
    msgs.extend((0..40).map(|i| command(&format!("m{}", i * 3), "T", T0 + 60_000)));
    msgs.push(command("old", "T", T0));
    let answers = all_at_once(&state, msgs).await;
    let mut queued = std::collections::HashMap::<String, usize>::new();
    let mut duplicates = 0;
    for (id, answer) in answers {
        match answer {
            Ok(Queued::Queued) => *queued.entry(id).or_default() += 1,
            Ok(Queued::Duplicate) => duplicates += 1,
            Err(e) => assert_eq!(id, "old", "{e}"),
        }
    }
    assert_eq!(queued.len(), 150);
    assert!(queued.values().all(|n| *n == 1), "{queued:?}");
    assert_eq!(duplicates, 40);
    assert_eq!(
        pg.psql(&url, "SELECT count(*) FROM messages"),
        "150",
        "one row per id"
    );
    assert_eq!(
        pg.psql(&url, "SELECT sum(n) FROM queue_depth"),
        "150",
        "the depth counts each once"
    );
    // Rows written by one transaction share its id (xmin): far fewer transactions than
    // messages shows the grouping (one per message before it).
    let transactions: usize = pg
        .psql(&url, "SELECT count(DISTINCT xmin::text) FROM messages")
        .parse()
        .unwrap();
    assert!(transactions <= 50, "{transactions} transactions for 150");

    // A message PostgreSQL refuses (a NUL in a text column) among 60 good ones.
    let mut msgs: Vec<ForNode> = (0..60)
        .map(|i| command(&format!("n{i}"), "T", T0 + 60_000))
        .collect();
    msgs.insert(30, command("bad", "T\u{0}", T0 + 60_000));
    let answers = all_at_once(&state, msgs).await;
    for (id, answer) in answers {
        if id == "bad" {
            assert!(answer.is_err(), "{answer:?}");
        } else {
            assert_eq!(answer.unwrap(), Queued::Queued, "{id}");
        }
    }
    assert_eq!(pg.psql(&url, "SELECT count(*) FROM messages"), "210");
}

/// Issue 25 on PostgreSQL: a command's idempotency key is committed with it (and only
/// with it), answered while it is kept, then forgotten and pruned by the sweep.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_key_is_stored_with_its_command_only_and_kept_until_its_time() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let url = pg.create_database();
    let clock = ManualClock::new(T0);
    let state = open(&url, &clock).await;
    let key = |id: &str| CommandKey {
        message_id: id.into(),
        subject: "alice".into(),
        request_sha256: "00".into(),
        expires_at_ms: T0 + 1_000,
        keep_until_ms: T0 + 10_000,
    };
    let q = state.queue_keyed_command(command("m1", "COMMAND", T0 + 1_000), key("m1"));
    assert_eq!(q.await.unwrap(), Queued::Queued);
    assert_eq!(state.command_key("m1").await.unwrap(), Some(key("m1")));
    let q = state.queue_keyed_command(command("m1", "COMMAND", T0 + 1_000), key("m1"));
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    // A message id already taken (here by a forward): the key is not kept either.
    let fwd = state.forward(command("taken", "COMMAND", T0 + 1_000));
    assert_eq!(fwd.await.unwrap(), Queued::Queued);
    let q = state.queue_keyed_command(command("taken", "COMMAND", T0 + 1_000), key("taken"));
    assert_eq!(q.await.unwrap(), Queued::Duplicate);
    assert_eq!(state.command_key("taken").await.unwrap(), None);
    assert_eq!(pg.psql(&url, "SELECT count(*) FROM messages"), "2");
    // Kept past the command's expiry, until its keep-until; then pruned.
    clock.advance_ms(5_000);
    state.sweep_expired().await.unwrap();
    assert!(state.command_key("m1").await.unwrap().is_some());
    clock.advance_ms(5_000);
    assert_eq!(state.command_key("m1").await.unwrap(), None);
    state.sweep_expired().await.unwrap();
    assert_eq!(pg.psql(&url, "SELECT count(*) FROM command_keys"), "0");
}

/// The console's node page on PostgreSQL: what waits for one node, in pull order
/// (priority first, then arrival), other nodes' messages and what expired (before any
/// sweep) left out — as the embedded state's test of the same name.
#[tokio::test(flavor = "multi_thread")]
async fn queued_for_lists_one_nodes_queue_in_pull_order_without_the_expired() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let url = pg.create_database();
    let clock = ManualClock::new(T0);
    let state = open(&url, &clock).await;
    let urgent = ForNode {
        priority: 5,
        ..command("urgent", "COMMAND", T0 + 60_000)
    };
    let other = ForNode {
        node_id: "node:b".into(),
        ..command("other", "COMMAND", T0 + 60_000)
    };
    for m in [
        command("first", "COMMAND", T0 + 60_000),
        command("short", "COMMAND", T0 + 1_000),
        urgent,
        other,
    ] {
        assert_eq!(state.queue_command(m, None).await.unwrap(), Queued::Queued);
    }
    let ids = |v: Vec<outpost::gateway::storage::QueuedMessage>| {
        v.into_iter().map(|m| m.message_id).collect::<Vec<_>>()
    };
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
