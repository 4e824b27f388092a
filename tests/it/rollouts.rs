//! Rollouts (PROTOCOL §17), on both engines: phases that advance as nodes succeed, a
//! node offline for a while getting its part when it returns, idempotent creation,
//! failures halting at the error threshold with nothing more sent, resume, cancel
//! withdrawing what is queued, the deadline expiring what never got there, dynamic
//! targets, and a tool call and a desired-state rollout to real nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet_state::call;
use crate::harness::{wait_for_async, Daemon, Home};
use crate::self_enroll::{gateway, make_token};
use crate::sim::{gateway_document, SimNode};

const WAIT: Duration = Duration::from_secs(30);

async fn create(d: &Daemon, admin: &str, key: Option<&str>, body: Value) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = key.iter().map(|k| ("Idempotency-Key", *k)).collect();
    call(d, "POST", "/v1/rollouts", admin, &headers, Some(body)).await
}

async fn rollout(d: &Daemon, token: &str, id: &str) -> Value {
    let (st, v) = call(d, "GET", &format!("/v1/rollouts/{id}"), token, &[], None).await;
    assert_eq!(st, 200, "{v}");
    v
}

async fn until_state(d: &Daemon, token: &str, id: &str, state: &str) -> Value {
    wait_for_async(&format!("rollout {id} {state}"), WAIT, || async {
        let v = rollout(d, token, id).await;
        (v["state"] == state).then_some(v)
    })
    .await
}

