//! The console and tenants (PROTOCOL §18.2): a tenant's token signs in to a session
//! that sees only its tenant's fleet; every page, fragment and form of another tenant's
//! node answers exactly as one of a node that does not exist, and changes nothing; its
//! event stream carries its own nodes' events only. The operator's session has a tenant
//! switcher and sees every tenant.

use serde_json::json;

use crate::console::{sign_in, Session};
use crate::harness::{text, Daemon, Home};
use crate::sim::{command, SimNode};
use crate::tenants::{send, tenant_token};

/// Status and body of `path`, every mention of `id` written as `ID`.
async fn seen_as(s: &Session, path: &str, id: &str) -> (u16, String) {
    let r = s.get(&path.replace("ID", id)).await;
    let st = r.status().as_u16();
    (st, r.text().await.unwrap().replace(id, "ID"))
}

/// The same for a form sent to `path`.
async fn posted_as(s: &Session, path: &str, id: &str, form: &[(&str, &str)]) -> (u16, String) {
    let form: Vec<(&str, String)> = form
        .iter()
        .map(|(k, v)| (*k, v.replace("ID", id)))
        .collect();
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = s
        .post(&path.replace("ID", id), Some(&s.origin), &form)
        .await;
    let st = r.status().as_u16();
    let loc = r
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = r.text().await.unwrap();
    (st, format!("{loc}\n{body}").replace(id, "ID"))
}

/// What the console's event stream replays from the first event on, read for a second.
async fn stream_of(s: &Session) -> String {
    let mut r = s.get("/ui/events?after=0").await;
    assert_eq!(r.status().as_u16(), 200);
    let mut seen = String::new();
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until, r.chunk()).await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

