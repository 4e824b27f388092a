//! Rollouts, pending enrollments and retirements confined to a tenant (PROTOCOL §18):
//! a tenant's rollout targets only its own nodes and only its tenant (and the operator)
//! see it; its pending devices and retirements are its own; anything of another tenant
//! answers exactly as something that does not exist and changes nothing.

use serde_json::{json, Value};

use crate::harness::{text, Daemon, Home};
use crate::self_enroll::make_token;
use crate::sim::SimNode;
use crate::tenants::{events_of, send, tenant_token};

fn note_rollout() -> Value {
    json!({"selector": "", "action": {"command": {"type": "note", "body": {}}}})
}

/// Two requests answered alike: the same status, the same error code, and messages
/// equal but for the name asked for.
fn alike(a: &(u16, Value), b: &(u16, Value), names: (&str, &str), what: &str) {
    assert!(a.0 >= 400, "{what} answered {} {}", a.0, a.1);
    assert_eq!(a.0, b.0, "{what}: {} vs {}", a.1, b.1);
    assert_eq!(a.1["error"]["code"], b.1["error"]["code"], "{what}");
    let m = |v: &Value, n: &str| v["error"]["message"].as_str().map(|m| m.replace(n, "X"));
    assert_eq!(m(&a.1, names.0), m(&b.1, names.1), "{what}");
}

