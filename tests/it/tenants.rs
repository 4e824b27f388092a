//! Tenant tokens while tenants are being built (DECISIONS D17, PROTOCOL §18): a gateway
//! token naming a tenant reaches nothing through a route not yet confined to a tenant —
//! every such route answers it exactly as a request for something that does not exist
//! (404 `not_found`) and changes nothing — and a node refuses it outright.

use serde_json::{json, Value};

use crate::harness::{http, text, Daemon, Home};
use crate::sim::{command, SimNode};

fn tenant_token(home: &Home, tenant: &str, scopes: &[&str]) -> String {
    let mut args = vec![
        "token", "issue", "--aud", "*", "--ttl", "1h", "--tenant", tenant, "--scope",
    ];
    args.extend_from_slice(scopes);
    let o = home.cli(&args);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

async fn send(
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

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_token_reaches_nothing_on_unconfined_routes_and_changes_nothing() {
    let home = Home::init("gateway", "gateway:main", "");
    let n = SimNode::with_keys("node:pump-17", 71);
    n.enroll(&home);
    let operator = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let msg = command(&gw, &operator, &n.id, 0, 3600).await;
    let node = n.id.as_str();
    let routes: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", "/v1/nodes".into(), None),
        ("GET", format!("/v1/nodes/{node}"), None),
        ("GET", format!("/v1/nodes/{node}/state"), None),
        ("GET", format!("/v1/messages/{msg}"), None),
        ("GET", "/v1/events?limit=5".into(), None),
        ("GET", "/v1/enrollments".into(), None),
        ("GET", "/v1/rollouts".into(), None),
        ("GET", "/v1/inbox".into(), None),
        (
            "POST",
            "/v1/commands".into(),
            Some(json!({"target": {"node_id": node}, "command_type": "note", "body": {}})),
        ),
        (
            "POST",
            "/v1/tool_call".into(),
            Some(json!({"target": {"node_id": node}, "tool_name": "echo", "tool_args": {}})),
        ),
        (
            "PATCH",
            format!("/v1/nodes/{node}/labels"),
            Some(json!({"set": {"site": "x"}})),
        ),
        (
            "PUT",
            format!("/v1/nodes/{node}/desired"),
            Some(json!({"version": 1, "desired": {"a": 1}})),
        ),
        (
            "POST",
            "/v1/rollouts".into(),
            Some(json!({"selector": "", "action": {"command_type": "note", "body": {}}})),
        ),
        ("POST", "/v1/revocations".into(), Some(json!({"jti": "x"}))),
        (
            "POST",
            "/v1/node_revocations".into(),
            Some(json!({"node_id": node})),
        ),
    ];
    const READS: usize = 7;
    assert_eq!(routes[READS].1, "/v1/inbox");
    for scopes in [&["read"][..], &["admin"][..]] {
        let t = tenant_token(&home, "acme", scopes);
        for (i, (method, path, body)) in routes.iter().enumerate() {
            // The first seven need `read`; the rest `admin` (or the tool's scope): a
            // `read` token without it is refused for its scope first, as anywhere.
            if scopes == ["read"] && i >= READS {
                continue;
            }
            let (st, v) = send(&gw, method, path, &t, body.clone()).await;
            assert_eq!(
                (st, v["error"]["code"].as_str()),
                (404, Some("not_found")),
                "{method} {path} with a tenant {scopes:?} token: {v}"
            );
        }
    }
    // Nothing changed: the operator still sees one command queued, the node enrolled
    // and unlabelled, no rollout.
    let (st, v) = send(&gw, "GET", &format!("/v1/nodes/{node}"), &operator, None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["queue_depth"], 1, "{v}");
    assert_eq!(v["labels"], json!({}), "{v}");
    assert_eq!(v["state"]["desired_version"], 0, "{v}");
    let (st, v) = send(&gw, "GET", "/v1/rollouts", &operator, None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["rollouts"].as_array().map(Vec::len), Some(0), "{v}");
    let (st, v) = send(&gw, "GET", &format!("/v1/messages/{msg}"), &operator, None).await;
    assert_eq!(st, 200, "{v}");
    // The console takes no tenant session.
    let t = tenant_token(&home, "acme", &["admin"]);
    let (_, session) = crate::console::sign_in(&gw, &t).await;
    assert!(session.is_none(), "a tenant token signed in to the console");
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
        out.contains("created tenant acme (max nodes 10, max queued messages none, max queued bytes 1048576)"),
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
    assert!(rows.contains(&vec!["default", "0", "0", "0"]), "{out}");
    assert!(
        rows.contains(&vec!["acme", "0", "0/50", "0/1048576"]),
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