async fn depth(gw: &Daemon, operator: &str, address: &str) -> u64 {
    let (st, v) = send(gw, "GET", &format!("/v1/nodes/{address}"), operator, None).await;
    assert_eq!(st, 200, "{v}");
    v["queue_depth"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_session_sees_only_its_fleet_and_the_operator_switches() {
    let home = Home::init("gateway", "gateway:main", "");
    for t in ["acme", "globex"] {
        let o = home.cli(&["tenant", "create", t]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let plain = SimNode::with_keys("node:pump-17", 81);
    plain.enroll(&home);
    for (seed, t) in [(82, "acme"), (83, "globex")] {
        let n = SimNode::with_keys("node:pump-17", seed);
        let o = home.cli_stdin(
            &["trust", "add", "-", "--send", "--tenant", t],
            n.identity_json().as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o));
    }
    let operator = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let acme_msg = command(&gw, &operator, "node:pump-17@acme", 0, 3600).await;
    let globex_msg = command(&gw, &operator, "node:pump-17@globex", 0, 3600).await;
    let plain_msg = command(&gw, &operator, "node:pump-17", 0, 3600).await;
    let (theirs, ghost) = ("node:pump-17@globex", "node:ghost-9@acme");

    let t = tenant_token(&home, "acme", &["admin"]);
    let (_, s) = sign_in(&gw, &t).await;
    let s = s.expect("a tenant token signs in");
    let fleet = s.get("/ui").await.text().await.unwrap();
    assert!(
        fleet.contains(r#"data-node-id="node:pump-17@acme""#),
        "{fleet}"
    );
    for other in [
        r#"data-node-id="node:pump-17""#,
        r#"data-node-id="node:pump-17@globex""#,
    ] {
        assert!(!fleet.contains(other), "{other} listed to acme");
    }
    assert!(
        fleet.contains(r#"id="session-tenant""#),
        "the tenant is not named"
    );
    assert!(
        !fleet.contains("tenant-switcher"),
        "a tenant may not switch"
    );
    assert!(
        !fleet.contains("Revoke a token"),
        "revocations are the operator's"
    );
    // The operator's switcher is a query parameter; a tenant's session ignores it.
    let switched = s
        .get("/ui/fleet/rows?tenant=globex")
        .await
        .text()
        .await
        .unwrap();
    assert!(switched.contains("node:pump-17@acme") && !switched.contains("@globex"));

    // Every page and fragment of globex's node: as for a node that does not exist.
    for path in [
        "/ui/nodes/ID",
        "/ui/nodes/ID/queue",
        "/ui/nodes/ID/facts",
        "/ui/nodes/ID/results",
        "/ui/nodes/ID/fleet_state",
    ] {
        let a = seen_as(&s, path, theirs).await;
        let b = seen_as(&s, path, ghost).await;
        assert_eq!(a.0, 404, "{path}: {}", a.1);
        assert_eq!(a, b, "{path} tells globex's node from a ghost");
    }
    // A message of globex's is waiting forever, as one that does not exist.
    let a = seen_as(&s, "/ui/nodes/node:pump-17@acme/calls/ID", &globex_msg).await;
    let b = seen_as(
        &s,
        "/ui/nodes/node:pump-17@acme/calls/ID",
        &uuid::Uuid::now_v7().to_string(),
    )
    .await;
    assert_eq!(a, b);
    assert!(a.1.contains(r#"data-state="waiting""#), "{}", a.1);
    // Every form: the same answer as for a ghost, and nothing changes.
    let csrf = s.csrf().await;
    let forms: [(&str, Vec<(&str, &str)>); 6] = [
        (
            "/ui/nodes/ID/commands",
            vec![("command_type", "note"), ("body", "{}")],
        ),
        (
            "/ui/nodes/ID/commands",
            vec![("command_type", "note"), ("body", "{not json")],
        ),
        (
            "/ui/nodes/ID/tool_calls",
            vec![("tool_name", "echo"), ("tool_args", "{}")],
        ),
        (
            "/ui/nodes/ID/labels",
            vec![("op", "set"), ("key", "site"), ("value", "x")],
        ),
        (
            "/ui/nodes/ID/desired",
            vec![("mode", "replace"), ("doc", r#"{"fan":1}"#)],
        ),
        ("/ui/nodes/ID/retire", vec![("confirm", "ID")]),
    ];
    for (path, mut form) in forms {
        form.push(("csrf", &csrf));
        let a = posted_as(&s, path, theirs, &form).await;
        let b = posted_as(&s, path, ghost, &form).await;
        assert!(a.0 >= 400, "{path}: {a:?}");
        assert_eq!(a, b, "{path} tells globex's node from a ghost");
    }
    for decision in ["approve", "reject"] {
        let path = format!("/ui/enrollments/ID/{decision}");
        let a = posted_as(&s, &path, theirs, &[("csrf", &csrf)]).await;
        let b = posted_as(&s, &path, ghost, &[("csrf", &csrf)]).await;
        assert_eq!(a.0, 404, "{a:?}");
        assert_eq!(a, b);
    }
    let r = s
        .post(
            "/ui/revocations",
            Some(&s.origin),
            &[("csrf", &csrf), ("jti", "x")],
        )
        .await;
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(
        depth(&gw, &operator, theirs).await,
        1,
        "globex's queue changed"
    );
    let (st, v) = send(
        &gw,
        "GET",
        &format!("/v1/nodes/{theirs}/state"),
        &operator,
        None,
    )
    .await;
    assert_eq!((st, v["desired"].clone()), (200, json!({})), "{v}");
    let (st, v) = send(&gw, "GET", &format!("/v1/nodes/{theirs}"), &operator, None).await;
    assert_eq!((st, v["labels"].clone()), (200, json!({})), "{v}");
    // Its own node: a command from the console reaches it.
    let r = s
        .post(
            "/ui/nodes/node:pump-17@acme/commands",
            Some(&s.origin),
            &[("csrf", &csrf), ("command_type", "note"), ("body", "{}")],
        )
        .await;
    assert_eq!(r.status().as_u16(), 303, "{:?}", r.text().await);
    assert_eq!(depth(&gw, &operator, "node:pump-17@acme").await, 2);
    // Its stream: its own node's events only.
    let frames = stream_of(&s).await;
    assert!(frames.contains(&acme_msg), "{frames}");
    assert!(
        !frames.contains(&globex_msg) && !frames.contains(&plain_msg),
        "{frames}"
    );

    // The operator: every tenant, a switcher, and one tenant's fleet when switched.
    let (_, op) = sign_in(&gw, &operator).await;
    let op = op.expect("the operator signs in");
    let all = op.get("/ui").await.text().await.unwrap();
    assert!(all.contains("tenant-switcher"), "no tenant switcher");
    for t in ["default", "acme", "globex"] {
        assert!(
            all.contains(&format!(r#"<option value="{t}""#)),
            "{t} not offered"
        );
    }
    for n in ["node:pump-17", "node:pump-17@acme", "node:pump-17@globex"] {
        assert!(
            all.contains(&format!(r#"data-node-id="{n}""#)),
            "{n} not listed"
        );
    }
    let one = op.get("/ui?tenant=acme").await.text().await.unwrap();
    assert!(one.contains(r#"data-node-id="node:pump-17@acme""#));
    assert!(
        !one.contains(r#"data-node-id="node:pump-17""#)
            && !one.contains(r#"data-node-id="node:pump-17@globex""#)
    );
    let frames = stream_of(&op).await;
    for m in [&acme_msg, &globex_msg, &plain_msg] {
        assert!(frames.contains(m.as_str()), "{frames}");
    }
}
