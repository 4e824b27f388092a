//! Fleet state at the gateway (PROTOCOL §16), on both engines: labels from enrollment
//! tokens and from an admin, every selector form (and malformed ones), a node's report
//! (inventory, reported state), desired state written 20 times while the node is away
//! and delivered as one envelope of the newest version, `If-Match`, a held long-poll
//! answered by a new version, and nothing lost or gone back across a kill -9.

use std::collections::BTreeSet;
use std::time::Duration;

use outpost::envelope::{open, OpenContext, Rights, TrustStore};
use serde_json::{json, Value};

use crate::harness::{http, Daemon, Home};
use crate::self_enroll::{gateway, make_token};
use crate::sim::{gateway_document, SimNode};

pub async fn call(
    d: &Daemon,
    method: &str,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut r = http().request(m, d.url(path)).bearer_auth(token);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let st = resp.status().as_u16();
    (st, resp.json().await.unwrap_or(Value::Null))
}

pub async fn selected(d: &Daemon, token: &str, selector: &str) -> Result<BTreeSet<String>, Value> {
    let resp = http()
        .get(d.url("/v1/nodes"))
        .query(&[("selector", selector)])
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let st = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap();
    if st != 200 {
        return Err(v);
    }
    Ok(v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node_id"].as_str().unwrap().to_string())
        .collect())
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn inventory(arch: &str, firmware: &str) -> Value {
    json!({"agent_version": "9.9.9", "arch": arch, "os": "Debian GNU/Linux 12 (bookworm)",
           "data_free_bytes": 1_000_000_000u64, "facts": {"firmware": firmware},
           "tools": ["echo", "sysinfo"]})
}

async fn report(sim: &SimNode, d: &Daemon, body: Value) -> (u16, Value) {
    let pq = format!("/v1/nodes/{}/report", sim.id);
    sim.signed(d, "POST", &pq, Some(&body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_from_tokens_and_admins_select_nodes_in_every_form() {
    let (gw, d) = gateway();
    let north = make_token(
        &gw,
        &[
            "--max-uses",
            "5",
            "--label",
            "site=north",
            "--label",
            "role=pump",
        ],
    );
    let south = make_token(&gw, &["--max-uses", "5", "--label", "site=south"]);
    let bad = gw.cli(&[
        "enroll-token",
        "create",
        "--max-uses",
        "1",
        "--label",
        "Site=x",
    ]);
    assert_eq!(bad.status.code(), Some(64), "a bad label is a usage error");
    let gdoc = gateway_document(&d).await;
    let [a, b, c, e] = ["node:a", "node:b", "node:c", "node:e"].map(SimNode::generated);
    for (sim, token) in [(&a, &north), (&b, &north), (&c, &south)] {
        let (st, v) = sim.self_enroll(&d, &gdoc, token).await;
        assert_eq!(st, 200, "{v}");
    }
    e.enroll(&gw); // by hand: no token, no labels
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let read = gw.token("gateway:main", &["read"], "1h");

    // An admin's change: applied whole, or refused whole.
    let path = "/v1/nodes/node:b/labels";
    let change = json!({"set": {"role": "fan", "rack": "7"}});
    let (st, v) = call(&d, "PATCH", path, &admin, &[], Some(change.clone())).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["labels"],
        json!({"rack": "7", "role": "fan", "site": "north"})
    );
    for bad in [
        json!({"set": {"Rack": "7"}}),
        json!({"set": {"rack": "x".repeat(64)}}),
        json!({"set": {"rack": "8"}, "remove": ["rack"]}),
    ] {
        let (st, v) = call(&d, "PATCH", path, &admin, &[], Some(bad)).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (400, Some("bad_label")),
            "{v}"
        );
    }
    let (st, v) = call(&d, "PATCH", path, &read, &[], Some(change.clone())).await;
    assert_eq!(st, 403, "a read token changes nothing: {v}");
    let (st, v) = call(
        &d,
        "PATCH",
        "/v1/nodes/node:zz/labels",
        &admin,
        &[],
        Some(change),
    )
    .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("unknown_node"))
    );
    let (st, v) = call(
        &d,
        "PATCH",
        "/v1/nodes/node:c/labels",
        &admin,
        &[],
        Some(json!({"remove": ["site"]})),
    )
    .await;
    assert_eq!((st, v["labels"].clone()), (200, json!({})), "{v}");
    let (st, _) = call(
        &d,
        "PATCH",
        "/v1/nodes/node:c/labels",
        &admin,
        &[],
        Some(json!({"set": {"site": "south"}})),
    )
    .await;
    assert_eq!(st, 200);

    // Inventory facts come from the node's report.
    let (st, v) = report(
        &a,
        &d,
        json!({"desired_version": 0, "inventory": inventory("aarch64", "2.4.1")}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, _) = report(
        &c,
        &d,
        json!({"desired_version": 0, "inventory": inventory("armv7l", "2.3.0")}),
    )
    .await;
    assert_eq!(st, 200);

    let cases: &[(&str, &[&str])] = &[
        ("", &["node:a", "node:b", "node:c", "node:e"]),
        ("site=north", &["node:a", "node:b"]),
        ("site==north", &["node:a", "node:b"]),
        ("site!=north", &["node:c", "node:e"]),
        ("site", &["node:a", "node:b", "node:c"]),
        ("!site", &["node:e"]),
        ("site in (north, south)", &["node:a", "node:b", "node:c"]),
        ("site notin (south)", &["node:a", "node:b", "node:e"]),
        ("site=north,role=pump", &["node:a"]),
        ("site=north, rack", &["node:b"]),
        ("inventory.arch=aarch64", &["node:a"]),
        ("inventory.arch in (aarch64,armv7l)", &["node:a", "node:c"]),
        ("inventory.firmware!=2.4.1", &["node:b", "node:c", "node:e"]),
        ("inventory.os", &["node:a", "node:c"]),
        ("!inventory.os", &["node:b", "node:e"]),
    ];
    for (sel, want) in cases {
        assert_eq!(selected(&d, &read, sel).await.unwrap(), set(want), "{sel}");
    }
    for (sel, at) in [
        ("site in (north", "14"),
        ("site north", "5"),
        ("=x", "0"),
        ("Site=x", "0"),
        ("site=north,,", "11"),
        ("site in (a b)", "11"),
    ] {
        let v = selected(&d, &read, sel).await.unwrap_err();
        assert_eq!(v["error"]["code"], "bad_selector", "{sel}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("character {at}:")),
            "{sel}: the position {at} is named: {msg}"
        );
    }

    // The listing carries labels and the agent version; the detail the inventory.
    let (_, v) = call(&d, "GET", "/v1/nodes", &read, &[], None).await;
    let row = |id: &str| {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node_id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        row("node:a")["labels"],
        json!({"role": "pump", "site": "north"})
    );
    assert_eq!(row("node:a")["agent_version"], "9.9.9");
    assert_eq!(row("node:e")["agent_version"], Value::Null);
    let (st, v) = call(&d, "GET", "/v1/nodes/node:a", &read, &[], None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["inventory"]["facts"]["firmware"], "2.4.1");
    assert_eq!(v["liveness"], "online");
    assert_eq!(v["state"]["in_sync"], true);
    let (st, v) = call(&d, "GET", "/v1/nodes/node:zz", &read, &[], None).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("unknown_node"))
    );
    // A report that says nothing new writes nothing; a malformed one is refused.
    let (st, v) = report(&a, &d, json!({"desired_version": 0, "bogus": 1})).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    drop(d);
}

