//! A gateway whose database cannot answer says so (503 `storage_unavailable`), never
//! "unknown node": an operator retiring a device, or a caller queueing a command, must
//! not be told the node does not exist because the store could not be asked.

use serde_json::{json, Value};

use crate::harness::{http, pair, Home};
use crate::pg::PgCluster;

async fn post(url: String, token: &str, body: Value) -> (u16, Value) {
    let r = http()
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_database_away_retiring_a_node_and_commanding_one_are_503_not_unknown_node() {
    let Some(pg) = PgCluster::start_private() else {
        return;
    };
    let gw = Home::init("gateway", "gateway:main", "");
    Home::use_database(gw.dir.path(), &pg.create_database());
    let node = Home::init("node", "node:kept", "");
    let gwd = gw.start();
    pair(&gw, &node);
    let admin = gw.token("gateway:main", &["admin", "command:ping"], "10m");
    pg.stop_fast();

    let (st, v) = post(
        gwd.url("/v1/node_revocations"),
        &admin,
        json!({"node_id": "node:kept"}),
    )
    .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("storage_unavailable")),
        "retiring an enrolled node: {v}"
    );
    // A node this replica has not seen yet (enrolled through another replica, say):
    // without the database it cannot tell.
    for target in ["node:kept", "node:elsewhere"] {
        let (st, v) = post(
            gwd.url("/v1/commands"),
            &admin,
            json!({"target": {"node_id": target}, "command_type": "ping", "body": {}}),
        )
        .await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (503, Some("storage_unavailable")),
            "a command to {target}: {v}"
        );
    }

    pg.start();
}
