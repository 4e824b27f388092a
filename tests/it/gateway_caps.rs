//! The per-node queue cap at the gateway (both engines): full is refused with
//! `queue_full`, and what the node acknowledges makes room again.

use serde_json::{json, Value};

use crate::harness::{http, Home};
use crate::sim::{command, SimNode};

#[tokio::test(flavor = "multi_thread")]
async fn a_full_node_queue_refuses_and_acks_make_room() {
    let home = Home::init(
        "gateway",
        "gateway:main",
        "[queue]\nmax_messages_per_recipient = 5\n",
    );
    let n = SimNode::with_keys("node:cap", 77);
    n.enroll(&home);
    let admin = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let refused = || async {
        let r = http()
            .post(gw.url("/v1/commands"))
            .bearer_auth(&admin)
            .json(&json!({"target": {"node_id": n.id}, "command_type": "note", "body": {}}))
            .send()
            .await
            .unwrap();
        let st = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        (st, v["error"]["code"].as_str().map(str::to_string))
    };
    for i in 0..5 {
        command(&gw, &admin, &n.id, i, 3600).await;
    }
    let (st, code) = refused().await;
    assert_eq!(code.as_deref(), Some("queue_full"), "{st}");
    let (first, pending) = n.pull(&gw, 0, 2).await;
    assert_eq!((first.len(), pending), (2, 5));
    n.ack(&gw, &first).await;
    for i in 5..7 {
        command(&gw, &admin, &n.id, i, 3600).await;
    }
    let (_, code) = refused().await;
    assert_eq!(code.as_deref(), Some("queue_full"));
    let (_, pending) = n.pull(&gw, 0, 1).await;
    assert_eq!(pending, 5);
}
