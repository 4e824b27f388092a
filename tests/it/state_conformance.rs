//! The gateway's state contract (`gateway::storage`: [`GatewayState`] and its parts
//! `EnrollmentState` and [`SharedState`]) checked by one suite on every engine: the `it`
//! binary runs it on the embedded store, `gateway_pg` on PostgreSQL
//! (`crate::GATEWAY_ENGINE` picks), each test on a fresh state and a clock it moves.
//! Every assertion is a promise of the trait's documentation or of the types it
//! answers with, never what one engine happens to do.
//!
//! What it covers: queue order, acks, redelivery, superseded pulls, batch limits and
//! pipelining; unique ids (with or without a job or an idempotency key); expiry and the
//! sweep; the gateway's inbox and uploads; message status and queue statistics; the
//! trust store and its fingerprint, node and gateway key rotations; enrollment tokens,
//! enrollments, approvals and retirements; token revocations; nodes' audit copies; what
//! survives a restart.
//!
//! Left to other suites: what only replicas sharing one database show (events,
//! liveness, notices, the shared replay window: `replicas`, `replicas_faults`), an
//! outcome lost with the database (`replicas_faults`), enqueues that arrive together
//! (`state_pg`) and enrollments that race for one token's uses (`self_enroll`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use outpost::clock::ManualClock;
use outpost::enroll::{Approve, TokenClaims};
use outpost::envelope::{
    IdentityDocument, KeyRotation, Keys, Rights, Rotated, RotationError, TrustStore,
};
use outpost::gateway::enroll::{decide, Decision, RecordState, TokenRecord, NODE_RIGHTS};
use outpost::gateway::storage::embedded::Embedded;
use outpost::gateway::storage::{
    job_key, AuditExtension, CommandKey, ExpiredMessage, FiledResult, ForNode, GatewayState,
    InboxMessage, JobRecord, NewJob, NodeAck, PullBatch, Queued, QueuedMessage, RevocationList,
    Revoked, SharedState, Take, Upload, QUEUE_INBOX, QUEUE_TO_NODE,
};
use outpost::store::{MessageState, Store, StoreOptions, REASON_TIMEOUT};

const T0: u64 = 1_780_000_000_000;
const MINUTE_MS: u64 = 60_000;

/// Where an engine keeps its data, so that the state can be opened again on it.
enum Data {
    Dir(tempfile::TempDir),
    #[cfg(feature = "postgres")]
    Database(String),
}

/// One engine's state under test, on a clock the test moves.
struct Engine {
    state: Arc<dyn GatewayState>,
    clock: ManualClock,
    data: Data,
}

impl Engine {
    /// A fresh state of this binary's engine; `None` when PostgreSQL is not installed
    /// (`pg` has printed `SKIPPED`, or failed under `OUTPOST_TEST_PG_REQUIRE=1`).
    async fn open() -> Option<Engine> {
        let clock = ManualClock::new(T0);
        let data = match crate::GATEWAY_ENGINE {
            "embedded" => Data::Dir(tempfile::tempdir().unwrap()),
            #[cfg(feature = "postgres")]
            "postgres" => Data::Database(crate::pg::PgCluster::shared()?.create_database()),
            other => panic!("no gateway engine {other:?} in this build"),
        };
        let state = open_on(&data, &clock).await;
        Some(Engine { state, clock, data })
    }

    /// Close the state and open it again on the same data (a restart of the gateway).
    async fn reopen(self) -> Engine {
        let Engine { state, clock, data } = self;
        state.close().await.unwrap();
        drop(state);
        let state = open_on(&data, &clock).await;
        Engine { state, clock, data }
    }
}

