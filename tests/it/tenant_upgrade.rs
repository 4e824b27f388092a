//! Upgrade (issue 37, PROTOCOL §18): a gateway home written by the release before
//! tenants opens with every node in the tenant `default` and nothing else changed.
//!
//! The fixtures `tests/fixtures/pre-tenants-gateway.tar.gz` (the embedded store) and
//! `pre-tenants-gateway-pg.tar.gz` (PostgreSQL: the home's `database.sql` is its
//! database, dumped) are gateway homes (config, keys, state) made by that release,
//! commit bc82153, running [`make_the_fixture`]; `snapshot.json` in each holds what that
//! gateway answered, restarted on that state. This test opens each with this build and
//! asks the same questions.

use std::path::Path;
use std::process::Command;

use outpost::clock::{Clock, SystemClock};
use serde_json::{json, Value};

use crate::harness::{text, Daemon, Home};
use crate::self_enroll::make_token;
use crate::sim::{command, gateway_document, SimNode};
use crate::tenants::send;

/// The fixture of this binary's engine: on PostgreSQL the home's `database.sql` is its
/// database, dumped.
fn fixture() -> std::path::PathBuf {
    let name = match crate::GATEWAY_ENGINE {
        "postgres" => "pre-tenants-gateway-pg.tar.gz",
        _ => "pre-tenants-gateway.tar.gz",
    };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The fixture's devices: their ids and key seeds (the test re-creates their keys).
const NODES: [(&str, u8); 3] = [("node:a", 91), ("node:b", 92), ("node:c", 93)];

fn sims() -> Vec<SimNode> {
    NODES
        .iter()
        .map(|(id, seed)| SimNode::with_keys(id, *seed))
        .collect()
}

/// What the gateway answers about its fleet, as the fixture's `snapshot.json` keeps it.
async fn snapshot(home: &Home, gw: &Daemon, token: &str, messages: &[String]) -> Value {
    let get = |path: String| async move {
        let (st, v) = send(gw, "GET", &path, token, None).await;
        assert_eq!(st, 200, "{path}: {v}");
        v
    };
    let mut nodes = get("/v1/nodes".into()).await;
    for n in nodes["nodes"].as_array_mut().unwrap() {
        timeless(n);
    }
    let mut detail = serde_json::Map::new();
    for (id, _) in NODES {
        let mut d = get(format!("/v1/nodes/{id}")).await;
        timeless(&mut d);
        let s = get(format!("/v1/nodes/{id}/state")).await;
        detail.insert(id.into(), json!({"node": d, "state": s}));
    }
    let mut msgs = serde_json::Map::new();
    for m in messages {
        msgs.insert(m.clone(), get(format!("/v1/messages/{m}")).await);
    }
    let mut rollouts = get("/v1/rollouts".into()).await;
    for r in rollouts["rollouts"].as_array_mut().unwrap() {
        // The one field this release adds: the operator's rollouts name no tenant.
        if r["tenant"].is_null() {
            r.as_object_mut().unwrap().remove("tenant");
        }
    }
    let enrollments = get("/v1/enrollments".into()).await;
    let trust = home.cli(&["trust", "ls"]);
    assert!(trust.status.success(), "{}", text(&trust));
    let trust = String::from_utf8(trust.stdout).unwrap();
    json!({
        "nodes": nodes, "detail": detail, "messages": msgs, "rollouts": rollouts,
        "enrollments": enrollments, "trust": trust,
    })
}

/// Where `was` and `is` differ, as JSON pointers with both values.
fn differences(at: &str, was: &Value, is: &Value, out: &mut Vec<String>) {
    match (was, is) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let (x, y) = (&a.get(k).cloned(), &b.get(k).cloned());
                let (x, y) = (
                    x.as_ref().unwrap_or(&Value::Null),
                    y.as_ref().unwrap_or(&Value::Null),
                );
                if a.contains_key(k) != b.contains_key(k) {
                    out.push(format!("{at}/{k}: {x} -> {y} (key only on one side)"));
                } else {
                    differences(&format!("{at}/{k}"), x, y, out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{at}/{i}"), x, y, out);
            }
        }
        _ if was != is => out.push(format!("{at}: {was} -> {is}")),
        _ => {}
    }
}

