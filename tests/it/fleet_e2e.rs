//! Fleet state end to end (PROTOCOL §16), a real node and a real gateway on both
//! engines: the node's inventory (with its operator facts) arrives when it connects and
//! a changed fact after it comes back; reported state written by local software reaches
//! the gateway within a poll; desired state written 20 times while the node is down
//! reaches it as one envelope of the newest version, and `delta`/`in_sync` follow what
//! the node then reports.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{gateway_and_node, http, pair, wait_for_async, Daemon, Home};

const WAIT: Duration = Duration::from_secs(30);

fn facts(node: &Home, firmware: &str) {
    let d = node.dir.path().join("outpost.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("70-inventory.toml"),
        format!("[inventory]\nfacts = {{ firmware = \"{firmware}\", line = \"b\" }}\n"),
    )
    .unwrap();
}

async fn get(d: &Daemon, path: &str, token: &str) -> Value {
    let resp = http()
        .get(d.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    resp.json().await.unwrap()
}

async fn send(d: &Daemon, method: &str, path: &str, token: &str, body: Value) -> Value {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let resp = http()
        .request(m, d.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let st = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(st, 200, "{method} {path}: {v}");
    v
}

/// `envelope_accepted` entries in the node's audit log for any desired version 1..=n.
fn desired_entries(node: &Home, n: u64) -> Vec<u64> {
    let counts = crate::harness::envelope_accepted_counts(node);
    (1..=n)
        .flat_map(|v| {
            let id = outpost::sync::wire::desired_message_id(&node.node_id, v);
            std::iter::repeat_n(v, counts.get(&id).copied().unwrap_or(0))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_reported_and_desired_state_flow_between_a_real_node_and_gateway() {
    let (gw, node) = gateway_and_node("node:e2e", 2);
    facts(&node, "2.4.1");
    pair(&gw, &node);
    let gwd = gw.start();
    let mut nd = node.start();
    let read = gw.token("gateway:main", &["read"], "1h");
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let local = node.token("node:e2e", &["state:read", "state:write"], "1h");

    // The inventory arrives when the node connects.
    let detail = wait_for_async("the node's inventory at the gateway", WAIT, || async {
        let v = get(&gwd, "/v1/nodes/node:e2e", &read).await;
        (!v["inventory"].is_null()).then_some(v)
    })
    .await;
    let inv = &detail["inventory"];
    assert_eq!(inv["agent_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(inv["arch"], std::env::consts::ARCH);
    assert_eq!(inv["facts"], json!({"firmware": "2.4.1", "line": "b"}));
    assert!(inv["data_free_bytes"].as_u64().unwrap() > 0, "{inv}");
    assert!(
        inv["tools"].as_array().unwrap().iter().any(|t| t == "echo"),
        "{inv}"
    );
    assert_eq!(detail["agent_version"], env!("CARGO_PKG_VERSION"));
    let sel = "/v1/nodes?selector=inventory.firmware%3D2.4.1";
    assert_eq!(
        get(&gwd, sel, &read).await["nodes"][0]["node_id"],
        "node:e2e"
    );

    // Local software writes reported state; the gateway has it within a poll.
    let v = send(
        &nd,
        "PATCH",
        "/v1/state/reported",
        &local,
        json!({"temp": 40}),
    )
    .await;
    assert_eq!(v["reported_version"], 1, "{v}");
    wait_for_async(
        "reported state at the gateway",
        Duration::from_secs(10),
        || async {
            let s = get(&gwd, "/v1/nodes/node:e2e/state", &read).await;
            (s["reported_version"] == 1 && s["reported"] == json!({"temp": 40})).then_some(())
        },
    )
    .await;

    // The node goes down; desired state is written 20 times meanwhile.
    nd.signal(9);
    let _ = nd.child.wait();
    for i in 1..=20u64 {
        let v = send(
            &gwd,
            "PATCH",
            "/v1/nodes/node:e2e/desired",
            &admin,
            json!({"setpoint": i, "mode": if i % 2 == 0 { json!("eco") } else { Value::Null }}),
        )
        .await;
        assert_eq!(v["version"], i);
    }
    facts(&node, "2.5.0");
    let nd = node.start();
    let s = wait_for_async("desired state on the node", WAIT, || async {
        let s = get(&nd, "/v1/state", &local).await;
        (s["desired_version"] == 20).then_some(s)
    })
    .await;
    assert_eq!(s["desired"], json!({"setpoint": 20, "mode": "eco"}));
    // Only the newest version was ever delivered (one audit entry, none in between).
    assert_eq!(desired_entries(&node, 20), vec![20]);

    // The gateway learns what the node holds and what changed about it.
    wait_for_async("the node's report after it came back", WAIT, || async {
        let v = get(&gwd, "/v1/nodes/node:e2e", &read).await;
        (v["state"]["node_desired_version"] == 20 && v["inventory"]["facts"]["firmware"] == "2.5.0")
            .then_some(())
    })
    .await;
    let st = get(&gwd, "/v1/nodes/node:e2e/state", &read).await;
    assert_eq!(st["in_sync"], false);
    assert_eq!(st["delta"], json!({"setpoint": 20, "mode": "eco"}));
    // The node's software applies it and says so: in sync.
    send(
        &nd,
        "PATCH",
        "/v1/state/reported",
        &local,
        json!({"setpoint": 20, "mode": "eco"}),
    )
    .await;
    wait_for_async(
        "in sync at the gateway",
        Duration::from_secs(10),
        || async {
            let s = get(&gwd, "/v1/nodes/node:e2e/state", &read).await;
            (s["in_sync"] == true).then_some(())
        },
    )
    .await;
    let row = get(&gwd, "/v1/nodes", &read).await;
    assert_eq!(row["nodes"][0]["in_sync"], true);

    // A fact that changes while the node runs (its key rotates) reaches the gateway
    // within a poll or two, with no reconnection.
    assert!(
        get(&gwd, "/v1/nodes/node:e2e", &read).await["inventory"]["key_rotated_at_ms"].is_null()
    );
    let o = node.cli(&["identity", "rotate"]);
    assert!(o.status.success(), "{}", crate::harness::text(&o));
    wait_for_async(
        "the rotation in the inventory at the gateway",
        WAIT,
        || async {
            let v = get(&gwd, "/v1/nodes/node:e2e", &read).await;
            v["inventory"]["key_rotated_at_ms"].as_u64().map(|_| ())
        },
    )
    .await;
    drop(nd);
}