/// The node ids of a rollout's targets, as `token` reads them.
async fn targets(gw: &Daemon, token: &str, id: &str) -> Vec<String> {
    let (st, v) = send(gw, "GET", &format!("/v1/rollouts/{id}/nodes"), token, None).await;
    assert_eq!(st, 200, "{v}");
    let mut ids: Vec<String> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_rollouts_pending_devices_and_retirements_are_its_own() {
    let home = Home::init("gateway", "gateway:main", "");
    for t in ["acme", "globex"] {
        let o = home.cli(&["tenant", "create", t]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let plain = SimNode::with_keys("node:pump-17", 81);
    let acme = SimNode::with_keys("node:pump-17", 82);
    let globex = SimNode::with_keys("node:pump-17", 83);
    plain.enroll(&home);
    for (n, t) in [(&acme, "acme"), (&globex, "globex")] {
        let o = home.cli_stdin(
            &["trust", "add", "-", "--send", "--tenant", t],
            n.identity_json().as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o));
    }
    let manual = |t: &str| {
        make_token(
            &home,
            &["--max-uses", "5", "--approve", "manual", "--tenant", t],
        )
    };
    let (acme_manual, globex_manual) = (manual("acme"), manual("globex"));
    let operator = home.token("gateway:main", &["admin"], "1h");
    let acme_admin = tenant_token(&home, "acme", &["admin"]);
    let acme_read = tenant_token(&home, "acme", &["read"]);
    let globex_admin = tenant_token(&home, "globex", &["admin"]);
    let globex_read = tenant_token(&home, "globex", &["read"]);
    let gw = home.start();

    // acme's rollout to "every node" is a rollout to every node of acme's.
    let (st, v) = send(
        &gw,
        "POST",
        "/v1/rollouts",
        &acme_admin,
        Some(note_rollout()),
    )
    .await;
    assert_eq!((st, v["tenant"].as_str()), (201, Some("acme")), "{v}");
    let mine = v["rollout_id"].as_str().unwrap().to_string();
    assert_eq!(targets(&gw, &acme_read, &mine).await, ["node:pump-17"]);
    assert_eq!(targets(&gw, &operator, &mine).await, ["node:pump-17@acme"]);
    let (st, v) = send(&gw, "POST", "/v1/rollouts", &operator, Some(note_rollout())).await;
    assert_eq!((st, v["tenant"].clone()), (201, Value::Null), "{v}");
    let everyone = v["rollout_id"].as_str().unwrap().to_string();
    assert_eq!(
        targets(&gw, &operator, &everyone).await,
        ["node:pump-17", "node:pump-17@acme", "node:pump-17@globex"]
    );
    // globex (and acme, for the operator's) get for it what they get for no rollout.
    let ghost = uuid::Uuid::now_v7().to_string();
    for (token, id) in [
        (&globex_read, &mine),
        (&globex_admin, &mine),
        (&acme_admin, &everyone),
    ] {
        let mut routes = vec![("GET", ""), ("GET", "/nodes")];
        if token != &globex_read {
            routes.extend([("POST", "/cancel"), ("POST", "/resume")]);
        }
        for (method, tail) in routes {
            let a = send(
                &gw,
                method,
                &format!("/v1/rollouts/{id}{tail}"),
                token,
                None,
            )
            .await;
            let b = send(
                &gw,
                method,
                &format!("/v1/rollouts/{ghost}{tail}"),
                token,
                None,
            )
            .await;
            alike(&a, &b, (id, &ghost), &format!("{method} {tail}"));
        }
    }
    let listed = |v: &Value| -> Vec<String> {
        v["rollouts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["rollout_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, v) = send(&gw, "GET", "/v1/rollouts", &globex_read, None).await;
    assert!(listed(&v).is_empty(), "{v}");
    let (_, v) = send(&gw, "GET", "/v1/rollouts", &acme_read, None).await;
    assert_eq!(listed(&v), std::slice::from_ref(&mine), "{v}");
    let (_, v) = send(&gw, "GET", "/v1/rollouts", &operator, None).await;
    assert_eq!(listed(&v).len(), 2, "{v}");
    // Each node gets one note from the operator's, and acme's node one from acme's.
    // (What is not acknowledged is handed out again: counted once.)
    let mut got = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let (ids, _) = acme.pull(&gw, 1, 10).await;
        got.extend(ids);
        if got.len() >= 2 {
            break;
        }
    }
    assert_eq!(got.len(), 2, "acme's node got {got:?}");
    for n in [&globex, &plain] {
        let mut got = std::collections::BTreeSet::new();
        for _ in 0..5 {
            got.extend(n.pull(&gw, 1, 10).await.0);
        }
        assert_eq!(got.len(), 1, "{} got {got:?}", n.id);
    }
    // globex's stream has none of acme's rollout, acme's has it and not the operator's.
    let frames = events_of(&gw, &globex_read).await;
    assert!(
        !frames.contains(&mine) && !frames.contains(&everyone),
        "{frames}"
    );
    let frames = events_of(&gw, &acme_read).await;
    assert!(
        frames.contains(&mine) && !frames.contains(&everyone),
        "{frames}"
    );
    // One device id waits in each tenant; each tenant sees and settles only its own.
    let gw_doc = crate::sim::gateway_document(&gw).await;
    let dev_acme = SimNode::with_keys("node:pump-20", 84);
    let dev_globex = SimNode::with_keys("node:pump-20", 85);
    for (d, t) in [(&dev_acme, &acme_manual), (&dev_globex, &globex_manual)] {
        let (st, v) = d.self_enroll(&gw, &gw_doc, t).await;
        assert_eq!(st, 202, "{v}");
    }
    let pending = |v: &Value| -> Vec<String> {
        v["enrollments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["node_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (st, v) = send(&gw, "GET", "/v1/enrollments", &acme_read, None).await;
    assert_eq!(
        (st, pending(&v)),
        (200, vec!["node:pump-20".to_string()]),
        "{v}"
    );
    assert_eq!(
        v["enrollments"][0]["node_sign_pk"],
        json!(outpost::envelope::b64_encode(&dev_acme.document().sign_pk))
    );
    let (_, v) = send(&gw, "GET", "/v1/enrollments", &operator, None).await;
    let mut all = pending(&v);
    all.sort();
    assert_eq!(all, ["node:pump-20@acme", "node:pump-20@globex"], "{v}");
    for verb in ["approve", "reject"] {
        let a = send(
            &gw,
            "POST",
            &format!("/v1/enrollments/node:pump-20@globex/{verb}"),
            &acme_admin,
            None,
        )
        .await;
        let b = send(
            &gw,
            "POST",
            &format!("/v1/enrollments/node:ghost-1/{verb}"),
            &acme_admin,
            None,
        )
        .await;
        alike(&a, &b, ("node:pump-20@globex", "node:ghost-1"), verb);
    }
    let (st, v) = send(
        &gw,
        "POST",
        "/v1/enrollments/node:pump-20/approve",
        &acme_admin,
        None,
    )
    .await;
    assert_eq!(
        (st, v["node_id"].as_str()),
        (200, Some("node:pump-20")),
        "{v}"
    );
    let (_, v) = send(&gw, "GET", "/v1/enrollments", &globex_read, None).await;
    assert_eq!(
        pending(&v),
        ["node:pump-20"],
        "globex's device is still waiting: {v}"
    );
    let (_, v) = send(&gw, "GET", "/v1/enrollments", &operator, None).await;
    assert_eq!(pending(&v), ["node:pump-20@globex"], "{v}");

    // acme retires its own node:pump-17, never globex's or default's.
    for body_node in ["node:pump-17@globex", "node:pump-17@default"] {
        let a = send(
            &gw,
            "POST",
            "/v1/node_revocations",
            &acme_admin,
            Some(json!({"node_id": body_node})),
        )
        .await;
        let b = send(
            &gw,
            "POST",
            "/v1/node_revocations",
            &acme_admin,
            Some(json!({"node_id": "node:ghost-2"})),
        )
        .await;
        alike(
            &a,
            &b,
            (body_node, "node:ghost-2"),
            "retire another tenant's node",
        );
        let a = send(
            &gw,
            "POST",
            "/v1/node_grace_ends",
            &acme_admin,
            Some(json!({"node_id": body_node})),
        )
        .await;
        let b = send(
            &gw,
            "POST",
            "/v1/node_grace_ends",
            &acme_admin,
            Some(json!({"node_id": "node:ghost-2"})),
        )
        .await;
        alike(
            &a,
            &b,
            (body_node, "node:ghost-2"),
            "end another tenant's grace",
        );
    }
    let (st, v) = send(
        &gw,
        "POST",
        "/v1/node_revocations",
        &acme_admin,
        Some(json!({"node_id": "node:pump-17"})),
    )
    .await;
    assert_eq!(
        (st, v["node_id"].as_str()),
        (200, Some("node:pump-17")),
        "{v}"
    );
    let (st, _) = send(&gw, "GET", "/v1/nodes/node:pump-17@acme", &operator, None).await;
    assert_eq!(st, 404, "a retired node is no longer in the fleet");
    for addr in ["node:pump-17@globex", "node:pump-17"] {
        let (st, v) = send(&gw, "GET", &format!("/v1/nodes/{addr}"), &operator, None).await;
        assert_eq!(
            (st, v["can_connect"].as_bool()),
            (200, Some(true)),
            "{addr}: {v}"
        );
    }
}
