//! A node that went away does not count as listening (issue 25, defect 4): `system`
//! commands (`queue.not_queueable`) go only to a node listening now, and one accepted
//! must never reach the node late.

use std::time::{Duration, Instant};

use outpost::clock::{Clock, SystemClock};
use serde_json::{json, Value};

use crate::harness::{http, pair, Daemon, Home};
use crate::sim::SimNode;

async fn nodes(gw: &Daemon, admin: &str) -> Value {
    http()
        .get(gw.url("/v1/nodes"))
        .bearer_auth(admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn polling(gw: &Daemon, admin: &str, node: &str) -> bool {
    let v = nodes(gw, admin).await;
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["node_id"] == node && n["polling"] == true)
}

async fn system_command(gw: &Daemon, admin: &str, node: &str) -> (u16, Value) {
    let r = http()
        .post(gw.url("/v1/commands"))
        .bearer_auth(admin)
        .json(&json!({"target": {"node_id": node}, "command_type": "system", "body": {}}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The node's long-poll ends when its connection does, not when its wait would have:
/// after SIGTERM (the node closes its socket), the gateway stopped reporting it
/// `polling`, and accepting `system` commands for it, only when the abandoned poll's
/// 30 s wait ran out.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_closed_its_long_poll_is_not_listening_any_more() {
    let (gw_home, node_home) = crate::harness::gateway_and_node("node:gone", 30);
    pair(&gw_home, &node_home);
    let admin = gw_home.token("gateway:main", &["admin"], "1h");
    let gw = gw_home.start();
    let node = node_home.start();
    let start = Instant::now();
    while !polling(&gw, &admin, "node:gone").await {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never polled: {}",
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Past the re-poll grace (3 s): only the held poll makes it "listening".
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(polling(&gw, &admin, "node:gone").await);
    let stopped = Instant::now();
    node.signal(libc::SIGTERM);
    let mut seen_gone = None;
    while stopped.elapsed() < Duration::from_secs(8) {
        if !polling(&gw, &admin, "node:gone").await {
            seen_gone = Some(stopped.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = seen_gone.expect("still polling 8 s after the node's SIGTERM");
    assert!(
        took < Duration::from_secs(2),
        "polling for {took:?} after the node's SIGTERM"
    );
    let (st, v) = system_command(&gw, &admin, "node:gone").await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("recipient_offline")),
        "{took:?} after SIGTERM: {v}"
    );
}

/// By construction: a not-queueable command accepted while the node listens expires
/// within seconds, so if it is not delivered then (the gateway believed a node was
/// there that was not), it never is. Before, it kept the type's TTL (an hour by
/// default) and went out whenever the node came back.
#[tokio::test(flavor = "multi_thread")]
async fn a_not_queueable_command_expires_within_seconds_if_not_delivered() {
    let gw_home = Home::init("gateway", "gateway:main", "");
    let sim = SimNode::new(7);
    sim.enroll(&gw_home);
    let admin = gw_home.token("gateway:main", &["admin"], "1h");
    let gw = gw_home.start();
    // Between two polls: listening, so accepted.
    assert_eq!(sim.pull(&gw, 0, 10).await.0.len(), 0);
    let (st, v) = system_command(&gw, &admin, &sim.id).await;
    assert_eq!(st, 202, "{v}");
    let ttl_ms = v["expires_at_ms"].as_u64().unwrap() as i64 - SystemClock.now_ms() as i64;
    assert!(
        ttl_ms <= 10_000,
        "a not-queueable command lives {ttl_ms} ms: {v}"
    );
    // A queueable command keeps its TTL.
    let r = http()
        .post(gw.url("/v1/commands"))
        .bearer_auth(&admin)
        .json(&json!({"target": {"node_id": sim.id}, "command_type": "reconfigure", "body": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let other: Value = r.json().await.unwrap();
    // The node comes back after the short TTL: the system command is not handed out.
    tokio::time::sleep(Duration::from_millis(ttl_ms.max(0) as u64 + 1_500)).await;
    let (ids, pending) = sim.pull(&gw, 0, 10).await;
    assert_eq!(
        ids,
        vec![other["message_id"].as_str().unwrap().to_string()],
        "only the queueable command, pending {pending}"
    );
}
