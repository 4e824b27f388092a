//! Fleet state across gateway replicas on one database (the `gateway_pg` binary only):
//! set through one replica, read through the other; a node's long-poll held at one
//! replica answered by a desired version written at the other; desired writes racing
//! through both replicas lose none of each other's changes; a replica killed mid-way
//! loses no acknowledged version.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fleet_state::{call, desired_of, pull, selected};
use crate::harness::Daemon;
use crate::replicas::replicas;
use crate::sim::{gateway_document, SimNode};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_share_labels_and_state_and_race_without_losing_a_write() {
    let Some(homes) = replicas(2) else { return };
    let sim = SimNode::generated("node:shared");
    sim.enroll(&homes[0]);
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let gws: Vec<Daemon> = homes.iter().map(|h| h.start()).collect();
    let gdoc = gateway_document(&gws[0]).await;

    // Labels set through one replica select through the other.
    let (st, v) = call(
        &gws[0],
        "PATCH",
        "/v1/nodes/node:shared/labels",
        &admin,
        &[],
        Some(json!({"set": {"site": "north"}})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let got = selected(&gws[1], &admin, "site=north").await.unwrap();
    assert!(got.contains("node:shared"), "{got:?}");

    // A long-poll held at replica 1 is answered by a version written at replica 0.
    let started = Instant::now();
    let held = pull(&sim, &gws[1], 30, 0);
    let write = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (st, v) = call(
            &gws[0],
            "PUT",
            "/v1/nodes/node:shared/desired",
            &admin,
            &[],
            Some(json!({"led": "on"})),
        )
        .await;
        assert_eq!((st, v["version"].as_u64()), (200, Some(1)), "{v}");
    };
    let (answer, ()) = tokio::join!(held, write);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "woken, not timed out"
    );
    let got = desired_of(&sim, &gdoc, &answer);
    assert_eq!(got.len(), 1, "{answer}");
    assert_eq!(got[0]["desired"], json!({"led": "on"}));

    // Merge patches racing through both replicas: every one lands, versions 2..=41.
    let mut writes = Vec::new();
    for i in 0..40u64 {
        let gw = &gws[(i % 2) as usize];
        let admin = admin.clone();
        writes.push(async move {
            let (st, v) = call(
                gw,
                "PATCH",
                "/v1/nodes/node:shared/desired",
                &admin,
                &[],
                Some(json!({ format!("k{i}"): i })),
            )
            .await;
            assert_eq!(st, 200, "{v}");
            v["version"].as_u64().unwrap()
        });
    }
    let mut versions: Vec<u64> = futures_util::future::join_all(writes).await;
    versions.sort_unstable();
    assert_eq!(
        versions,
        (2..=41).collect::<Vec<_>>(),
        "each write its own version"
    );
    let (_, s) = call(
        &gws[1],
        "GET",
        "/v1/nodes/node:shared/state",
        &admin,
        &[],
        None,
    )
    .await;
    assert_eq!(s["desired_version"], 41);
    let doc = s["desired"].as_object().unwrap();
    assert_eq!(doc.len(), 41, "no write lost another's change: {s}");

    // A replica killed: what it acknowledged is read through the other.
    let mut gws = gws;
    let (st, v) = call(
        &gws[0],
        "PATCH",
        "/v1/nodes/node:shared/desired",
        &admin,
        &[],
        Some(json!({"last": true})),
    )
    .await;
    assert_eq!((st, v["version"].as_u64()), (200, Some(42)));
    gws[0].signal(9);
    let _ = gws[0].child.wait();
    let (_, s) = call(
        &gws[1],
        "GET",
        "/v1/nodes/node:shared/state",
        &admin,
        &[],
        None,
    )
    .await;
    assert_eq!(
        (s["desired_version"].clone(), s["desired"]["last"].clone()),
        (json!(42), json!(true))
    );
    let v: Value = pull(&sim, &gws[1], 0, 1).await;
    assert_eq!(desired_of(&sim, &gdoc, &v)[0]["version"], 42);
}