async fn open_on(data: &Data, clock: &ManualClock) -> Arc<dyn GatewayState> {
    match data {
        Data::Dir(dir) => {
            let store =
                Store::open(dir.path(), StoreOptions::default(), Arc::new(clock.clone())).unwrap();
            Arc::new(Embedded::new(store))
        }
        #[cfg(feature = "postgres")]
        Data::Database(url) => {
            let cfg = outpost::config::from_str(&format!(
                "[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n[store]\nengine = \"postgres\"\npostgres_url = \"{url}\"\n"
            ))
            .unwrap();
            outpost::gateway::storage::postgres::Postgres::open(
                cfg.gateway_db.as_ref().unwrap(),
                &cfg.queue,
                Arc::new(clock.clone()),
            )
            .await
            .unwrap()
        }
    }
}

/// A command for `node`, queued at T0 for a minute.
fn command(node: &str, id: &str) -> ForNode {
    ForNode {
        node_id: node.into(),
        message_id: id.into(),
        payload_type: "COMMAND".into(),
        priority: 0,
        created_at_ms: T0,
        expires_at_ms: T0 + MINUTE_MS,
        envelope: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        max_attempts: 0,
        event: None,
    }
}

/// A message `node` sent to the gateway, kept for a minute.
fn inbox_message(node: &str, id: &str) -> InboxMessage {
    InboxMessage {
        from_node: node.into(),
        message_id: id.into(),
        payload_type: "DATA".into(),
        priority: 0,
        created_at_ms: T0,
        expires_at_ms: T0 + MINUTE_MS,
        record: id.as_bytes().to_vec(),
        remember_until_ms: T0 + 2 * MINUTE_MS,
    }
}

fn take(pull: u64, max: usize, max_bytes: usize, after: Option<&str>) -> Take<'_> {
    Take {
        pull,
        max,
        max_bytes,
        after,
    }
}

fn ids(batch: &PullBatch) -> Vec<&str> {
    batch
        .deliveries
        .iter()
        .map(|d| d.message_id.as_str())
        .collect()
}

/// A new pull of `node` and its first batch (up to 100 messages).
async fn pull(state: &dyn GatewayState, node: &str) -> PullBatch {
    let n = state.begin_pull(node).await.unwrap();
    state
        .take_batch(node, take(n, 100, 1 << 20, None))
        .await
        .unwrap()
}

fn delivered(ids: &[&str]) -> NodeAck {
    NodeAck {
        delivered: ids.iter().map(|s| s.to_string()).collect(),
        rejected: Vec::new(),
    }
}

fn sorted(v: Vec<String>) -> Vec<String> {
    let mut v = v;
    v.sort();
    v
}

async fn state_of(state: &dyn GatewayState, id: &str) -> Option<MessageState> {
    state.message_status(id).await.unwrap().map(|s| s.state)
}

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

/// A peer's keys and document, made at a fixed date.
fn peer(node_id: &str, role: &str, at: &str) -> (Keys, IdentityDocument) {
    let keys = Keys::generate();
    let doc = IdentityDocument::new(node_id, role, &keys, at);
    (keys, doc)
}

const SEND: Rights = Rights {
    send: true,
    issue: false,
};