/// Drop what moves with the clock alone: the gateway's view of a node that has not
/// been seen since the start (`liveness`, `polling`) and its oldest message's age.
fn timeless(v: &mut Value) {
    if let Some(o) = v.as_object_mut() {
        for k in ["liveness", "oldest_age_s", "polling"] {
            o.remove(k);
        }
    }
}

/// The home unpacked into a fresh directory, its config pointing at it (and at a new
/// database holding the dump, on PostgreSQL); `None` where PostgreSQL is missing.
fn unpack() -> Option<(Home, Value)> {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new("tar")
        .arg("-xzf")
        .arg(fixture())
        .arg("-C")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("snapshot.json")).unwrap())
            .unwrap();
    let old = recorded["home"].as_str().unwrap();
    let cfg = dir.path().join("outpost.toml");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, toml.replace(old, dir.path().to_str().unwrap())).unwrap();
    let db = if crate::GATEWAY_ENGINE == "postgres" {
        let pg = crate::pg::PgCluster::shared()?;
        let url = pg.create_database();
        pg.psql_file(&url, &dir.path().join("database.sql"));
        Home::use_database(dir.path(), &url);
        Some(url)
    } else {
        None
    };
    let home = Home {
        dir,
        node_id: "gateway:main".into(),
        db,
    };
    Some((home, recorded))
}

