//! Devices enrolling at once through two gateway replicas on one PostgreSQL database
//! (the `gateway_pg` binary only): the fleet's history in the gateway's own audit log
//! is complete — one `enroll` entry per enrolled device, none twice — and verifies.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::fleet_history::audit_events;
use crate::harness::{Daemon, Home};
use crate::replicas::replicas;
use crate::self_enroll::make_token;
use crate::sim::{gateway_document, SimNode};

const DEVICES: usize = 200;

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_devices_enrolling_through_two_replicas_each_leave_one_audit_entry() {
    let Some(homes) = replicas(2) else { return };
    let token = make_token(&homes[0], &["--max-uses", "1000", "--ttl", "1h"]);
    let gws: Vec<Daemon> = homes.iter().map(Home::start).collect();
    let doc = gateway_document(&gws[0]).await;
    let nodes: Vec<SimNode> = (0..DEVICES)
        .map(|i| SimNode::generated(&format!("node:fleet-{i:03}")))
        .collect();
    let answers = futures_util::future::join_all(
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| n.self_enroll(&gws[i % 2], &doc, &token)),
    )
    .await;
    for (n, (st, v)) in nodes.iter().zip(&answers) {
        if *st != 200 {
            let logs: Vec<String> = gws
                .iter()
                .flat_map(|g| g.log_text().lines().map(String::from).collect::<Vec<_>>())
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .take(20)
                .collect();
            panic!("{}: {st} {v}\n{}", n.id, logs.join("\n"));
        }
    }

    // Appended before each answer (or, after a failed append, by a sweeper within a
    // tick or two): every device once, and `audit verify` passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut entries: BTreeMap<String, usize> = BTreeMap::new();
        for e in audit_events(&homes[1]) {
            let mut words = e.split(' ');
            if words.next() == Some("enroll") {
                *entries
                    .entry(words.next().unwrap().to_string())
                    .or_default() += 1;
            }
        }
        let missing: Vec<&str> = nodes
            .iter()
            .map(|n| n.id.as_str())
            .filter(|id| !entries.contains_key(*id))
            .collect();
        let twice: Vec<_> = entries.iter().filter(|(_, k)| **k > 1).collect();
        assert!(twice.is_empty(), "appended twice: {twice:?}");
        if missing.is_empty() {
            assert_eq!(entries.len(), DEVICES);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} enrolled devices without their audit entry: {missing:?}",
            missing.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