#[tokio::test(flavor = "multi_thread")]
async fn the_trust_store_round_trips_and_its_fingerprint_moves_only_when_it_changes() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    assert!(state.load_trust().unwrap().is_empty());
    let (fp0, empty) = state.load_trust_since(0).unwrap().expect("none held yet");
    assert_ne!(fp0, 0);
    assert!(empty.is_empty());

    let mut trust = TrustStore::new();
    let (_, admin) = peer("gateway:other", "gateway", "2026-11-20T06:00:00Z");
    let (_, node) = peer("node:a", "node", "2026-11-20T06:00:00Z");
    let issuer = Rights {
        send: false,
        issue: true,
    };
    trust.add(admin, issuer).unwrap();
    trust.add(node, SEND).unwrap();
    state.save_trust(&trust).await.unwrap();
    assert_eq!(state.load_trust().unwrap(), trust);
    let (fp1, loaded) = state.load_trust_since(fp0).unwrap().expect("changed");
    assert_ne!(fp1, 0);
    assert_ne!(fp1, fp0);
    assert_eq!(loaded, trust);
    assert_eq!(state.load_trust_since(fp1).unwrap(), None);

    // The same peers saved again: unchanged.
    state.save_trust(&trust).await.unwrap();
    assert_eq!(state.load_trust_since(fp1).unwrap(), None);

    // Other rights, then a peer removed: each a change.
    trust
        .add(trust.get("node:a").unwrap().doc.clone(), Rights::default())
        .unwrap();
    state.save_trust(&trust).await.unwrap();
    let (fp2, loaded) = state
        .load_trust_since(fp1)
        .unwrap()
        .expect("rights changed");
    assert_ne!(fp2, fp1);
    assert_eq!(loaded, trust);
    trust.remove("node:a");
    state.save_trust(&trust).await.unwrap();
    let (fp3, loaded) = state.load_trust_since(fp2).unwrap().expect("peer removed");
    assert_ne!(fp3, fp2);
    assert_eq!(loaded, trust);

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
    e.state.save_trust(&trust).await.unwrap();
    let (fp, _) = e.state.load_trust_since(0).unwrap().unwrap();

    let new = Keys::generate();
    let new_doc = IdentityDocument::new("node:r", "node", &new, "2026-11-27T06:00:00Z");
    let rotation = KeyRotation::new(&old, &new, new_doc.clone());
    let applied = e.state.rotate_node(&rotation, T0, GRACE_MS).await.unwrap();
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
    assert!(e.state.load_trust_since(fp).unwrap().is_some(), "a change");

    // A retry (its answer was lost) changes nothing, not even the grace.
    let again = e.state.rotate_node(&rotation, T0 + 1_000, GRACE_MS).await;
    assert_eq!(again.unwrap(), Ok(Rotated::AlreadyApplied));
    let peer_now = e.state.load_trust().unwrap().get("node:r").cloned();
    assert_eq!(peer_now.as_ref(), Some(&rotated));

    // The retired key cannot rotate again; an unknown peer cannot rotate at all.
    let other = Keys::generate();
    let other_doc = IdentityDocument::new("node:r", "node", &other, "2026-11-28T06:00:00Z");
    let stale = KeyRotation::new(&old, &other, other_doc);
    let refused = e.state.rotate_node(&stale, T0, GRACE_MS).await.unwrap();
    assert_eq!(refused, Err(RotationError::Stale("node:r".into())));
    let (stranger, _) = peer("node:x", "node", "2026-11-20T06:00:00Z");
    let stranger_doc = IdentityDocument::new("node:x", "node", &other, "2026-11-28T06:00:00Z");
    let unknown = KeyRotation::new(&stranger, &other, stranger_doc);
    let refused = e.state.rotate_node(&unknown, T0, GRACE_MS).await.unwrap();
    assert_eq!(refused, Err(RotationError::UnknownPeer("node:x".into())));
    let peer_now = e.state.load_trust().unwrap().get("node:r").cloned();
    assert_eq!(peer_now.as_ref(), Some(&rotated));

    let e = e.reopen().await;
    let reloaded = e.state.load_trust().unwrap().get("node:r").cloned();
    assert_eq!(reloaded.as_ref(), Some(&rotated));
    let again = e.state.rotate_node(&rotation, T0 + 2_000, GRACE_MS).await;
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
        .put_gateway_rotation(&first, T0 + 1_000)
        .await
        .unwrap();
    let held = e.state.gateway_rotation().await.unwrap();
    assert_eq!(held, Some((first.clone(), T0 + 1_000)));
    e.state
        .put_gateway_rotation(&first, T0 + 9_000)
        .await
        .unwrap();
    let held = e.state.gateway_rotation().await.unwrap();
    assert_eq!(held, Some((first.clone(), T0 + 1_000)));
    let second = KeyRotation::new(&k1, &k2, d2);
    e.state
        .put_gateway_rotation(&second, T0 + 5_000)
        .await
        .unwrap();
    let held = e.state.gateway_rotation().await.unwrap();
    assert_eq!(held, Some((second.clone(), T0 + 5_000)));
    let e = e.reopen().await;
    let held = e.state.gateway_rotation().await.unwrap();
    assert_eq!(held, Some((second, T0 + 5_000)));
}

