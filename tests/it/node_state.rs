//! The node's state as local software and its gateway meet it (PROTOCOL §10.4, §16.4):
//! the local state API with its scopes, `If-Match` and refusals; reported state that
//! survives a kill -9; desired state taken only from the node's own gateway and only
//! when newer; operator facts checked at config time.

use serde_json::{json, Value};

use crate::harness::{gateway_and_node, http, pair, text, Home};

async fn get(d: &crate::harness::Daemon, token: Option<&str>) -> (u16, Value) {
    let mut r = http().get(d.url("/v1/state"));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

async fn patch(
    d: &crate::harness::Daemon,
    token: &str,
    if_match: Option<&str>,
    body: String,
) -> (u16, Value) {
    let mut r = http()
        .patch(d.url("/v1/state/reported"))
        .bearer_auth(token)
        .header("Content-Type", "application/json")
        .body(body);
    if let Some(m) = if_match {
        r = r.header("If-Match", m);
    }
    let resp = r.send().await.unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

fn code(v: &Value) -> Option<&str> {
    v["error"]["code"].as_str()
}

#[tokio::test(flavor = "multi_thread")]
async fn local_software_reads_desired_and_patches_reported_state() {
    let home = Home::init("node", "node:pump-17", "");
    let d = home.start();
    let read = home.token("node:pump-17", &["state:read"], "10m");
    let write = home.token("node:pump-17", &["state:write"], "10m");
    let admin = home.token("node:pump-17", &["admin"], "10m");
    let tool = home.token("node:pump-17", &["tool:echo"], "10m");

    assert_eq!(get(&d, None).await.0, 401);
    let (st, v) = get(&d, Some(&tool)).await;
    assert_eq!((st, code(&v)), (403, Some("forbidden")), "{v}");
    let (st, v) = get(&d, Some(&read)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v,
        json!({"desired": {}, "desired_version": 0, "reported": {}, "reported_version": 0})
    );

    let (st, v) = patch(&d, &read, None, r#"{"fan":1}"#.into()).await;
    assert_eq!(
        (st, code(&v)),
        (403, Some("forbidden")),
        "state:read does not write"
    );
    let (st, v) = patch(
        &d,
        &write,
        None,
        r#"{"fan":{"rpm":900,"mode":"auto"}}"#.into(),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["reported_version"], 1);
    assert_eq!(v["reported"], json!({"fan": {"rpm": 900, "mode": "auto"}}));

    // If-Match guards a stale write; nothing is written.
    let (st, v) = patch(&d, &write, Some("0"), r#"{"fan":null}"#.into()).await;
    assert_eq!((st, code(&v)), (412, Some("version_conflict")), "{v}");
    let (st, v) = patch(
        &d,
        &admin,
        Some("1"),
        r#"{"fan":{"mode":null},"led":"on"}"#.into(),
    )
    .await;
    assert_eq!(st, 200, "admin covers state:write: {v}");
    assert_eq!(v["reported"], json!({"fan": {"rpm": 900}, "led": "on"}));
    assert_eq!(v["reported_version"], 2);

    // Refusals, each with its code, and nothing lost.
    let (st, v) = patch(&d, &write, None, "[1]".into()).await;
    assert_eq!((st, code(&v)), (400, Some("bad_state")), "{v}");
    let big = json!({"blob": "x".repeat(70_000)}).to_string();
    let (st, v) = patch(&d, &write, None, big).await;
    assert_eq!((st, code(&v)), (400, Some("bad_state")), "{v}");
    let (st, v) = patch(&d, &write, Some("two"), "{}".into()).await;
    assert_eq!((st, code(&v)), (400, Some("bad_request")), "{v}");
    let (st, v) = patch(&d, &write, None, "{nope".into()).await;
    assert_eq!((st, code(&v)), (400, Some("bad_request")), "{v}");
    let r = http()
        .patch(d.url("/v1/state/reported"))
        .bearer_auth(&write)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let (_, v) = get(&d, Some(&admin)).await;
    assert_eq!(v["reported_version"], 2);
    assert_eq!(v["reported"], json!({"fan": {"rpm": 900}, "led": "on"}));

    // Concurrent writers never share a version.
    let mut writes = Vec::new();
    for i in 0..8 {
        let (url, t) = (d.url("/v1/state/reported"), write.clone());
        writes.push(tokio::spawn(async move {
            let r = http()
                .patch(url)
                .bearer_auth(t)
                .header("Content-Type", "application/json")
                .body(json!({ format!("w{i}"): i }).to_string())
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()["reported_version"]
                .as_u64()
                .unwrap()
        }));
    }
    let mut versions = Vec::new();
    for w in writes {
        versions.push(w.await.unwrap());
    }
    versions.sort();
    assert_eq!(versions, (3..=10).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn reported_state_survives_a_kill_and_its_version_never_goes_back() {
    let home = Home::init("node", "node:pump-18", "");
    let write = home.token("node:pump-18", &["state:write", "state:read"], "10m");
    let d = home.start();
    for i in 1..=3 {
        let (st, v) = patch(&d, &write, None, json!({ "n": i }).to_string()).await;
        assert_eq!((st, v["reported_version"].as_u64()), (200, Some(i)), "{v}");
    }
    // Answered means durable: SIGKILL right after the answer.
    d.signal(libc::SIGKILL);
    drop(d);
    let d = home.start();
    let (st, v) = get(&d, Some(&write)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["reported_version"].as_u64(), &v["reported"]),
        (Some(3), &json!({"n": 3}))
    );
    let (_, v) = patch(&d, &write, Some("3"), r#"{"n":4}"#.into()).await;
    assert_eq!(v["reported_version"], 4, "{v}");
}

/// `outpost envelope seal` as `home`, to `to`.
fn seal(home: &Home, to: &str, payload_type: &str, payload: &Value) -> Vec<u8> {
    let o = home.cli_stdin(
        &["envelope", "seal", "--to", to, "--type", payload_type],
        payload.to_string().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    o.stdout
}

async fn push(d: &crate::harness::Daemon, envelope: Vec<u8>) -> (u16, Value) {
    let r = http()
        .post(d.url("/v1/envelopes"))
        .header("Content-Type", "application/json")
        .body(envelope)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn desired_state_comes_from_the_own_gateway_only_and_never_goes_back() {
    // The gateway does not run: its envelopes reach the node pushed, through the same
    // receive pipeline a pull uses.
    let (gw, node) = gateway_and_node("node:fan-3", 1);
    pair(&gw, &node);
    let other = Home::init("node", "node:other", "");
    let o = node.cli_stdin(
        &["trust", "add", "-", "--send"],
        other.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = other.cli_stdin(
        &["trust", "add", "-", "--send"],
        node.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let d = node.start();
    let read = node.token("node:fan-3", &["state:read"], "10m");

    let v2 = seal(
        &gw,
        "node:fan-3",
        "DESIRED_STATE",
        &json!({"desired": {"fan": 3}, "version": 2}),
    );
    let (st, v) = push(&d, v2.clone()).await;
    assert_eq!(st, 202, "{v}");
    let first_id = v["message_id"].as_str().unwrap().to_string();
    let (_, s) = get(&d, Some(&read)).await;
    assert_eq!(
        (s["desired_version"].as_u64(), &s["desired"]),
        (Some(2), &json!({"fan": 3}))
    );

    // A replay, an older version: acked as duplicates, nothing changes.
    assert_eq!(push(&d, v2).await.0, 200);
    let v1 = seal(
        &gw,
        "node:fan-3",
        "DESIRED_STATE",
        &json!({"desired": {"fan": 1}, "version": 1}),
    );
    let (st, v) = push(&d, v1).await;
    assert_eq!((st, v["duplicate"].as_bool()), (200, Some(true)), "{v}");
    // From a peer that may send, but is not the node's gateway: refused.
    let forged = seal(
        &other,
        "node:fan-3",
        "DESIRED_STATE",
        &json!({"desired": {"fan": 9}, "version": 9}),
    );
    let (st, v) = push(&d, forged).await;
    assert_eq!((st, code(&v)), (403, Some("forbidden")), "{v}");
    // Not an object: refused with its reason.
    let bad = seal(
        &gw,
        "node:fan-3",
        "DESIRED_STATE",
        &json!({"desired": [1], "version": 5}),
    );
    let (st, v) = push(&d, bad).await;
    assert_eq!((st, code(&v)), (400, Some("bad_state")), "{v}");
    let (_, s) = get(&d, Some(&read)).await;
    assert_eq!(
        (s["desired_version"].as_u64(), &s["desired"]),
        (Some(2), &json!({"fan": 3}))
    );
    // It went to the node's state, not the inbox; a newer version replaces it.
    let admin = node.token("node:fan-3", &["admin"], "10m");
    let inbox: Value = http()
        .get(d.url("/v1/inbox"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(inbox["messages"], json!([]), "{inbox}");
    let v3 = seal(
        &gw,
        "node:fan-3",
        "DESIRED_STATE",
        &json!({"desired": {"fan": 4}, "version": 3}),
    );
    assert_eq!(push(&d, v3).await.0, 202);
    drop(d);
    let d = node.start();
    let (_, s) = get(&d, Some(&read)).await;
    assert_eq!(
        (s["desired_version"].as_u64(), &s["desired"]),
        (Some(3), &json!({"fan": 4}))
    );
    d.stop();
    // Audited like any accepted envelope, once.
    let counts = crate::harness::envelope_accepted_counts(&node);
    assert_eq!(counts.get(&first_id), Some(&1), "{counts:?}");
}

#[test]
fn a_bad_fact_is_a_config_error_that_names_it() {
    let home = Home::init(
        "node",
        "node:pump-19",
        "[inventory]\nfacts = { firmware = \"2.4.1\", os = \"mine\", Bad = \"x\" }\n",
    );
    let o = home.cli(&["config", "check"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("inventory.facts.os") && t.contains("inventory.facts.Bad"),
        "{t}"
    );
    assert!(!t.contains("inventory.facts.firmware"), "{t}");
}
