//! The gateway's state contract (`gateway::storage`: [`GatewayState`] and its parts
//! `EnrollmentState`, `EventTable` and [`SharedState`]) checked by one suite on every
//! engine: the `it` binary runs it on the embedded store, `gateway_pg` on PostgreSQL
//! (`crate::GATEWAY_ENGINE` picks), each test on a fresh state and a clock it moves.
//! Every assertion is a promise of the trait's documentation or of the types it
//! answers with, never what one engine happens to do.
//!
//! What it covers: queue order, acks, redelivery, superseded pulls, batch limits and
//! pipelining; unique ids (with or without a job or an idempotency key); expiry and the
//! sweep; the gateway's inbox and uploads; message status and queue statistics; the
//! trust store and its version, node and gateway key rotations; fleet state records
//! (revisions, the token's labels at enrollment); enrollment tokens, enrollments,
//! approvals and retirements; token revocations; nodes' audit copies; the event table
//! (the rows a write carries, ids in commit order); what survives a restart.
//!
//! Left to other suites: what only replicas sharing one database show (every replica's
//! events in one order, liveness, notices, the shared replay window: `replicas`,
//! `replicas_faults`), an outcome lost with the database (`replicas_faults`), enqueues
//! that arrive together (`state_pg`) and enrollments that race for one token's uses
//! (`self_enroll`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use outpost::audit::{AuditEvent, AuditOutcome, AuditRecord};
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
    Revoked, Take, Upload, QUEUE_INBOX, QUEUE_TO_NODE,
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

/// A gateway audit entry of a decision (what it says is the flow's business).
fn entry(what: &str) -> AuditRecord {
    AuditRecord::new(AuditEvent::Approve, AuditOutcome::Ok).detail(what)
}

/// The audit entry of a settlement, naming the node.
fn settled(r: &outpost::gateway::enroll::EnrollmentRecord) -> AuditRecord {
    entry(&format!("settled {}", r.node_id))
}

/// The audit entry of a retirement, naming the node and the messages refused.
fn retired(doc: &IdentityDocument, refused: usize) -> AuditRecord {
    entry(&format!("retired {} {refused}", doc.node_id))
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
        events: (0, Vec::new()),
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

mod events;
mod expiry;
mod fleet;
mod history;
mod inbox;
mod queues;
mod records;
mod tenants;
pub(crate) mod trust;

/// Store `trust` as the enrolled peers, as `outpost trust add|rm` does: the edit from
/// what the state holds now to `trust`, with `audit`.
async fn save_trust(state: &dyn GatewayState, trust: &TrustStore, audit: &[AuditRecord]) {
    let before = state.load_trust().unwrap();
    let edit = outpost::gateway::storage::TrustEdit::between(&before, trust);
    state.save_trust(&edit, audit).await.unwrap();
}
