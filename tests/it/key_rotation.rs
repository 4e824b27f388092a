//! Key rotation of a node (PROTOCOL §15.7), on both gateway engines: `outpost identity
//! rotate` while commands flow both ways. Commands queued before the switch (sealed to
//! the retired key) still open, what the node sealed before it still verifies at the
//! gateway, every message arrives exactly once, and `audit verify` passes on both sides.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{gateway_and_node, http, pair, text, wait_for, Daemon, Home};
use crate::sim::node_sends;

const NODE: &str = "node:rot";

async fn command(g: &Daemon, token: &str, i: i64) {
    crate::sim::command(g, token, NODE, i as usize, 600).await;
}

/// Take and acknowledge what `d`'s inbox holds; counts `payload[field]` per value.
async fn drain(d: &Daemon, token: &str, field: &str, got: &mut BTreeMap<i64, usize>) {
    let v: Value = http()
        .get(d.url("/v1/inbox?limit=100"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for m in v["messages"].as_array().cloned().unwrap_or_default() {
        if let Some(x) = m["payload"][field].as_i64() {
            *got.entry(x).or_default() += 1;
        }
        let id = m["message_id"].as_str().unwrap();
        let r = http()
            .post(d.url(&format!("/v1/inbox/{id}/ack")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
}

/// Drain the node's inbox (`i`) and the gateway's (`k`) until they hold `want` distinct
/// messages each (40 s at most).
async fn drain_until(
    [(n, node_token), (g, gw_token)]: [(&Daemon, &str); 2],
    [to_node, to_gw]: [&mut BTreeMap<i64, usize>; 2],
    want: [usize; 2],
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while to_node.len() < want[0] || to_gw.len() < want[1] {
        assert!(
            std::time::Instant::now() < deadline,
            "not everything arrived: node has {} of {}, gateway {} of {}\n{}\n{}",
            to_node.len(),
            want[0],
            to_gw.len(),
            want[1],
            n.log_text(),
            g.log_text()
        );
        drain(n, node_token, "i", to_node).await;
        drain(g, gw_token, "k", to_gw).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn sign_pk(home: &Home) -> String {
    let doc: Value = serde_json::from_str(&home.identity_json()).unwrap();
    doc["sign_pk"].as_str().unwrap().to_string()
}

fn audit_events(home: &Home) -> Vec<Value> {
    let o = home.cli(&["audit", "verify"]);
    assert!(o.status.success(), "audit verify: {}", text(&o));
    let o = home.cli(&["audit", "export", "--jsonl"]);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_rotates_its_key_while_commands_flow_both_ways() {
    let (gw, node) = gateway_and_node(NODE, 1);
    pair(&gw, &node);
    let admin = gw.token("gateway:main", &["admin"], "1h");
    // Issued by the node's own key, before the rotation: it keeps working after it.
    let node_admin = node.token(NODE, &["admin"], "1h");
    let old_pk = sign_pk(&node);
    let g = gw.start();

    let (mut to_node, mut to_gw) = (BTreeMap::new(), BTreeMap::new());
    // A first run under the old key: its audit log gets checkpoints signed by it.
    let n = node.start();
    for i in 0..10 {
        command(&g, &admin, i).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while to_node.len() < 10 {
        assert!(std::time::Instant::now() < deadline, "{}", n.log_text());
        drain(&n, &node_admin, "i", &mut to_node).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    n.stop();
    // Commands queued while the node is away are sealed to the key it is about to
    // retire. The node delivers the rotation first thing at its next start, before its
    // first pull: these arrive after the switch and open only with the retired key.
    for i in 10..20 {
        command(&g, &admin, i).await;
    }
    let o = node.cli(&["identity", "rotate"]);
    assert!(o.status.success(), "{}", text(&o));
    let new_pk = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert_ne!(new_pk, old_pk);
    let again = node.cli(&["identity", "rotate"]);
    assert!(!again.status.success(), "one rotation waits at a time");
    assert_eq!(
        sign_pk(&node),
        old_pk,
        "nothing switches before the gateway agrees"
    );

    let n = node.start();
    // Both directions keep flowing while the rotation is delivered and applied.
    for i in 20..80 {
        command(&g, &admin, i).await;
        node_sends(&n, &node_admin, i).await;
        if i % 10 == 0 {
            drain(&n, &node_admin, "i", &mut to_node).await;
            drain(&g, &admin, "k", &mut to_gw).await;
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let rotation = node.data().join("rotation.json");
    wait_for("the rotation to complete", Duration::from_secs(30), || {
        (!rotation.exists()).then_some(())
    });
    assert_eq!(sign_pk(&node), new_pk);
    // After the switch: more both ways, sealed and signed with the new key.
    for i in 80..100 {
        command(&g, &admin, i).await;
        node_sends(&n, &node_admin, i).await;
    }
    let sides = [(&n, node_admin.as_str()), (&g, admin.as_str())];
    drain_until(sides, [&mut to_node, &mut to_gw], [100, 80]).await;
    assert_eq!(
        to_node,
        (0..100).map(|i| (i, 1)).collect::<BTreeMap<_, _>>()
    );
    assert_eq!(to_gw, (20..100).map(|i| (i, 1)).collect::<BTreeMap<_, _>>());

    // The switch is in both audit logs, naming the new key.
    n.stop();
    g.stop();
    let node_log = audit_events(&node);
    assert!(
        node_log
            .iter()
            .any(|e| e["event"] == "rotate" && e["detail"].as_str().unwrap().contains(&new_pk)),
        "{node_log:?}"
    );
    let gw_log = audit_events(&gw);
    assert!(
        gw_log.iter().any(|e| e["event"] == "rotate"
            && e["actor"] == NODE
            && e["detail"].as_str().unwrap().ends_with(&new_pk)),
        "{gw_log:?}"
    );
    // The node's log verifies with its key history; with the new key alone its older
    // checkpoints do not: the history is what makes it pass.
    let o = node.cli(&["audit", "verify", "--require-checkpoint"]);
    assert!(o.status.success(), "{}", text(&o));
    let history = node.data().join("key-history.json");
    let aside = node.data().join("key-history.json.aside");
    std::fs::rename(&history, &aside).unwrap();
    let o = node.cli(&["audit", "verify"]);
    assert!(!o.status.success(), "{}", text(&o));
    std::fs::rename(&aside, &history).unwrap();
}

async fn inbox_status(d: &Daemon, token: &str) -> u16 {
    http()
        .get(d.url("/v1/inbox?limit=1"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_rotates_its_key_while_commands_flow_both_ways() {
    let (gw, node) = gateway_and_node(NODE, 1);
    pair(&gw, &node);
    // Issued by the gateway's key before its rotation: for the gateway itself, and for
    // the node (which honours the gateway's tokens).
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let at_node_old = gw.token(NODE, &["admin"], "1h");
    let node_admin = node.token(NODE, &["admin"], "1h");
    let old_pk = sign_pk(&gw);
    let (mut to_node, mut to_gw) = (BTreeMap::new(), BTreeMap::new());
    let g = gw.start();
    let n = node.start();
    for i in 0..20 {
        command(&g, &admin, i).await;
        node_sends(&n, &node_admin, i).await;
    }
    // Commands queued now are signed with the key the gateway is about to retire.
    for i in 20..30 {
        command(&g, &admin, i).await;
    }
    g.stop();
    // Sealed to the retired key while the gateway is away.
    for i in 20..40 {
        node_sends(&n, &node_admin, i).await;
    }
    let o = gw.cli(&["identity", "rotate"]);
    assert!(o.status.success(), "{}", text(&o));
    let new_pk = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert_ne!(new_pk, old_pk);
    let g = gw.start();
    let rotation = gw.data().join("rotation.json");
    wait_for("the gateway to switch", Duration::from_secs(20), || {
        (!rotation.exists()).then_some(())
    });
    assert_eq!(sign_pk(&gw), new_pk);
    for i in 40..100 {
        command(&g, &admin, i + 10).await;
        node_sends(&n, &node_admin, i).await;
        if i % 10 == 0 {
            drain(&n, &node_admin, "i", &mut to_node).await;
            drain(&g, &admin, "k", &mut to_gw).await;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let sides = [(&n, node_admin.as_str()), (&g, admin.as_str())];
    drain_until(sides, [&mut to_node, &mut to_gw], [90, 100]).await;
    let want_node: BTreeMap<i64, usize> = (0..30).chain(50..110).map(|i| (i, 1)).collect();
    assert_eq!(to_node, want_node);
    assert_eq!(to_gw, (0..100).map(|i| (i, 1)).collect::<BTreeMap<_, _>>());

    // The node trusts the new key (a token the gateway issues now is honoured), and
    // still the retired one during the grace (a token issued before).
    let at_node_new = gw.token(NODE, &["admin"], "1h");
    assert_eq!(inbox_status(&n, &at_node_new).await, 200);
    assert_eq!(inbox_status(&n, &at_node_old).await, 200);
    // The gateway honours its own tokens from before the rotation too.
    assert_eq!(inbox_status(&g, &admin).await, 200);
    n.stop();
    g.stop();
    // The gateway's own log names who ran `identity rotate` on its host.
    let gw_log = audit_events(&gw);
    let me = outpost::cli::actor::local_actor();
    assert!(
        gw_log.iter().any(|e| e["event"] == "rotate"
            && e["actor"] == me.as_str()
            && e["detail"].as_str().unwrap().ends_with(&new_pk)),
        "{gw_log:?}"
    );
    let node_log = audit_events(&node);
    assert!(
        node_log.iter().any(|e| e["event"] == "rotate"
            && e["actor"] == "gateway:main"
            && e["detail"].as_str().unwrap().ends_with(&new_pk)),
        "{node_log:?}"
    );
}

/// An enrollment token made before the gateway rotated its key pins the retired keys:
/// the gateway's hello carries its rotation, which links them to its new document, so
/// a device flashed with the old token still enrolls during the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_made_before_a_gateway_rotation_still_enrolls() {
    use crate::self_enroll::{
        command_is_delivered, enrolling_node, enrollment_becomes, gateway, gw_url, make_token,
    };
    let (gw, g) = gateway();
    let token = make_token(&gw, &["--ttl", "1h", "--max-uses", "5"]);
    let o = gw.cli(&["identity", "rotate", "--wait", "20"]);
    assert!(o.status.success(), "{}", text(&o));
    let (home, _) = enrolling_node("node:late", &gw_url(&g), &token);
    let n = home.start();
    enrollment_becomes(&n, "enrolled").await;
    command_is_delivered(&gw, &g, "node:late").await;
    // The node trusts the gateway's new document, not the retired one.
    let o = home.cli(&["trust", "ls"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("gateway:main"), "{}", text(&o));
}
