//! Tenants (PROTOCOL §18, DECISIONS D17): the registry (`outpost tenant`), nodes of one
//! id in several tenants kept apart, a tenant token confined to its own fleet on the
//! routes built for it (anything of another tenant answers as nothing that exists) and
//! refused as not found on the operator's own routes; a node refuses a tenant token.

use serde_json::{json, Value};

use crate::harness::{http, text, Daemon, Home};
use crate::sim::{command, SimNode};

pub(crate) fn tenant_token(home: &Home, tenant: &str, scopes: &[&str]) -> String {
    let mut args = vec![
        "token", "issue", "--aud", "*", "--ttl", "1h", "--tenant", tenant, "--scope",
    ];
    args.extend_from_slice(scopes);
    let o = home.cli(&args);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

pub(crate) async fn send(
    gw: &Daemon,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = gw.url(path);
    let c = http();
    let mut r = match method {
        "GET" => c.get(url),
        "POST" => c.post(url),
        "PUT" => c.put(url),
        "PATCH" => c.patch(url),
        m => panic!("{m}"),
    }
    .bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let st = resp.status().as_u16();
    (st, resp.json().await.unwrap_or(Value::Null))
}

/// Three fleets on one gateway, each with a `node:pump-17` of its own: `default`,
/// `acme` and `globex`. Tenant acme's read and admin tokens against globex's objects
/// (its node, its message ids, its events) get exactly what they get for objects that
/// do not exist, and change nothing; on the operator's own routes (the inbox, token
/// revocations) every request of a tenant token answers 404 `not_found`. The operator reaches
/// every tenant's node by its address.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_token_reaches_its_own_fleet_and_nothing_of_another() {
    let home = Home::init("gateway", "gateway:main", "");
    for t in ["acme", "globex"] {
        let o = home.cli(&["tenant", "create", t]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let plain = SimNode::with_keys("node:pump-17", 71);
    let acme = SimNode::with_keys("node:pump-17", 72);
    let globex = SimNode::with_keys("node:pump-17", 73);
    plain.enroll(&home);
    for (n, t) in [(&acme, "acme"), (&globex, "globex")] {
        let o = home.cli_stdin(
            &["trust", "add", "-", "--send", "--tenant", t],
            n.identity_json().as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o));
    }
    let operator = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let globex_msg = command(&gw, &operator, "node:pump-17@globex", 0, 3600).await;
    let plain_msg = command(&gw, &operator, "node:pump-17", 1, 3600).await;
    let ghost_msg = uuid::Uuid::now_v7().to_string();
    let node = "node:pump-17";

    for scopes in [&["read"][..], &["admin"][..]] {
        let t = tenant_token(&home, "acme", scopes);
        // Its own node, by its node id, and only it.
        let (st, v) = send(&gw, "GET", "/v1/nodes", &t, None).await;
        assert_eq!(st, 200, "{v}");
        let ids: Vec<&str> = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["node_id"].as_str())
            .collect();
        assert_eq!(ids, [node], "{v}");
        let (st, v) = send(&gw, "GET", &format!("/v1/nodes/{node}"), &t, None).await;
        assert_eq!((st, v["node_id"].as_str()), (200, Some(node)), "{v}");
        // Another tenant's node and message answer as ones that do not exist.
        let same = |a: &(u16, Value), b: &(u16, Value), what: &str| {
            assert_eq!(a.0, b.0, "{what}: {} vs {}", a.1, b.1);
            assert_eq!(a.1["error"]["code"], b.1["error"]["code"], "{what}");
            assert!(a.0 >= 400, "{what} answered {}", a.1);
        };
        for other in ["node:pump-17@globex", "node:pump-17@default"] {
            let ghost = other.replace("pump-17", "ghost-9");
            let mut routes = vec![
                ("GET", "".to_string(), None),
                ("GET", "/state".to_string(), None),
            ];
            if scopes == ["admin"] {
                routes.push((
                    "PATCH",
                    "/labels".into(),
                    Some(json!({"set": {"site": "x"}})),
                ));
                routes.push(("PUT", "/desired".into(), Some(json!({"a": 1}))));
            }
            for (method, tail, body) in routes {
                let a = send(
                    &gw,
                    method,
                    &format!("/v1/nodes/{other}{tail}"),
                    &t,
                    body.clone(),
                )
                .await;
                let b = send(&gw, method, &format!("/v1/nodes/{ghost}{tail}"), &t, body).await;
                same(&a, &b, &format!("{method} {other}{tail}"));
                assert_eq!(
                    a.1["error"]["message"]
                        .as_str()
                        .map(|m| m.replace(other, "X")),
                    b.1["error"]["message"]
                        .as_str()
                        .map(|m| m.replace(&ghost, "X")),
                );
            }
        }
        // A node of its own that does not exist answers the same way, by the id given.
        let (st, v) = send(&gw, "GET", "/v1/nodes/node:ghost-9/state", &t, None).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (404, Some("unknown_node")),
            "{v}"
        );
        assert!(
            !v["error"]["message"].as_str().unwrap().contains('@'),
            "{v}"
        );
        for m in [&globex_msg, &plain_msg] {
            let a = send(&gw, "GET", &format!("/v1/messages/{m}"), &t, None).await;
            let b = send(&gw, "GET", &format!("/v1/messages/{ghost_msg}"), &t, None).await;
            same(&a, &b, "another tenant's message");
            assert_eq!(a.1, b.1);
        }
        // The operator's own routes: refused as not found.
        for (method, path, body) in unconfined() {
            // What needs `admin` refuses a `read` token for its scope first, as anywhere.
            if scopes == ["read"] && (method != "GET" || path == "/v1/inbox") {
                continue;
            }
            let (st, v) = send(&gw, method, &path, &t, body).await;
            assert_eq!(
                (st, v["error"]["code"].as_str()),
                (404, Some("not_found")),
                "{method} {path} with a tenant {scopes:?} token: {v}"
            );
        }
    }
    // With admin, acme commands its own node: it reaches acme's device, no other.
    let t = tenant_token(&home, "acme", &["admin"]);
    for target in ["node:pump-17@globex", "node:ghost-9"] {
        let body = json!({"target": {"node_id": target}, "command_type": "note", "body": {}});
        let (st, v) = send(&gw, "POST", "/v1/commands", &t, Some(body)).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (404, Some("unknown_node")),
            "{v}"
        );
        let body = json!({"target": {"node_id": target}, "tool_name": "echo", "tool_args": {}, "wait_s": 0});
        let (st, v) = send(&gw, "POST", "/v1/tool_call", &t, Some(body)).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (404, Some("unknown_node")),
            "{v}"
        );
    }
    let body = json!({"target": {"node_id": node}, "command_type": "note", "body": {}});
    let (st, v) = send(&gw, "POST", "/v1/commands", &t, Some(body)).await;
    assert_eq!(st, 202, "{v}");
    let mine = v["message_id"].as_str().unwrap().to_string();
    let (st, v) = send(&gw, "GET", &format!("/v1/messages/{mine}"), &t, None).await;
    assert_eq!((st, v["node_id"].as_str()), (200, Some(node)), "{v}");
    // Its own node's labels and desired state, by node id.
    let (st, v) = send(
        &gw,
        "PATCH",
        &format!("/v1/nodes/{node}/labels"),
        &t,
        Some(json!({"set": {"site": "north"}})),
    )
    .await;
    assert_eq!((st, v["node_id"].as_str()), (200, Some(node)), "{v}");
    let (st, v) = send(
        &gw,
        "PUT",
        &format!("/v1/nodes/{node}/desired"),
        &t,
        Some(json!({"fan": 2})),
    )
    .await;
    assert_eq!((st, v["node_id"].as_str()), (200, Some(node)), "{v}");
    let (st, v) = send(&gw, "GET", &format!("/v1/nodes/{node}/state"), &t, None).await;
    assert_eq!(
        (st, v["node_id"].as_str(), v["desired"].clone()),
        (200, Some(node), json!({"fan": 2})),
        "{v}"
    );
    let (got, _) = acme.pull(&gw, 0, 100).await;
    assert_eq!(got, std::slice::from_ref(&mine));
    let (got, _) = globex.pull(&gw, 0, 100).await;
    assert_eq!(
        got,
        std::slice::from_ref(&globex_msg),
        "globex's queue changed"
    );
    let (got, _) = plain.pull(&gw, 0, 100).await;
    assert_eq!(
        got,
        std::slice::from_ref(&plain_msg),
        "default's queue changed"
    );
    // Its event stream: its own node's events only, by node id.
    let frames = events_of(&gw, &t).await;
    assert!(frames.contains(&mine), "{frames}");
    assert!(
        !frames.contains(&globex_msg) && !frames.contains(&plain_msg),
        "{frames}"
    );
    assert!(
        !frames.contains(r#""node_id":"node:pump-17@"#),
        "an address leaked: {frames}"
    );
    // The operator's stream has every tenant's, each by its address.
    let frames = events_of(&gw, &operator).await;
    for m in [&mine, &globex_msg, &plain_msg] {
        assert!(frames.contains(m.as_str()), "{frames}");
    }
    assert!(frames.contains("node:pump-17@acme") && frames.contains("node:pump-17@globex"));
    // The operator reaches each tenant's node by its address; nothing else changed.
    for (addr, depth) in [("node:pump-17@globex", 1), ("node:pump-17", 1)] {
        let (st, v) = send(&gw, "GET", &format!("/v1/nodes/{addr}"), &operator, None).await;
        assert_eq!((st, v["queue_depth"].as_u64()), (200, Some(depth)), "{v}");
        assert_eq!(v["labels"], json!({}), "{v}");
    }
    let (st, v) = send(&gw, "GET", "/v1/rollouts", &operator, None).await;
    assert_eq!(
        (st, v["rollouts"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{v}"
    );
    // The console's tenant sessions: tenant_console.rs.
}

/// Routes that are the operator's (PROTOCOL §18.2): a tenant's token gets 404 on each.
fn unconfined() -> Vec<(&'static str, String, Option<Value>)> {
    vec![
        ("GET", "/v1/inbox".into(), None),
        ("POST", "/v1/inbox/0190-none/ack".into(), None),
        ("POST", "/v1/revocations".into(), Some(json!({"jti": "x"}))),
    ]
}

/// What `GET /v1/events` replays from the first event on, read for a second.
pub(crate) async fn events_of(gw: &Daemon, token: &str) -> String {
    let mut r = http()
        .get(gw.url("/v1/events"))
        .bearer_auth(token)
        .header("last-event-id", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut seen = String::new();
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until, r.chunk()).await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_refuses_a_tenant_token() {
    let home = Home::init("node", "node:pump-17", "");
    let d = home.start();
    let t = tenant_token(&home, "acme", &["tool:pii_redact"]);
    let r = http()
        .post(d.url("/v1/tool_call"))
        .bearer_auth(&t)
        .json(&json!({"tool_name": "pii_redact", "tool_args": {"text": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant_token"),
        "{v}"
    );
    // The same holder's token without a tenant is taken.
    let plain = home.token("node:pump-17", &["tool:pii_redact"], "1h");
    let r = http()
        .post(d.url("/v1/tool_call"))
        .bearer_auth(&plain)
        .json(&json!({"tool_name": "pii_redact", "tool_args": {"text": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[test]
fn token_issue_refuses_a_bad_tenant_name() {
    let home = Home::init("gateway", "gateway:main", "");
    let o = home.cli(&[
        "token", "issue", "--aud", "*", "--tenant", "Acme", "--scope", "read",
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("invalid tenant"), "{}", text(&o));
}

/// `outpost tenant create|list|set|delete` on the gateway host (PROTOCOL §18): exit 0
/// for what it did, 64 for what can never work (a bad name, `default`), 1 for what
/// cannot work now (a name taken, a tenant missing); `list` shows `default` first with
/// what each tenant uses against its quotas.
#[test]
fn the_tenant_commands_create_list_set_and_delete() {
    let home = Home::init("gateway", "gateway:main", "");
    let run = |args: &[&str]| {
        let mut all = vec!["tenant"];
        all.extend_from_slice(args);
        let o = home.cli(&all);
        (
            o.status.code().unwrap_or(-1),
            text(&o),
            String::from_utf8(o.stdout).unwrap(),
        )
    };
    let (rc, out, _) = run(&[
        "create",
        "acme",
        "--max-nodes",
        "10",
        "--max-queued-bytes",
        "1MiB",
    ]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("created tenant acme (max nodes 10, max queued messages none, max queued bytes 1048576, max commands/s none)"),
        "{out}"
    );
    for (args, want) in [
        (&["create", "acme"][..], 1),
        (&["create", "Acme"], 64),
        (&["create", "default"], 64),
        (&["delete", "default"], 64),
        (&["create", "x", "--max-nodes", "lots"], 64),
        (&["set", "globex", "--max-nodes", "1"], 1),
        (&["delete", "globex"], 1),
    ] {
        let (rc, out, _) = run(args);
        assert_eq!(rc, want, "{args:?}: {out}");
    }
    let (rc, out, _) = run(&[
        "set",
        "acme",
        "--max-nodes",
        "none",
        "--max-queued-messages",
        "50",
    ]);
    assert_eq!(rc, 0, "{out}");
    let (rc, out, table) = run(&["list"]);
    assert_eq!(rc, 0, "{out}");
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.contains(&vec!["default", "0", "0", "0", "-"]), "{out}");
    assert!(
        rows.contains(&vec!["acme", "0", "0/50", "0/1048576", "-"]),
        "{out}"
    );
    let (rc, out, json) = run(&["list", "--json"]);
    assert_eq!(rc, 0, "{out}");
    let first: Value = serde_json::from_str(json.lines().next().unwrap_or("")).unwrap();
    assert_eq!(first["tenant"], "default", "{out}");
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        out.contains(r#""quotas":{"max_queued_bytes":1048576,"max_queued_messages":50}"#),
        "{out}"
    );
    assert_eq!(run(&["delete", "acme"]).0, 0);
    let (_, _, table) = run(&["list"]);
    assert!(!table.contains("acme"), "{table}");
}

/// A TASK_RESULT for `request` sealed by `n` to the gateway, as its upload's body.
fn result_upload(
    n: &SimNode,
    gw_doc: &outpost::envelope::IdentityDocument,
    request: &str,
    tag: &str,
) -> Value {
    use outpost::clock::Clock;
    let now = outpost::clock::SystemClock.now_ms();
    let params = outpost::envelope::SealParams {
        message_id: uuid::Uuid::now_v7().to_string(),
        created_at_ms: now,
        expires_at_ms: now + 3_600_000,
        payload_type: "TASK_RESULT".into(),
        priority: 0,
    };
    let pt = json!({"job_id": "j", "request_id": request, "ok": true, "result": {"by": tag}, "evidence": null});
    let env = outpost::envelope::seal(
        n.keys(),
        &n.id,
        gw_doc,
        &params,
        &serde_json::to_vec(&pt).unwrap(),
        &mut rand::rngs::OsRng,
    )
    .unwrap();
    json!({"envelopes": [serde_json::from_slice::<Value>(&env.to_json()).unwrap()]})
}

/// One node id in two tenants (PROTOCOL §18): `node:pump-17` of `default` and
/// `node:pump-17` of `acme`, each its own device with its own key. Commands, tool calls,
/// results and audit copies addressed to one never reach the other; each signs as the
/// same node id and the gateway tells them apart by the key that verifies.
#[tokio::test(flavor = "multi_thread")]
async fn one_node_id_in_two_tenants_keeps_two_fleets_apart() {
    let home = Home::init("gateway", "gateway:main", "");
    let o = home.cli(&["tenant", "create", "acme", "--max-nodes", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    let plain = SimNode::with_keys("node:pump-17", 81);
    let acme = SimNode::with_keys("node:pump-17", 82);
    plain.enroll(&home);
    let add = |n: &SimNode, tenant: &str| {
        home.cli_stdin(
            &["trust", "add", "-", "--send", "--tenant", tenant],
            n.identity_json().as_bytes(),
        )
    };
    let o = add(&acme, "acme");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("trusted node:pump-17@acme"),
        "{}",
        text(&o)
    );
    // Into a tenant that does not exist, or beyond its max_nodes: refused, nothing added.
    let third = SimNode::with_keys("node:pump-18", 83);
    let o = add(&third, "globex");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = add(&third, "acme");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("tenant_quota"),
        "{}",
        text(&o)
    );
    let ls = home.cli(&["trust", "ls"]);
    let ls = String::from_utf8_lossy(&ls.stdout).into_owned();
    assert!(
        ls.contains("node:pump-17\t") && ls.contains("node:pump-17@acme\t"),
        "{ls}"
    );
    assert!(!ls.contains("pump-18"), "{ls}");
    // A tenant with a node cannot be deleted.
    let o = home.cli(&["tenant", "delete", "acme"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("still has 1 node"),
        "{}",
        text(&o)
    );

    let operator = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let to_plain: Vec<String> = futures_join(&gw, &operator, "node:pump-17", 2).await;
    let to_acme: Vec<String> = futures_join(&gw, &operator, "node:pump-17@acme", 3).await;
    let (got, pending) = plain.pull(&gw, 0, 100).await;
    assert_eq!((got.clone(), pending), (to_plain.clone(), 2));
    plain.ack(&gw, &got).await;
    let (got, pending) = acme.pull(&gw, 0, 100).await;
    assert_eq!((got.clone(), pending), (to_acme.clone(), 3));
    acme.ack(&gw, &got).await;
    // A device with that node id and a key trusted in neither tenant gets nothing.
    let stranger = SimNode::with_keys("node:pump-17", 84);
    let (st, _) = stranger
        .signed(&gw, "GET", "/v1/nodes/node:pump-17/pull?wait_s=0", None)
        .await;
    assert_eq!(st, 401);

    // Tool calls: each result is filed under its own node's request.
    let call = |node: &'static str| {
        let (gw, op) = (&gw, &operator);
        async move {
            let r = http()
                .post(gw.url("/v1/tool_call"))
                .bearer_auth(op)
                .json(&json!({"target": {"node_id": node}, "tool_name": "echo",
                              "tool_args": {}, "job_id": "same-job", "wait_s": 0}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 202);
            let v: Value = r.json().await.unwrap();
            v["message_id"].as_str().unwrap().to_string()
        }
    };
    let (req_plain, req_acme) = (call("node:pump-17").await, call("node:pump-17@acme").await);
    assert_ne!(req_plain, req_acme, "one job id, two nodes: two jobs");
    let gw_doc = crate::sim::gateway_document(&gw).await;
    // acme's node cannot answer the default node's request (nor the reverse)…
    let up = result_upload(&acme, &gw_doc, &req_plain, "acme");
    let (st, v) = acme
        .signed(&gw, "POST", "/v1/nodes/node:pump-17/upload", Some(&up))
        .await;
    assert_eq!(st, 200, "{v}");
    let (st, m) = get(&gw, &operator, &format!("/v1/messages/{req_plain}")).await;
    assert_eq!(st, 200);
    assert!(
        m["result"].is_null(),
        "acme's node filed a result for another tenant's request: {m}"
    );
    // …and each answers its own.
    for (n, req, tag) in [(&plain, &req_plain, "plain"), (&acme, &req_acme, "acme")] {
        let up = result_upload(n, &gw_doc, req, tag);
        let (st, v) = n
            .signed(&gw, "POST", "/v1/nodes/node:pump-17/upload", Some(&up))
            .await;
        assert_eq!(
            (st, v["accepted"].as_array().map(Vec::len)),
            (200, Some(1)),
            "{v}"
        );
        let (_, m) = get(&gw, &operator, &format!("/v1/messages/{req}")).await;
        assert_eq!(m["result"]["result"]["by"], tag, "{m}");
    }

    // Audit copies: one per address, checked against that device's key.
    for (n, size) in [(&plain, 3u64), (&acme, 5)] {
        let body = audit_upload(n, size);
        let (st, v) = n
            .signed(&gw, "POST", "/v1/nodes/node:pump-17/audit", Some(&body))
            .await;
        assert_eq!(st, 200, "{v}");
    }
    for (n, size) in [(&plain, 3u64), (&acme, 5)] {
        let (st, v) = n
            .signed(&gw, "GET", "/v1/nodes/node:pump-17/audit", None)
            .await;
        assert_eq!((st, v["size"].as_u64()), (200, Some(size)), "{v}");
    }
    // The operator sees both nodes, each by its address.
    let (st, nodes) = get(&gw, &operator, "/v1/nodes").await;
    assert_eq!(st, 200);
    let ids: Vec<&str> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["node_id"].as_str())
        .collect();
    assert!(
        ids.contains(&"node:pump-17") && ids.contains(&"node:pump-17@acme"),
        "{nodes}"
    );
}

async fn futures_join(gw: &Daemon, token: &str, node: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(command(gw, token, node, i, 3600).await);
    }
    ids
}

async fn get(gw: &Daemon, token: &str, path: &str) -> (u16, Value) {
    send(gw, "GET", path, token, None).await
}

/// An audit upload of `size` entries with a checkpoint signed by `n`'s key.
fn audit_upload(n: &SimNode, size: u64) -> Value {
    use outpost::audit::{
        leaf_hash, origin_for, sign_checkpoint, AuditEntry, AuditEvent, AuditOutcome, AuditRecord,
        Frontier,
    };
    let entries: Vec<Vec<u8>> = (0..size)
        .map(|i| {
            AuditEntry::from_record(
                i,
                1_000 + i,
                AuditRecord::new(AuditEvent::ToolCall, AuditOutcome::Ok),
            )
            .canonical_bytes()
        })
        .collect();
    let mut fr = Frontier::new();
    for e in &entries {
        fr.push(leaf_hash(e));
    }
    let note = sign_checkpoint(
        n.keys().signing_key(),
        &origin_for(&n.id),
        fr.size(),
        &fr.root(),
    );
    let texts: Vec<String> = entries
        .into_iter()
        .map(|b| String::from_utf8(b).unwrap())
        .collect();
    json!({"entries": texts, "checkpoint": note})
}

/// Devices enroll themselves into a tenant with a token that names it (PROTOCOL §18):
/// each joins at its address there, the same node id as a `default` node is another
/// node (no `duplicate_node_id`), the tenant's `max_nodes` refuses one more with 429
/// `tenant_quota` (not final: the device may come back), and a token for a tenant that
/// does not exist is never made.
#[tokio::test(flavor = "multi_thread")]
async fn devices_enroll_into_the_tenant_their_token_names_within_its_quota() {
    let home = Home::init("gateway", "gateway:main", "");
    let o = home.cli(&["tenant", "create", "acme", "--max-nodes", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = home.cli(&[
        "enroll-token",
        "create",
        "--max-uses",
        "5",
        "--tenant",
        "globex",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let token = crate::self_enroll::make_token(&home, &["--max-uses", "5", "--tenant", "acme"]);
    let list = home.cli(&["enroll-token", "list", "--json"]);
    assert!(String::from_utf8_lossy(&list.stdout).contains(r#""tenant":"acme""#));
    // A `default` node:pump-17, online, trusted by hand.
    let plain = SimNode::with_keys("node:pump-17", 91);
    plain.enroll(&home);
    let operator = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let _ = plain.pull(&gw, 0, 1).await;
    let gw_doc = crate::sim::gateway_document(&gw).await;
    let twin = SimNode::with_keys("node:pump-17", 92);
    let (st, v) = twin.self_enroll(&gw, &gw_doc, &token).await;
    assert_eq!(st, 200, "{v}");
    let other = SimNode::with_keys("node:pump-18", 93);
    let (st, v) = other.self_enroll(&gw, &gw_doc, &token).await;
    assert_eq!(st, 200, "{v}");
    // acme has its two nodes now.
    let third = SimNode::with_keys("node:pump-19", 94);
    let (st, v) = third.self_enroll(&gw, &gw_doc, &token).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (429, Some("tenant_quota")),
        "{v}"
    );
    // The twin is acme's node:pump-17: its commands reach it, not the default node.
    let to_twin = command(&gw, &operator, "node:pump-17@acme", 0, 3600).await;
    let (got, _) = twin.pull(&gw, 0, 10).await;
    assert_eq!(got, std::slice::from_ref(&to_twin));
    let (got, _) = plain.pull(&gw, 0, 10).await;
    assert!(got.is_empty(), "{got:?}");
    let t = tenant_token(&home, "acme", &["read"]);
    let (st, v) = send(&gw, "GET", "/v1/nodes", &t, None).await;
    assert_eq!(st, 200);
    let mut ids: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["node_id"].as_str())
        .collect();
    ids.sort();
    assert_eq!(ids, ["node:pump-17", "node:pump-18"], "{v}");
    let o = home.cli(&["tenant", "list", "--json"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.contains(r#""tenant":"acme","usage":{"nodes":2"#),
        "{out}"
    );
    // Raised, the quota takes the third device when it comes back.
    let o = home.cli(&["tenant", "set", "acme", "--max-nodes", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    let (st, v) = third.self_enroll(&gw, &gw_doc, &token).await;
    assert_eq!(st, 200, "{v}");
}

/// A tenant at its `max_queued_messages` gets 429 `tenant_quota` naming the quota and
/// nothing is queued; another tenant (and `default`) queue on; once its node took its
/// messages the tenant is admitted again (PROTOCOL §18).
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_over_its_queue_quota_gets_429_and_others_queue_on() {
    let home = Home::init("gateway", "gateway:main", "");
    let o = home.cli(&["tenant", "create", "acme", "--max-queued-messages", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    let acme = SimNode::with_keys("node:pump-17", 101);
    let plain = SimNode::with_keys("node:pump-17", 102);
    plain.enroll(&home);
    let o = home.cli_stdin(
        &["trust", "add", "-", "--send", "--tenant", "acme"],
        acme.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let t = tenant_token(&home, "acme", &["admin"]);
    let operator = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let body =
        || json!({"target": {"node_id": "node:pump-17"}, "command_type": "note", "body": {}});
    for _ in 0..3 {
        let (st, v) = send(&gw, "POST", "/v1/commands", &t, Some(body())).await;
        assert_eq!(st, 202, "{v}");
    }
    let (st, v) = send(&gw, "POST", "/v1/commands", &t, Some(body())).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (429, Some("tenant_quota")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_queued_messages"),
        "{v}"
    );
    // The operator is held to the tenant's quota too; `default` is not.
    let (st, _) = send(
        &gw,
        "POST",
        "/v1/commands",
        &operator,
        Some(
            json!({"target": {"node_id": "node:pump-17@acme"}, "command_type": "note", "body": {}}),
        ),
    )
    .await;
    assert_eq!(st, 429);
    for i in 0..5 {
        command(&gw, &operator, "node:pump-17", i, 3600).await;
    }
    // Per-tenant metrics: one series per tenant, whatever the number of nodes.
    let metrics = http()
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "outpost_tenant_queue_depth{tenant=\"acme\"} 3\n",
        "outpost_tenant_queue_depth{tenant=\"default\"} 5\n",
        "outpost_tenant_nodes{tenant=\"acme\",liveness=\"offline\"} 1\n",
        "outpost_tenant_messages_total{tenant=\"acme\",event=\"queued\"} 3\n",
        "outpost_tenant_messages_total{tenant=\"default\",event=\"queued\"} 5\n",
    ] {
        assert!(metrics.contains(line), "no {line:?} in:\n{metrics}");
    }
    let (got, pending) = acme.pull(&gw, 0, 100).await;
    assert_eq!((got.len(), pending), (3, 3), "nothing more was queued");
    acme.ack(&gw, &got).await;
    // Admitted again once the gateway's view of the queues is read again (≤ 1 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (st, v) = send(&gw, "POST", "/v1/commands", &t, Some(body())).await;
        if st == 202 {
            break;
        }
        assert_eq!(st, 429, "{v}");
        assert!(std::time::Instant::now() < deadline, "still refused: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
