//! Fleet state records (`storage::fleet`): a write lands only over the revision it was
//! read at, the documents and the summary round-trip and survive a restart, the listing
//! holds every node's summary, the desired version answers the pull path, and a node
//! enrolled (or approved) with a token carrying labels starts with them in the
//! decision's own transaction, unless it has labels already.

use outpost::audit::{AuditEvent, AuditOutcome, AuditRecord};
use outpost::enroll::Approve;
use outpost::fleet::Labels;
use outpost::gateway::storage::fleet::{DocsWrite, FleetDocs, FleetRecord, FleetSummary};
use serde_json::json;

use super::trust::{enroll, peer, token};
use super::{entry, settled, Engine};

fn record(revision: u64, desired_version: u64, desired: serde_json::Value) -> FleetRecord {
    FleetRecord {
        summary: FleetSummary {
            revision,
            desired_version,
            in_sync: false,
            ..FleetSummary::default()
        },
        docs: FleetDocs {
            desired,
            ..FleetDocs::default()
        },
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_record_is_written_only_over_the_revision_it_was_read_at() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    assert_eq!(
        state.fleet_record("node:a").await.unwrap(),
        FleetRecord::default()
    );
    assert_eq!(state.desired_version("node:a").await.unwrap(), 0);

    let first = record(1, 1, json!({"fan": 1}));
    assert!(state
        .put_fleet("node:a", 0, &first, DocsWrite::Changed, true, None)
        .await
        .unwrap());
    // A second writer that read revision 0 too loses, and writes nothing: not its
    // audit entry either.
    let other = record(1, 1, json!({"fan": 99}));
    let lost = AuditRecord::new(AuditEvent::Desired, AuditOutcome::Ok).detail("lost");
    assert!(!state
        .put_fleet(
            "node:a",
            0,
            &other,
            DocsWrite::Changed,
            false,
            Some((7, &lost))
        )
        .await
        .unwrap());
    assert!(state.audit_pending(10).await.unwrap().is_empty());
    // A revision that does not follow the one expected is refused too.
    let skipped = record(5, 2, json!({"fan": 5}));
    assert!(!state
        .put_fleet("node:a", 1, &skipped, DocsWrite::Changed, false, None)
        .await
        .unwrap());
    assert_eq!(state.fleet_record("node:a").await.unwrap(), first);
    assert_eq!(state.desired_version("node:a").await.unwrap(), 1);

    // A summary-only write keeps the documents; its audit entry is pending with it.
    let mut labelled = first.clone();
    labelled.summary.revision = 2;
    labelled.summary.labels = Some(Labels::from_pairs([("site", "north")]).unwrap());
    let who = AuditRecord::new(AuditEvent::Labels, AuditOutcome::Ok)
        .actor("admin:ops")
        .detail("node:a labels set site=north removed -");
    assert!(state
        .put_fleet(
            "node:a",
            1,
            &labelled,
            DocsWrite::Unchanged,
            false,
            Some((9, &who))
        )
        .await
        .unwrap());
    let pending = state.audit_pending(10).await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].entry.ts_ms, 9);
    assert_eq!(pending[0].entry.event, AuditEvent::Labels);
    assert_eq!(pending[0].entry.actor.as_deref(), Some("admin:ops"));
    let second = record(3, 2, json!({"fan": 2}));
    let mut second = FleetRecord {
        summary: FleetSummary {
            labels: labelled.summary.labels.clone(),
            ..second.summary
        },
        ..second
    };
    second.docs.reported = json!({"fan": 1});
    assert!(state
        .put_fleet("node:a", 2, &second, DocsWrite::Changed, true, None)
        .await
        .unwrap());
    assert!(state
        .put_fleet(
            "node:b",
            0,
            &record(1, 0, json!({})),
            DocsWrite::Changed,
            false,
            None
        )
        .await
        .unwrap());

    let all = state.fleet_summaries().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all["node:a"], second.summary);
    let e = e.reopen().await;
    let state = &*e.state;
    assert_eq!(state.fleet_record("node:a").await.unwrap(), second);
    assert_eq!(state.desired_version("node:a").await.unwrap(), 2);
    assert_eq!(state.desired_version("node:b").await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_enrolled_or_approved_with_a_labelled_token_starts_with_its_labels() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let north = Labels::from_pairs([("site", "north"), ("role", "pump")]).unwrap();
    let mut auto = token("auto", Approve::Auto);
    auto.labels = north.clone();
    let mut manual = token("manual", Approve::Manual);
    manual.labels = Labels::from_pairs([("site", "south")]).unwrap();
    state
        .enroll_token_add(auto, &entry("created"))
        .await
        .unwrap();
    state
        .enroll_token_add(manual, &entry("created"))
        .await
        .unwrap();
    assert_eq!(
        state
            .enroll_tokens()
            .await
            .unwrap()
            .iter()
            .find(|t| t.claims.id == "auto")
            .unwrap()
            .labels,
        north
    );

    let (_, a) = peer("node:a", "node", "2026-11-20T06:00:00Z");
    enroll(state, &a, "auto").await;
    let got = state.fleet_record("node:a").await.unwrap();
    assert_eq!(got.summary.labels, Some(north.clone()));

    // Manual: no labels while pending, the token's once approved.
    let (_, m) = peer("node:m", "node", "2026-11-20T06:00:00Z");
    enroll(state, &m, "manual").await;
    assert_eq!(
        state.fleet_record("node:m").await.unwrap().summary.labels,
        None
    );
    state
        .settle_enrollment("node:m", true, super::T0, "admin:test", &settled)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        state.fleet_record("node:m").await.unwrap().summary.labels,
        Some(Labels::from_pairs([("site", "south")]).unwrap())
    );

    // A node that has labels keeps them when it enrolls again (a re-key, say).
    let (_, b) = peer("node:b", "node", "2026-11-20T06:00:00Z");
    let mine = Labels::from_pairs([("site", "mine")]).unwrap();
    let pre = FleetRecord {
        summary: FleetSummary {
            revision: 1,
            labels: Some(mine.clone()),
            ..FleetSummary::default()
        },
        docs: FleetDocs::default(),
    };
    assert!(state
        .put_fleet("node:b", 0, &pre, DocsWrite::Changed, false, None)
        .await
        .unwrap());
    enroll(state, &b, "auto").await;
    assert_eq!(
        state.fleet_record("node:b").await.unwrap().summary.labels,
        Some(mine)
    );
}
