//! The embedded gateway's trust store at fleet size: an enrollment decision writes the
//! one peer it trusts, not the fleet (issue 39: 10,000 devices enrolling at once reached
//! ~2 a second while each decision rewrote a record of every node).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use outpost::clock::ManualClock;
use outpost::enroll::Approve;
use outpost::envelope::{IdentityDocument, Keys, TrustStore};
use outpost::gateway::enroll::{decide, Decision, RecordState, NODE_RIGHTS};
use outpost::gateway::storage::embedded::Embedded;
use outpost::gateway::storage::{EnrollmentState, GatewayState, TrustEdit};
use outpost::store::{Store, StoreOptions};

use crate::state_conformance::trust::token;

const T0: u64 = 1_780_000_000_000;

/// Every row of the store's KV namespaces that hold the trust store, old or new.
fn trust_rows(store: &Store) -> BTreeMap<(String, String), Vec<u8>> {
    let mut out = BTreeMap::new();
    for ns in ["trust", "trust_peers", "trust_log"] {
        for (k, v) in store.kv_list(ns).unwrap() {
            out.insert((ns.to_string(), k), v);
        }
    }
    out
}

fn doc(id: &str) -> IdentityDocument {
    IdentityDocument::new(id, "node", &Keys::generate(), "2026-11-20T06:00:00Z")
}

/// With 1,000 nodes trusted, one enrollment changes a constant number of trust rows
/// (the node's row and one change-log entry). The node's id sorts in the middle of the
/// fleet: written as one record cut into rows, about half of the record's rows moved.
#[tokio::test(flavor = "multi_thread")]
async fn one_enrollment_with_1000_nodes_trusted_writes_two_trust_rows() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), StoreOptions::default(), Arc::new(clock)).unwrap();
    let state = Embedded::new(store.clone());
    let mut fleet = TrustStore::new();
    for i in 0..1_000 {
        fleet
            .add(doc(&format!("node:n{i:04}")), NODE_RIGHTS)
            .unwrap();
    }
    let edit = TrustEdit::between(&TrustStore::new(), &fleet);
    state.save_trust(&edit, &[]).await.unwrap();
    let entry = outpost::audit::AuditRecord::new(
        outpost::audit::AuditEvent::Approve,
        outpost::audit::AuditOutcome::Ok,
    );
    state
        .enroll_token_add(token("auto", Approve::Auto), &entry)
        .await
        .unwrap();

    let before = trust_rows(&store);
    let node = doc("node:n0500a");
    let decide_as_gateway =
        |f: &outpost::gateway::enroll::Facts<'_>| decide(f, "auto", &Default::default());
    let decision = state.enroll(&node, "auto", &[], &decide_as_gateway).await;
    let Decision::Record { record, .. } = decision.unwrap() else {
        panic!("not recorded");
    };
    assert_eq!(record.state, RecordState::Enrolled);
    let after = trust_rows(&store);
    let keys: BTreeSet<_> = before.keys().chain(after.keys()).collect();
    let changed = keys
        .into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .count();
    assert!(
        changed <= 2,
        "{changed} trust rows written by one enrollment"
    );
    let trusted = state.load_trust().unwrap();
    assert_eq!(trusted.len(), 1_001);
    assert_eq!(trusted.get("node:n0500a").unwrap().doc, node);
}