fn token(id: &str, approve: Approve) -> TokenRecord {
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
            .enroll_token_add(token(id, Approve::Auto))
            .await
            .unwrap();
    }
    let mut listed = state.enroll_tokens().await.unwrap();
    listed.sort_by(|a, b| a.claims.id.cmp(&b.claims.id));
    assert_eq!(
        listed,
        [token("tok-1", Approve::Auto), token("tok-2", Approve::Auto)]
    );

    assert_eq!(
        state.enroll_token_revoke("tok-1").await.unwrap(),
        Some(true)
    );
    assert_eq!(
        state.enroll_token_revoke("tok-1").await.unwrap(),
        Some(false)
    );
    assert_eq!(state.enroll_token_revoke("tok-9").await.unwrap(), None);
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
async fn enroll(state: &dyn GatewayState, doc: &IdentityDocument, token_id: &str) -> Decision {
    let token = token_id.to_string();
    let decide = move |f: &outpost::gateway::enroll::Facts<'_>| decide(f, &token);
    state.enroll(doc, token_id, false, &decide).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_enrollment_trusts_the_node_counts_a_use_and_a_retirement_refuses_its_messages() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    state
        .enroll_token_add(token("auto", Approve::Auto))
        .await
        .unwrap();
    state
        .enroll_token_add(token("manual", Approve::Manual))
        .await
        .unwrap();

    // Auto approval: trusted at once, a use counted; the same device again is answered.
    let (_, f) = peer("node:f", "node", "2026-11-20T06:00:00Z");
    let Decision::Record { record, consume } = enroll(state, &f, "auto").await else {
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
        .settle_enrollment("node:g", true, T0 + 5)
        .await
        .unwrap();
    let approved = approved.expect("pending");
    assert_eq!(approved.state, RecordState::Enrolled);
    assert_eq!(approved.decided_at_ms, Some(T0 + 5));
    assert_eq!(state.load_trust().unwrap().get("node:g").unwrap().doc, g);
    assert_eq!(
        state
            .settle_enrollment("node:g", true, T0 + 6)
            .await
            .unwrap(),
        None
    );
    let rejected = state
        .settle_enrollment("node:h", false, T0 + 7)
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
    let refused = state.revoke_node("node:f", T0 + 10).await.unwrap();
    assert_eq!(sorted(refused.expect("trusted")), ["f1", "f2"]);
    assert!(state.load_trust().unwrap().get("node:f").is_none());
    let status = state.message_status("f1").await.unwrap().unwrap();
    assert_eq!(status.state, MessageState::Rejected);
    assert_eq!(
        status.reason.as_deref(),
        Some(outpost::enroll::codes::NODE_REVOKED)
    );
    assert!(pull(state, "node:f").await.deliveries.is_empty());
    assert_eq!(state.revoked_node("node:f").await.unwrap(), Some(f));
    assert_eq!(state.revoke_node("node:f", T0 + 11).await.unwrap(), None);
    assert_eq!(
        state.revoke_node("node:nobody", T0 + 11).await.unwrap(),
        None
    );
}

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
    let Revoked::Added { version: v1 } = state.revoke("j1").await.unwrap() else {
        panic!("j1 was not revoked before");
    };
    let Revoked::Added { version: v2 } = state.revoke("j2").await.unwrap() else {
        panic!("j2 was not revoked before");
    };
    assert!(0 < v1 && v1 < v2, "{v1} then {v2}");
    assert_eq!(state.revoke("j1").await.unwrap(), Revoked::Duplicate);
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
    // What every engine answers for itself alone: a first signature is new, and a
    // peer lookup that missed can be refreshed.
    let shared: &dyn SharedState = state;
    assert!(shared.first_use(&[7; 64], T0 + MINUTE_MS).await.unwrap());
    shared.refresh_peer("node:nobody").await.unwrap();
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