async fn node_states(d: &Daemon, token: &str, id: &str) -> BTreeMap<String, String> {
    let (_, v) = call(
        d,
        "GET",
        &format!("/v1/rollouts/{id}/nodes"),
        token,
        &[],
        None,
    )
    .await;
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node_id"].as_str().unwrap().to_string(),
                n["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Pull (and ack, or refuse with `refuse`) what waits for `sim`: the ids it got.
pub(crate) async fn take(sim: &SimNode, d: &Daemon, refuse: Option<&str>) -> Vec<String> {
    let (ids, _) = sim.pull(d, 0, 100).await;
    if ids.is_empty() {
        return ids;
    }
    let pq = format!("/v1/nodes/{}/ack", sim.id);
    let body = match refuse {
        None => json!({"message_ids": ids}),
        Some(code) => {
            json!({"message_ids": [], "rejected": ids.iter().map(|i| json!({"id": i, "code": code})).collect::<Vec<_>>()})
        }
    };
    let (st, v) = sim.signed(d, "POST", &pq, Some(&body)).await;
    assert_eq!(st, 200, "{v}");
    ids
}

/// A gateway with `n` simulated nodes labelled `site=north` (by their token) and one
/// `site=south`.
pub(crate) async fn fleet(n: usize) -> (Home, Daemon, Vec<SimNode>, String) {
    let (gw, d) = gateway();
    let north = make_token(&gw, &["--max-uses", "50", "--label", "site=north"]);
    let south = make_token(&gw, &["--max-uses", "5", "--label", "site=south"]);
    let gdoc = gateway_document(&d).await;
    let sims: Vec<SimNode> = (0..n)
        .map(|i| SimNode::generated(&format!("node:n{i:02}")))
        .collect();
    for s in &sims {
        assert_eq!(s.self_enroll(&d, &gdoc, &north).await.0, 200);
    }
    let other = SimNode::generated("node:s00");
    assert_eq!(other.self_enroll(&d, &gdoc, &south).await.0, 200);
    let admin = gw.token("gateway:main", &["admin"], "1h");
    (gw, d, sims, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phases_advance_as_nodes_succeed_and_an_offline_node_gets_its_part_later() {
    let (_gw, d, sims, admin) = fleet(6).await;
    let body = json!({"selector": "site=north", "phases": [1, "50%", "100%"],
        "action": {"command": {"type": "reboot", "body": {"delay_s": 5}}}});
    let (st, v) = create(&d, &admin, Some("k-1"), body.clone()).await;
    assert_eq!(st, 201, "{v}");
    let id = v["rollout_id"].as_str().unwrap().to_string();
    assert_eq!(
        v["counts"]["total"], 6,
        "the south node is not a target: {v}"
    );
    assert_eq!(v["phases"].as_array().unwrap().len(), 3);
    assert_eq!(
        v["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["total"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    // The same request with the same key is the same rollout; another one is refused.
    let (st, again) = create(&d, &admin, Some("k-1"), body).await;
    assert_eq!((st, again["rollout_id"].as_str()), (200, Some(id.as_str())));
    let (st, v) = create(
        &d,
        &admin,
        Some("k-1"),
        json!({"selector": "site=south", "action": {"desired": {}}}),
    )
    .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("idempotency_conflict")),
        "{v}"
    );

    // Phase 0 is node:n00 alone; nothing reaches the others before it succeeded.
    wait_for_async("phase 0 sent", WAIT, || async {
        (rollout(&d, &admin, &id).await["phases"][0]["queued"] == 1).then_some(())
    })
    .await;
    for s in &sims[1..] {
        assert!(
            take(s, &d, None).await.is_empty(),
            "{} got it before its phase",
            s.id
        );
    }
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    *got.entry(sims[0].id.clone()).or_default() += take(&sims[0], &d, None).await.len();
    // The rest take part as their phases start; node:n05 is away until the end.
    let away = &sims[5];
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        for s in &sims[..5] {
            *got.entry(s.id.clone()).or_default() += take(s, &d, None).await.len();
        }
        if rollout(&d, &admin, &id).await["counts"]["succeeded"] == 5 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "every present node succeeded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let v = rollout(&d, &admin, &id).await;
    assert_eq!(
        v["state"], "running",
        "it waits for the node that is away: {v}"
    );
    assert_eq!(node_states(&d, &admin, &id).await[&away.id], "queued");
    assert_eq!(
        take(away, &d, None).await.len(),
        1,
        "it gets its part when it returns"
    );
    let v = until_state(&d, &admin, &id, "completed").await;
    assert_eq!(v["counts"]["succeeded"], 6, "{v}");
    assert!(
        got.values().all(|&n| n == 1),
        "each node got it once: {got:?}"
    );
    let (_, list) = call(&d, "GET", "/v1/rollouts", &admin, &[], None).await;
    assert_eq!(list["rollouts"][0]["rollout_id"], id.as_str());
    // The token comes first: a stranger's malformed spec is 401, not a lesson in specs.
    let (st, _) = create(&d, "not-a-token", None, json!({"action": {}})).await;
    assert_eq!(st, 401);
    let (st, v) = call(&d, "GET", "/v1/rollouts/nope", &admin, &[], None).await;
    assert_eq!((st, v["error"]["code"].as_str()), (404, Some("not_found")));
    for bad in [
        json!({"selector": "site in (", "action": {"desired": {}}}),
        json!({"selector": "site", "action": {"reboot": {}}}),
        json!({"selector": "site", "action": {"desired": {}}, "phases": ["0%"]}),
        json!({"selector": "site", "action": {"tool_call": {"tool_name": "Bad"}}}),
        json!({"selector": "site", "action": {"desired": {}}, "deadline_s": 0}),
    ] {
        let (st, v) = create(&d, &admin, None, bad.clone()).await;
        assert_eq!(st, 400, "{bad}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_halt_it_resume_goes_on_and_cancel_withdraws_what_is_queued() {
    let (_gw, d, sims, admin) = fleet(6).await;
    let (st, v) = create(
        &d,
        &admin,
        None,
        json!({"selector": "site=north", "phases": [2, "100%"], "error_threshold_pct": 50,
               "phase_wait_s": 1, "action": {"command": {"type": "flash"}}}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let id = v["rollout_id"].as_str().unwrap().to_string();
    // Both canaries refuse it: the rollout halts, and nothing more is sent.
    wait_for_async("the canaries refuse", WAIT, || async {
        let n = take(&sims[0], &d, Some("bad_firmware")).await.len()
            + take(&sims[1], &d, Some("bad_firmware")).await.len();
        let v = rollout(&d, &admin, &id).await;
        (v["state"] == "halted").then_some(n)
    })
    .await;
    let v = rollout(&d, &admin, &id).await;
    assert_eq!(v["counts"]["failed"], 2, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("2 of the 2"), "{v}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for s in &sims[2..] {
        assert!(
            take(s, &d, None).await.is_empty(),
            "{} got it from a halted rollout",
            s.id
        );
    }
    let (_, n) = call(
        &d,
        "GET",
        &format!("/v1/rollouts/{id}/nodes?state=failed"),
        &admin,
        &[],
        None,
    )
    .await;
    assert_eq!(n["nodes"].as_array().unwrap().len(), 2);
    assert_eq!(n["nodes"][0]["detail"], "bad_firmware");
    let (st, _) = call(
        &d,
        "GET",
        &format!("/v1/rollouts/{id}/nodes?state=bogus"),
        &admin,
        &[],
        None,
    )
    .await;
    assert_eq!(st, 400);

    // Resume: the next phase starts (its wait passed); two nodes take part, then cancel.
    let read = _gw.token("gateway:main", &["read"], "1h");
    let (st, _) = call(
        &d,
        "POST",
        &format!("/v1/rollouts/{id}/resume"),
        &read,
        &[],
        None,
    )
    .await;
    assert_eq!(st, 403, "a read token resumes nothing");
    let (st, v) = call(
        &d,
        "POST",
        &format!("/v1/rollouts/{id}/resume"),
        &admin,
        &[],
        None,
    )
    .await;
    assert_eq!((st, v["state"].as_str()), (200, Some("running")), "{v}");
    wait_for_async("phase 1 sent", WAIT, || async {
        (rollout(&d, &admin, &id).await["phases"][1]["queued"] == 4).then_some(())
    })
    .await;
    assert_eq!(take(&sims[2], &d, None).await.len(), 1);
    assert_eq!(take(&sims[3], &d, None).await.len(), 1);
    let (st, v) = call(
        &d,
        "POST",
        &format!("/v1/rollouts/{id}/cancel"),
        &admin,
        &[],
        None,
    )
    .await;
    assert_eq!((st, v["state"].as_str()), (200, Some("cancelled")), "{v}");
    // What was queued and not delivered never arrives.
    for s in &sims[4..] {
        assert!(
            take(s, &d, None).await.is_empty(),
            "{} got a cancelled message",
            s.id
        );
    }
    let states = node_states(&d, &admin, &id).await;
    assert_eq!(states["node:n04"], "cancelled");
    assert_eq!(states["node:n05"], "cancelled");
    let (st, v) = call(
        &d,
        "POST",
        &format!("/v1/rollouts/{id}/resume"),
        &admin,
        &[],
        None,
    )
    .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("rollout_ended"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_expires_what_never_got_there_and_dynamic_targets_join() {
    let (gw, d, sims, admin) = fleet(2).await;
    let (_, v) = create(
        &d,
        &admin,
        None,
        json!({"selector": "site=north", "deadline_s": 3, "action": {"command": {"type": "ping"}}}),
    )
    .await;
    let short = v["rollout_id"].as_str().unwrap().to_string();
    let (_, v) = create(
        &d,
        &admin,
        None,
        json!({"selector": "site=north", "dynamic": true, "action": {"command": {"type": "hello"}}}),
    )
    .await;
    let dynamic = v["rollout_id"].as_str().unwrap().to_string();
    assert_eq!(v["counts"]["total"], 2);
    let v = until_state(&d, &admin, &short, "completed").await;
    assert_eq!(v["counts"]["expired"], 2, "{v}");
    // A device enrolled later with the right labels gets the dynamic one (only that).
    let token = make_token(&gw, &["--max-uses", "1", "--label", "site=north"]);
    let late = SimNode::generated("node:late");
    assert_eq!(
        late.self_enroll(&d, &gateway_document(&d).await, &token)
            .await
            .0,
        200
    );
    let ids = wait_for_async("the late node's part", WAIT, || async {
        let ids = take(&late, &d, None).await;
        (!ids.is_empty()).then_some(ids)
    })
    .await;
    assert_eq!(ids.len(), 1);
    let states = node_states(&d, &admin, &dynamic).await;
    assert_eq!(states.len(), 3, "{states:?}");
    // The early nodes get the dynamic one, never the expired one.
    let mut got = BTreeSet::new();
    for s in &sims {
        got.extend(take(s, &d, None).await);
    }
    assert_eq!(got.len(), 2, "{got:?}");
    wait_for_async("the dynamic rollout's nodes succeed", WAIT, || async {
        (rollout(&d, &admin, &dynamic).await["counts"]["succeeded"] == 3).then_some(())
    })
    .await;
    assert_eq!(
        rollout(&d, &admin, &dynamic).await["state"],
        "running",
        "a dynamic rollout runs until its deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_and_desired_state_rollouts_reach_real_nodes() {
    let (gw, node) = crate::harness::gateway_and_node("node:real", 1);
    crate::harness::pair(&gw, &node);
    let gwd = gw.start();
    let nd = node.start();
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let local = node.token("node:real", &["state:read", "state:write"], "1h");
    let (_, v) = call(
        &gwd,
        "PATCH",
        "/v1/nodes/node:real/labels",
        &admin,
        &[],
        Some(json!({"set": {"role": "pump"}})),
    )
    .await;
    assert_eq!(v["labels"]["role"], "pump");
    let (st, v) = create(
        &gwd,
        &admin,
        None,
        json!({"selector": "role=pump", "action": {"tool_call": {"tool_name": "echo", "tool_args": {"hello": 1}}}}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let tool = v["rollout_id"].as_str().unwrap().to_string();
    let v = until_state(&gwd, &admin, &tool, "completed").await;
    assert_eq!(v["counts"]["succeeded"], 1, "{v}");

    let (_, v) = create(
        &gwd,
        &admin,
        None,
        json!({"selector": "role=pump", "action": {"desired": {"pump": {"rpm": 1200}}}}),
    )
    .await;
    let desired = v["rollout_id"].as_str().unwrap().to_string();
    // Delivered once the node holds the version; succeeded once it reports in sync.
    wait_for_async("the desired version on the node", WAIT, || async {
        let (_, s) = call(&nd, "GET", "/v1/state", &local, &[], None).await;
        (s["desired"] == json!({"pump": {"rpm": 1200}})).then_some(())
    })
    .await;
    wait_for_async("delivered", WAIT, || async {
        (rollout(&gwd, &admin, &desired).await["counts"]["delivered"] == 1).then_some(())
    })
    .await;
    let (st, _) = call(
        &nd,
        "PATCH",
        "/v1/state/reported",
        &local,
        &[],
        Some(json!({"pump": {"rpm": 1200}})),
    )
    .await;
    assert_eq!(st, 200);
    let v = until_state(&gwd, &admin, &desired, "completed").await;
    assert_eq!(v["counts"]["succeeded"], 1, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_starts_watches_and_cancels_a_rollout_from_the_cli() {
    let (gw, d, sims, admin) = fleet(3).await;
    let out = |o: std::process::Output| {
        assert!(o.status.success(), "{}", crate::harness::text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let id = out(gw.cli(&[
        "rollout",
        "create",
        "--selector",
        "site=north",
        "--command",
        "reboot",
        "--body",
        r#"{"delay_s":1}"#,
        "--phases",
        "1,100%",
        "--error-threshold",
        "50%",
        "--key",
        "cli-1",
    ]));
    assert_eq!(rollout(&d, &admin, &id).await["counts"]["total"], 3);
    let again = out(gw.cli(&[
        "rollout",
        "create",
        "--selector",
        "site=north",
        "--command",
        "reboot",
        "--body",
        r#"{"delay_s":1}"#,
        "--phases",
        "1,100%",
        "--error-threshold",
        "50%",
        "--key",
        "cli-1",
    ]));
    assert_eq!(again, id, "the same key starts nothing twice");
    let bad = gw.cli(&[
        "rollout",
        "create",
        "--selector",
        "site=north",
        "--phases",
        "1,x",
    ]);
    assert_eq!(bad.status.code(), Some(64));
    // The canary takes it; the rest queue; then the operator cancels.
    wait_for_async("the canary's part", WAIT, || async {
        (!take(&sims[0], &d, None).await.is_empty()).then_some(())
    })
    .await;
    wait_for_async("phase 2 sent", WAIT, || async {
        (rollout(&d, &admin, &id).await["phases"][1]["queued"] == 2).then_some(())
    })
    .await;
    let shown = out(gw.cli(&["rollout", "show", &id]));
    assert!(shown.contains("running command to `site=north`"), "{shown}");
    assert!(shown.contains("phase 2: ["), "{shown}");
    let listed = out(gw.cli(&["rollout", "list"]));
    assert!(
        listed.contains(&id) && listed.contains("running"),
        "{listed}"
    );
    assert_eq!(
        out(gw.cli(&["rollout", "cancel", &id])),
        format!("{id}: cancelled")
    );
    // --watch ends once the rollout has.
    let watched = out(gw.cli(&["rollout", "show", &id, "--watch"]));
    assert!(watched.contains("cancelled"), "{watched}");
    for s in &sims[1..] {
        assert!(
            take(s, &d, None).await.is_empty(),
            "{} got a cancelled message",
            s.id
        );
    }
    let o = gw.cli(&["rollout", "resume", &id]);
    assert!(!o.status.success());
    assert!(crate::harness::text(&o).contains("rollout_ended"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tool_halts_the_rollout_at_its_threshold_and_the_audit_log_says_who() {
    use crate::harness::{free_port, listen_on, pair, text, tool_script};
    let port = free_port();
    let gw = Home::init("gateway", "gateway:main", "");
    listen_on(&gw, port);
    let tools = tempfile::tempdir().unwrap();
    let node = |id: &str, body: &str| {
        let tool = tool_script(tools.path(), &format!("probe_{}", &id[5..]), body, "");
        let tool = tool.replacen(
            &format!("name = \"probe_{}\"", &id[5..]),
            "name = \"probe\"",
            1,
        );
        let h = Home::init(
            "node",
            id,
            &format!(
                "[upstream]\nurl = \"http://127.0.0.1:{port}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n{tool}"
            ),
        );
        pair(&gw, &h);
        h
    };
    let a = node("node:pa", "cat >/dev/null\necho 'probe failed' >&2\nexit 3");
    let b = node("node:pb", "cat >/dev/null\necho '{\"ok\":true}'");
    let gwd = gw.start();
    let (_na, _nb) = (a.start(), b.start());
    let admin = gw.token("gateway:main", &["admin"], "1h");
    for n in ["node:pa", "node:pb"] {
        call(
            &gwd,
            "PATCH",
            &format!("/v1/nodes/{n}/labels"),
            &admin,
            &[],
            Some(json!({"set": {"ring": "probe"}})),
        )
        .await;
    }
    let (st, v) = create(
        &gwd,
        &admin,
        None,
        json!({"selector": "ring=probe", "phases": [1, "100%"], "error_threshold_pct": 50,
               "action": {"tool_call": {"tool_name": "probe"}}}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let id = v["rollout_id"].as_str().unwrap().to_string();
    let v = until_state(&gwd, &admin, &id, "halted").await;
    assert_eq!(
        (
            v["counts"]["failed"].clone(),
            v["counts"]["pending"].clone()
        ),
        (json!(1), json!(1)),
        "{v}"
    );
    let states = node_states(&gwd, &admin, &id).await;
    assert_eq!(
        (states["node:pa"].as_str(), states["node:pb"].as_str()),
        ("failed", "pending")
    );
    let (_, n) = call(
        &gwd,
        "GET",
        &format!("/v1/rollouts/{id}/nodes?state=failed"),
        &admin,
        &[],
        None,
    )
    .await;
    assert!(
        n["nodes"][0]["detail"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "the tool's error: {n}"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        node_states(&gwd, &admin, &id).await["node:pb"],
        "pending",
        "nothing more is sent"
    );
    let (st, _) = call(
        &gwd,
        "POST",
        &format!("/v1/rollouts/{id}/cancel"),
        &admin,
        &[],
        None,
    )
    .await;
    assert_eq!(st, 200);
    // The gateway's own audit log: created and cancelled by the token's subject, halted
    // by the gateway.
    let o = gw.cli(&["audit", "verify"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = gw.cli(&["audit", "export", "--jsonl"]);
    let entries: Vec<Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &Value| e["event"] == "rollout")
        .collect();
    let said: Vec<(String, String)> = entries
        .iter()
        .map(|e| {
            let d = e["detail"].as_str().unwrap();
            (
                d.split(' ').next().unwrap().to_string(),
                e["actor"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let subject = v["created_by"].as_str().unwrap().to_string();
    assert_eq!(
        said,
        [
            ("created".to_string(), subject.clone()),
            ("halted".to_string(), "gateway".to_string()),
            ("cancelled".to_string(), subject)
        ],
        "{entries:?}"
    );
    assert!(entries
        .iter()
        .all(|e| e["detail"].as_str().unwrap().contains(&id)));
}