/// The fixture's gateway stopped at `made_at_ms`; it is started again, under
/// libfaketime, a second later by its clock (its messages' TTLs, their delivery leases
/// and its tokens count from then, whenever this test runs), and its devices sign with
/// that clock too.
fn clock_of(recorded: &Value, lib: &str) -> (Vec<(String, String)>, i64) {
    let start_ms = recorded["made_at_ms"].as_u64().unwrap() + 1_000;
    let at = outpost::token::format_rfc3339_ms(start_ms).expect("a time after 1970");
    let env = vec![
        ("LD_PRELOAD".to_string(), lib.to_string()),
        (
            "FAKETIME".into(),
            format!("@{}", at[..19].replace('T', " ")),
        ),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ];
    (env, start_ms as i64 - SystemClock.now_ms() as i64)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_home_from_before_tenants_opens_with_every_node_in_default() {
    let Some(lib) = crate::sync_batches::faketime_lib() else {
        return;
    };
    let Some((home, recorded)) = unpack() else {
        return;
    };
    let (env, skew_ms) = clock_of(&recorded, &lib);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let o = home.cli_env(
        &[
            "token",
            "issue",
            "--aud",
            "gateway:main",
            "--ttl",
            "1h",
            "--scope",
            "admin",
        ],
        &env,
    );
    assert!(o.status.success(), "{}", text(&o));
    let operator = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let gw = home.start_with_env(&env);
    let messages: Vec<String> = serde_json::from_value(recorded["messages"].clone()).unwrap();
    let now = snapshot(&home, &gw, &operator, &messages).await;
    let mut changed = Vec::new();
    differences("", &recorded["snapshot"], &now, &mut changed);
    assert!(
        changed.is_empty(),
        "the upgraded gateway answers otherwise: {changed:#?}"
    );

    // Every node is in `default`, which is the only tenant.
    let o = home.cli(&["tenant", "list", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let tenants: Vec<Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(tenants.len(), 1, "{tenants:?}");
    assert_eq!(tenants[0]["tenant"], "default", "{tenants:?}");
    assert_eq!(tenants[0]["usage"]["nodes"], 3, "{tenants:?}");
    assert_eq!(tenants[0]["usage"]["queued_messages"], 4, "{tenants:?}");

    // The devices, with their keys from before, get what was queued for them, by the
    // same ids, and nothing acknowledged comes back.
    let sims: Vec<SimNode> = sims().into_iter().map(|n| n.skewed(skew_ms)).collect();
    for sim in &sims {
        let (ids, _) = sim.pull(&gw, 0, 10).await;
        let want: Vec<String> =
            serde_json::from_value(recorded["queued"][&sim.id].clone()).unwrap();
        assert_eq!(ids, want, "{}", sim.id);
        sim.ack(&gw, &ids).await;
    }
    // And the store takes new writes: a tenant, a node in it, a command for it.
    let o = home.cli(&["tenant", "create", "acme"]);
    assert!(o.status.success(), "{}", text(&o));
    let n = SimNode::with_keys("node:a", 94).skewed(skew_ms);
    let o = home.cli_stdin(
        &["trust", "add", "-", "--send", "--tenant", "acme"],
        n.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let m = command(&gw, &operator, "node:a@acme", 0, 3600).await;
    assert_eq!(n.pull(&gw, 0, 10).await.0, [m]);
    assert!(sims[0].pull(&gw, 0, 10).await.0.is_empty(), "crossed");
}

/// Makes this engine's fixture with the binary in `$OUTPOST_TEST_BIN` (the release
/// before tenants) into `$OUTPOST_UPGRADE_FIXTURE_OUT`:
/// `OUTPOST_TEST_BIN=/old/outpost OUTPOST_UPGRADE_FIXTURE_OUT=$PWD/tests/fixtures/pre-tenants-gateway.tar.gz
/// cargo test --test it make_the_fixture -- --ignored` (`--test gateway_pg`, and the
/// `-pg` file, for PostgreSQL).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a tool, not a test: it writes the fixture the upgrade test reads, with an older binary"]
async fn make_the_fixture() {
    let out = std::env::var("OUTPOST_UPGRADE_FIXTURE_OUT").expect("OUTPOST_UPGRADE_FIXTURE_OUT");
    let home = Home::init("gateway", "gateway:main", "");
    let [a, b, c]: [SimNode; 3] = sims().try_into().ok().unwrap();
    a.enroll(&home);
    b.enroll(&home);
    let enroll = make_token(&home, &["--max-uses", "5", "--label", "site=south"]);
    let operator = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let (st, v) = c
        .self_enroll(&gw, &gateway_document(&gw).await, &enroll)
        .await;
    assert_eq!(st, 200, "{v}");
    let labels = json!({"set": {"site": "north", "role": "pump"}});
    let (st, v) = send(
        &gw,
        "PATCH",
        "/v1/nodes/node:a/labels",
        &operator,
        Some(labels),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let doc = json!({"fan": {"speed": 2}});
    let (st, v) = send(&gw, "PUT", "/v1/nodes/node:b/desired", &operator, Some(doc)).await;
    assert_eq!(st, 200, "{v}");
    let rollout = json!({"selector": "site=north",
                         "action": {"command": {"type": "note", "body": {"r": 1}}}});
    let (st, v) = send(&gw, "POST", "/v1/rollouts", &operator, Some(rollout)).await;
    assert_eq!(st, 201, "{v}");
    // Let the rollout send what it sends before the devices pull.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let mut messages = Vec::new();
    for (node, i) in [("node:a", 1), ("node:a", 2), ("node:b", 3), ("node:c", 4)] {
        messages.push(command(&gw, &operator, node, i, 3 * 86_400).await);
    }
    // node:a takes its messages and acknowledges the first; the rest stay queued.
    let (ids, _) = a.pull(&gw, 0, 10).await;
    a.ack(&gw, &ids[..1]).await;
    let mut queued = serde_json::Map::new();
    queued.insert("node:a".into(), json!(ids[1..]));
    for sim in [&b, &c] {
        let (ids, _) = sim.pull(&gw, 0, 10).await;
        queued.insert(sim.id.clone(), json!(ids));
    }
    // The picture is what that release answers once restarted on this store (what
    // it keeps only in memory, such as when a node was last seen, is gone by then).
    gw.stop();
    let gw = home.start();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let snap = snapshot(&home, &gw, &operator, &messages).await;
    let made_at_ms = SystemClock.now_ms();
    gw.stop();
    let recorded = json!({
        "home": home.dir.path().to_str().unwrap(),
        "made_by": String::from_utf8(crate::harness::outpost(&["--version"]).stdout).unwrap().trim(),
        "made_at_ms": made_at_ms, "messages": messages, "queued": queued,
        "snapshot": snap,
    });
    if let Some(url) = &home.db {
        let pg = crate::pg::PgCluster::shared().unwrap();
        std::fs::write(home.dir.path().join("database.sql"), pg.dump(url)).unwrap();
    }
    std::fs::write(
        home.dir.path().join("snapshot.json"),
        serde_json::to_string_pretty(&recorded).unwrap(),
    )
    .unwrap();
    let o = Command::new("tar")
        .arg("-czf")
        .arg(&out)
        .arg("-C")
        .arg(home.dir.path())
        .arg(".")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}