/// The `DESIRED_STATE` envelopes of a pull answer, opened with the node's keys.
pub fn desired_of(
    sim: &SimNode,
    gw_doc: &outpost::envelope::IdentityDocument,
    answer: &Value,
) -> Vec<Value> {
    let mut trust = TrustStore::new();
    trust
        .add(
            gw_doc.clone(),
            Rights {
                send: true,
                issue: true,
            },
        )
        .unwrap();
    answer["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["payload_type"] == "DESIRED_STATE")
        .map(|e| {
            let ctx = OpenContext {
                me: &sim.id,
                keys: sim.keys(),
                previous_keys: None,
                trust: &trust,
                now_ms: outpost::clock::Clock::now_ms(&outpost::clock::SystemClock),
                skew_ms: 300_000,
                max_bytes: 1 << 20,
                max_ttl_ms: 7 * 86_400_000,
                pruned_ahead: None,
            };
            let o = open(e.to_string().as_bytes(), &ctx, &|_, _| false).expect("opens");
            let mut v: Value = serde_json::from_slice(&o.plaintext).unwrap();
            v["message_id"] = o.message_id.into();
            v
        })
        .collect()
}

pub async fn pull(sim: &SimNode, d: &Daemon, wait_s: u64, desired: u64) -> Value {
    let pq = format!(
        "/v1/nodes/{}/pull?wait_s={wait_s}&max=100&desired={desired}",
        sim.id
    );
    let (st, v) = sim.signed(d, "GET", &pq, None).await;
    assert_eq!(st, 200, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desired_state_set_20_times_offline_arrives_once_at_the_newest_version() {
    let gw = Home::init("gateway", "gateway:main", "");
    let mut d = gw.start();
    let sim = SimNode::generated("node:away");
    sim.enroll(&gw);
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let path = "/v1/nodes/node:away/desired";
    for i in 1..=20u64 {
        let (method, body) = if i % 2 == 1 {
            (
                "PUT",
                json!({"fan": {"speed": i}, "mode": "auto", "log": null}),
            )
        } else {
            ("PATCH", json!({"fan": {"speed": i}, "mode": null}))
        };
        let (st, v) = call(&d, method, path, &admin, &[], Some(body)).await;
        assert_eq!((st, v["version"].as_u64()), (200, Some(i)), "{v}");
    }
    // If-Match: a stale version is refused and nothing is written.
    let (st, v) = call(
        &d,
        "PATCH",
        path,
        &admin,
        &[("If-Match", "19")],
        Some(json!({"x": 1})),
    )
    .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (412, Some("version_conflict")),
        "{v}"
    );
    for (body, code) in [
        (json!([1, 2]), "bad_state"),
        (json!({"big": "x".repeat(70_000)}), "bad_state"),
    ] {
        let (st, v) = call(&d, "PUT", path, &admin, &[], Some(body)).await;
        assert_eq!((st, v["error"]["code"].as_str()), (400, Some(code)), "{v}");
    }
    let (st, v) = call(
        &d,
        "PUT",
        path,
        &admin,
        &[("If-Match", "x")],
        Some(json!({})),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    let (st, v) = call(
        &d,
        "PATCH",
        path,
        &admin,
        &[("If-Match", "\"20\"")],
        Some(json!({"fan": {"dir": "in"}})),
    )
    .await;
    assert_eq!((st, v["version"].as_u64()), (200, Some(21)), "{v}");
    let (st, v) = call(
        &d,
        "PUT",
        "/v1/nodes/node:nobody/desired",
        &admin,
        &[],
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("unknown_node"))
    );

    // The node comes back holding nothing: one envelope, the newest version.
    let gdoc = gateway_document(&d).await;
    let v = pull(&sim, &d, 0, 0).await;
    let got = desired_of(&sim, &gdoc, &v);
    assert_eq!(got.len(), 1, "{v}");
    assert_eq!(got[0]["version"], 21);
    // A null member means absent, in a PUT as in a PATCH.
    assert_eq!(
        got[0]["desired"],
        json!({"fan": {"speed": 20, "dir": "in"}})
    );
    assert_eq!(v["pending_count"], 1);
    // The same version sealed again is the same message; a node that holds it gets none.
    let again = desired_of(&sim, &gdoc, &pull(&sim, &d, 0, 0).await);
    assert_eq!(again[0]["message_id"], got[0]["message_id"]);
    assert!(desired_of(&sim, &gdoc, &pull(&sim, &d, 0, 21).await).is_empty());
    // A pull without `desired=` (an older node) never gets one.
    let (_, v) = sim
        .signed(&d, "GET", "/v1/nodes/node:away/pull?wait_s=0", None)
        .await;
    assert!(desired_of(&sim, &gdoc, &v).is_empty());

    // The state follows what the node reports; a report never goes back.
    let read = gw.token("gateway:main", &["read"], "1h");
    let state = |d: &Daemon| {
        let (d, read) = (d.url("/v1/nodes/node:away/state"), read.clone());
        async move {
            let resp = http().get(d).bearer_auth(read).send().await.unwrap();
            assert_eq!(resp.status().as_u16(), 200);
            resp.json::<Value>().await.unwrap()
        }
    };
    let s = state(&d).await;
    assert_eq!(s["in_sync"], false);
    assert_eq!(s["delta"], json!({"fan": {"speed": 20, "dir": "in"}}));
    let (st, v) = report(
        &sim,
        &d,
        json!({"desired_version": 21, "reported": {"doc": {"fan": {"speed": 20, "dir": "out"}, "temp": 41}, "version": 3}}),
    )
    .await;
    assert_eq!(
        (st, v.clone()),
        (200, json!({"desired_version": 21, "reported_version": 3}))
    );
    let s = state(&d).await;
    assert_eq!(s["delta"], json!({"fan": {"dir": "in"}}));
    assert_eq!(
        (s["in_sync"].clone(), s["node_desired_version"].clone()),
        (json!(false), json!(21))
    );
    let (_, v) = report(
        &sim,
        &d,
        json!({"desired_version": 21, "reported": {"doc": {"fan": {"speed": 20, "dir": "in"}}, "version": 4}}),
    )
    .await;
    assert_eq!(v["reported_version"], 4);
    let (_, v) = report(
        &sim,
        &d,
        json!({"desired_version": 21, "reported": {"doc": {"old": true}, "version": 2}}),
    )
    .await;
    assert_eq!(v["reported_version"], 4, "an older version is not taken");
    let s = state(&d).await;
    assert_eq!(
        (s["in_sync"].clone(), s["delta"].clone()),
        (json!(true), json!({}))
    );
    assert_eq!(s["reported"], json!({"fan": {"speed": 20, "dir": "in"}}));

    // kill -9: every acknowledged version is still there, none went back.
    d.signal(9);
    let _ = d.child.wait();
    let d = gw.start();
    let s = state(&d).await;
    assert_eq!(
        (s["desired_version"].clone(), s["reported_version"].clone()),
        (json!(21), json!(4))
    );
    let v = pull(&sim, &d, 0, 0).await;
    assert_eq!(desired_of(&sim, &gdoc, &v)[0]["version"], 21);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_long_poll_is_answered_by_a_new_desired_version() {
    let gw = Home::init("gateway", "gateway:main", "");
    let d = gw.start();
    let sim = SimNode::generated("node:held");
    sim.enroll(&gw);
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let gdoc = gateway_document(&d).await;
    let started = std::time::Instant::now();
    let held = pull(&sim, &d, 30, 0);
    let write = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (st, v) = call(
            &d,
            "PUT",
            "/v1/nodes/node:held/desired",
            &admin,
            &[],
            Some(json!({"led": "on"})),
        )
        .await;
        assert_eq!(st, 200, "{v}");
    };
    let (v, ()) = tokio::join!(held, write);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "answered when the version was written, not at the end of the poll"
    );
    let got = desired_of(&sim, &gdoc, &v);
    assert_eq!(got.len(), 1, "{v}");
    assert_eq!(got[0]["desired"], json!({"led": "on"}));
}

fn stdout(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", crate::harness::text(o));
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_labels_selects_shows_and_sets_desired_state_from_the_cli() {
    let (gw, d) = gateway();
    let token = make_token(&gw, &["--max-uses", "2", "--label", "site=north"]);
    let gdoc = gateway_document(&d).await;
    let [a, b] = ["node:cli-a", "node:cli-b"].map(SimNode::generated);
    for sim in [&a, &b] {
        let (st, v) = sim.self_enroll(&d, &gdoc, &token).await;
        assert_eq!(st, 200, "{v}");
    }
    let out = stdout(&gw.cli(&["nodes", "label", "node:cli-b", "site=south", "role=fan"]));
    assert_eq!(out.trim(), "node:cli-b: role=fan, site=south");
    let out = stdout(&gw.cli(&["nodes", "label", "node:cli-b", "role-"]));
    assert_eq!(out.trim(), "node:cli-b: site=south");
    let bad = gw.cli(&["nodes", "label", "node:cli-b", "Role=x"]);
    assert_eq!(
        bad.status.code(),
        Some(64),
        "{}",
        crate::harness::text(&bad)
    );

    let table = stdout(&gw.cli(&["nodes", "--selector", "site in (south)"]));
    assert!(
        table.contains("node:cli-b") && !table.contains("node:cli-a"),
        "{table}"
    );
    assert!(table.lines().next().unwrap().contains("LABELS"), "{table}");
    let o = gw.cli(&["nodes", "--selector", "site in (south"]);
    assert!(!o.status.success());
    assert!(
        crate::harness::text(&o).contains("bad_selector"),
        "{}",
        crate::harness::text(&o)
    );

    let out = stdout(&gw.cli(&[
        "nodes",
        "desired",
        "node:cli-a",
        "--set",
        r#"{"fan":{"speed":3}}"#,
    ]));
    assert!(out.contains("version 1 written"), "{out}");
    let out = stdout(&gw.cli(&[
        "nodes",
        "desired",
        "node:cli-a",
        "--merge",
        r#"{"fan":{"dir":"in"}}"#,
        "--if-match",
        "1",
    ]));
    assert!(out.contains("version 2 written"), "{out}");
    let stale = gw.cli(&[
        "nodes",
        "desired",
        "node:cli-a",
        "--merge",
        "{}",
        "--if-match",
        "1",
    ]);
    assert!(!stale.status.success());
    assert!(crate::harness::text(&stale).contains("version_conflict"));

    let (st, _) = report(
        &a,
        &d,
        json!({"desired_version": 2, "inventory": inventory("aarch64", "2.4.1"),
               "reported": {"doc": {"fan": {"speed": 3}}, "version": 1}}),
    )
    .await;
    assert_eq!(st, 200);
    let show = stdout(&gw.cli(&["nodes", "show", "node:cli-a"]));
    for want in [
        "site=north",
        "agent 9.9.9",
        "firmware = 2.4.1",
        "desired    version 2 (the node holds 2)",
        r#"out of sync: {"fan":{"dir":"in"}}"#,
    ] {
        assert!(show.contains(want), "{want:?} in {show}");
    }
    let v: Value =
        serde_json::from_str(&stdout(&gw.cli(&["nodes", "show", "node:cli-a", "--json"]))).unwrap();
    assert_eq!(v["state"]["desired_version"], 2);
    drop(d);
}
