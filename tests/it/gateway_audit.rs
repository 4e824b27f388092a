//! Audit sync at the gateway (PROTOCOL §13): entries from the confirmed size plus a signed
//! checkpoint extend the stored log; a gap or a mismatch is refused (409) and never merged.

use ed25519_dalek::SigningKey;
use outpost::audit::{
    leaf_hash, origin_for, sign_checkpoint, AuditEntry, AuditEvent, AuditOutcome, AuditRecord,
    Frontier,
};
use serde_json::json;

use crate::gateway::{start, NODE, SEED};

fn entries(from: u64, n: u64) -> Vec<Vec<u8>> {
    (from..from + n)
        .map(|i| {
            AuditEntry::from_record(
                i,
                1_000 + i,
                AuditRecord::new(AuditEvent::ToolCall, AuditOutcome::Ok),
            )
            .canonical_bytes()
        })
        .collect()
}

fn note(all: &[Vec<u8>]) -> String {
    let mut fr = Frontier::new();
    for e in all {
        fr.push(leaf_hash(e));
    }
    sign_checkpoint(
        &SigningKey::from_bytes(&SEED),
        &origin_for(NODE),
        fr.size(),
        &fr.root(),
    )
}

fn texts(e: &[Vec<u8>]) -> Vec<String> {
    e.iter()
        .map(|b| String::from_utf8(b.clone()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_sync_extends_and_refuses_gaps_and_mismatches() {
    let f = start();
    let path = format!("/v1/nodes/{NODE}/audit");
    let all = entries(0, 6);
    let up = |e: &[Vec<u8>], n: String| json!({"entries": texts(e), "checkpoint": n});
    let (st, v) = f
        .signed(
            "POST",
            &path,
            Some(&up(&all[..3], note(&all[..3]))),
            |_, _| {},
        )
        .await;
    assert_eq!((st, v["size"].clone()), (200, json!(3)), "{v}");
    // Gap: entries 4.. without 3.
    let (st, v) = f
        .signed("POST", &path, Some(&up(&all[4..], note(&all))), |_, _| {})
        .await;
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"]["code"], "audit_gap");
    // The operator's console shows the alarm on the node's page and its fleet row.
    let admin = f.home.token("gateway:main", &["admin"], "1h");
    let (_, ui) = crate::console::sign_in(&f.gw, &admin).await;
    let ui = ui.expect("a console session");
    // Events reach the console's view at once on the embedded engine, and through the
    // database's event log (a moment later) on PostgreSQL.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let page = ui
            .get(&format!("/ui/nodes/{NODE}"))
            .await
            .text()
            .await
            .unwrap();
        if page.contains("id=\"audit-alarm\"") && page.contains("audit_gap") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{page}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let fleet = ui.get("/ui").await.text().await.unwrap();
    assert!(fleet.contains("data-audit-alarm=\"audit_gap\""), "{fleet}");
    // Mismatch: checkpoint over other entries.
    let other = entries(100, 6);
    let (st, v) = f
        .signed("POST", &path, Some(&up(&all[3..], note(&other))), |_, _| {})
        .await;
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"]["code"], "audit_mismatch");
    // Nothing was merged: the honest continuation still fits.
    let (st, v) = f
        .signed("POST", &path, Some(&up(&all[3..], note(&all))), |_, _| {})
        .await;
    assert_eq!((st, v["size"].clone()), (200, json!(6)), "{v}");
    let (_, s) = f.signed("GET", &path, None, |_, _| {}).await;
    assert_eq!(s["size"], 6);
    assert!(f.gw.log_text().contains("audit_alert"), "alerts are logged");
    // Extended again: the alarm is over.
    let page = ui
        .get(&format!("/ui/nodes/{NODE}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(!page.contains("id=\"audit-alarm\""), "{page}");
}
