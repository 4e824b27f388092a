//! Fleet state across gateway replicas on one database (the `gateway_pg` binary only):
//! set through one replica, read through the other; a node's long-poll held at one
//! replica answered by a desired version written at the other; desired writes racing
//! through both replicas lose none of each other's changes; a replica killed mid-way
//! loses no acknowledged version; a rollout goes on through the other replica when one
//! is killed, every node getting its part once.

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

/// Pull and ack through `gw` what waits for `sim`: the ids it got.
async fn take(sim: &SimNode, gw: &Daemon) -> Vec<String> {
    let (ids, _) = sim.pull(gw, 0, 100).await;
    if !ids.is_empty() {
        sim.ack(gw, &ids).await;
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_rollout_changes_nothing_a_client_sees() {
    let Some(homes) = replicas(2) else { return };
    let sims: Vec<SimNode> = (0..12)
        .map(|i| SimNode::generated(&format!("node:r{i:02}")))
        .collect();
    for s in &sims {
        s.enroll(&homes[0]);
    }
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let mut gws: Vec<Daemon> = homes.iter().map(|h| h.start()).collect();
    for s in &sims {
        let (st, v) = call(
            &gws[0],
            "PATCH",
            &format!("/v1/nodes/{}/labels", s.id),
            &admin,
            &[],
            Some(json!({"set": {"ring": "a"}})),
        )
        .await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, v) = call(
        &gws[0],
        "POST",
        "/v1/rollouts",
        &admin,
        &[],
        Some(json!({"selector": "ring=a", "phases": [4, "100%"],
                    "action": {"command": {"type": "upgrade"}}})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let id = v["rollout_id"].as_str().unwrap().to_string();
    let get = |gw: &Daemon| {
        let (url, admin) = (gw.url(&format!("/v1/rollouts/{id}")), admin.clone());
        async move {
            let resp = crate::harness::http()
                .get(url)
                .bearer_auth(admin)
                .send()
                .await
                .unwrap();
            resp.json::<Value>().await.unwrap()
        }
    };
    // Phase 1's nodes take their part through replica 1, then both replicas are killed
    // in turn around the phase change: every node still gets it, once.
    let mut got: std::collections::BTreeMap<String, usize> = Default::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&gws[1]).await["phases"][0]["succeeded"] != 4 {
        for s in &sims[..4] {
            *got.entry(s.id.clone()).or_default() += take(s, &gws[1]).await.len();
        }
        assert!(Instant::now() < deadline, "phase 1 did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gws[0].signal(9);
    let _ = gws[0].child.wait();
    while get(&gws[1]).await["state"] != "completed" {
        for s in &sims {
            *got.entry(s.id.clone()).or_default() += take(s, &gws[1]).await.len();
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not complete: {}",
            get(&gws[1]).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let v = get(&gws[1]).await;
    assert_eq!(v["counts"]["succeeded"], 12, "{v}");
    assert_eq!(got.len(), 12, "{got:?}");
    assert!(
        got.values().all(|&n| n == 1),
        "each node got it once: {got:?}"
    );
    // What the rollout wrote says the same through a restarted replica.
    gws[0] = homes[0].start();
    let again = get(&gws[0]).await;
    assert_eq!(
        (again["state"].clone(), again["counts"].clone()),
        (v["state"].clone(), v["counts"].clone())
    );
}
