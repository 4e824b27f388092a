//! Key rotation of a tenant's node (PROTOCOL §15.7, §18.1): the node rotates at its
//! address, as any node does; the node of the same id in another tenant keeps its key
//! and its traffic, and cannot apply the other's statement.

use serde_json::json;

use crate::harness::{text, Home};
use crate::sim::{command, SimNode};
use crate::tenants::{events_of, tenant_token};

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_node_rotates_its_key_and_the_same_id_elsewhere_keeps_its_own() {
    let home = Home::init("gateway", "gateway:main", "");
    let o = home.cli(&["tenant", "create", "acme"]);
    assert!(o.status.success(), "{}", text(&o));
    let plain = SimNode::with_keys("node:r", 101);
    plain.enroll(&home);
    let old = SimNode::with_keys("node:r", 102);
    let o = home.cli_stdin(
        &["trust", "add", "-", "--send", "--tenant", "acme"],
        old.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let operator = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let new = SimNode::with_keys("node:r", 103);
    let rot = outpost::envelope::KeyRotation::new(old.keys(), new.keys(), new.document());
    let body = serde_json::to_value(&rot).unwrap();

    // The plain node cannot apply acme's statement: it is not that node's key.
    let (st, v) = plain
        .signed(&gw, "POST", "/v1/nodes/node:r/rotate", Some(&body))
        .await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (409, &json!("stale_rotation")),
        "{v}"
    );
    // acme's node can; the answer names its node id, as the device knows it.
    let (st, v) = old
        .signed(&gw, "POST", "/v1/nodes/node:r/rotate", Some(&body))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (&v["applied"], &v["node_id"]),
        (&json!(true), &json!("node:r"))
    );
    let o = home.cli(&["trust", "ls"]);
    let listed = String::from_utf8(o.stdout).unwrap();
    assert!(listed.contains("node:r@acme"), "{listed}");

    // The new key pulls acme's messages; the plain node, with its key, its own.
    let for_acme = command(&gw, &operator, "node:r@acme", 0, 3600).await;
    let for_plain = command(&gw, &operator, "node:r", 1, 3600).await;
    assert_eq!(
        new.pull(&gw, 0, 10).await.0,
        std::slice::from_ref(&for_acme)
    );
    assert_eq!(plain.pull(&gw, 0, 10).await.0, [for_plain]);
    // The retired key still pulls during its grace, acme's messages only.
    assert_eq!(old.pull(&gw, 0, 10).await.0, [for_acme]);

    // The event: the operator sees the address, acme's token its node id; the
    // operator's own node of that id was not rotated.
    let all = events_of(&gw, &operator).await;
    assert!(
        all.contains("node_rotated") && all.contains("node:r@acme"),
        "{all}"
    );
    let acme = events_of(&gw, &tenant_token(&home, "acme", &["read"])).await;
    assert!(acme.contains("node_rotated"), "{acme}");
    assert!(
        !acme.contains("@acme"),
        "an address shown to a tenant: {acme}"
    );
    let rotated = all.matches("event: node_rotated").count();
    assert_eq!(rotated, 1, "{all}");
}
