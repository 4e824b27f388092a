//! Who decided, in the gateway's own audit log (issue 38: 13): a decision made with the
//! CLI on the gateway host names the local user who ran it (`local:<user>`), not a role;
//! enrollment tokens made and revoked there are in the log, and a hand `outpost trust
//! add` / `trust rm` on the gateway host is too, like every other trust change,
//! committed with it. A decision in the console names the subject of the token that
//! signed in, a token revocation included. Labels and desired state written are in it
//! too, with who wrote them.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{text, Home};
use crate::self_enroll::{gateway, make_token};
use crate::sim::{gateway_document, SimNode};

/// The entries of the gateway's own log whose `event` is `event`, once there are `n` of
/// them (what a command on the host leaves pending, the running gateway's sweeper
/// appends within about a second), after `audit verify` passed.
fn entries(gw: &Home, event: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = gw.cli(&["audit", "export", "--jsonl"]);
        assert!(o.status.success(), "{}", text(&o));
        let found: Vec<Value> = String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["event"] == event)
            .collect();
        if found.len() >= n || Instant::now() > deadline {
            let o = gw.cli(&["audit", "verify"]);
            assert!(o.status.success(), "{}", text(&o));
            assert_eq!(found.len(), n, "{event}: {found:?}");
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ok(o: std::process::Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_from_the_cli_name_the_local_user_not_operator() {
    let (gw, d) = gateway();
    let manual = make_token(&gw, &["--max-uses", "2", "--approve", "manual"]);
    let gdoc = gateway_document(&d).await;
    let (st, v) = SimNode::generated("node:w")
        .self_enroll(&d, &gdoc, &manual)
        .await;
    assert_eq!(st, 202, "{v}");
    ok(gw.cli(&["nodes", "approve", "node:w"]));
    let me = outpost::cli::actor::local_actor();
    assert!(me.starts_with("local:"), "{me}");
    let approved = entries(&gw, "approve", 1);
    assert_eq!(approved[0]["actor"], me.as_str(), "{approved:?}");
    // Under sudo, the user who ran sudo comes first.
    let (st, v) = SimNode::generated("node:x")
        .self_enroll(&d, &gdoc, &manual)
        .await;
    assert_eq!(st, 202, "{v}");
    ok(gw.cli_env(
        &["nodes", "reject", "node:x"],
        &[("SUDO_USER", "audit-tester")],
    ));
    let rejected = entries(&gw, "reject", 1);
    let actor = rejected[0]["actor"].as_str().unwrap();
    assert!(
        actor.starts_with("local:audit-tester (sudo as "),
        "{rejected:?}"
    );
    // The token they enrolled with: made, and revoked, by the local user too.
    let made = entries(&gw, "enroll_token_create", 1);
    assert_eq!(made[0]["actor"], me.as_str(), "{made:?}");
    let detail = made[0]["detail"].as_str().unwrap();
    let id = detail.split(' ').next().unwrap().to_string();
    assert!(
        detail.starts_with(&format!("{id} created max_uses=2 approve=manual prefix=- ")),
        "{detail}"
    );
    ok(gw.cli(&["enroll-token", "revoke", &id]));
    let revoked = entries(&gw, "enroll_token_revoke", 1);
    assert_eq!(revoked[0]["actor"], me.as_str(), "{revoked:?}");
    assert_eq!(revoked[0]["detail"], format!("{id} revoked"));
}

/// Labels, desired state and a retirement set from the CLI on the gateway host are in
/// the gateway's audit log by the local user, with what changed (the desired document
/// bound by its hash, not kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_desired_state_and_a_retirement_from_the_cli_are_audited_by_the_local_user() {
    let (gw, d) = gateway();
    let auto = make_token(&gw, &["--max-uses", "1"]);
    let gdoc = gateway_document(&d).await;
    let (st, v) = SimNode::generated("node:l")
        .self_enroll(&d, &gdoc, &auto)
        .await;
    assert_eq!(st, 200, "{v}");
    let me = outpost::cli::actor::local_actor();
    ok(gw.cli(&["nodes", "label", "node:l", "site=north", "role=pump"]));
    ok(gw.cli(&["nodes", "label", "node:l", "role-"]));
    ok(gw.cli(&["nodes", "desired", "node:l", "--set", r#"{"fan":2}"#]));
    ok(gw.cli(&["nodes", "desired", "node:l", "--merge", r#"{"led":"on"}"#]));
    ok(gw.cli(&["nodes", "revoke", "node:l"]));

    let labels = entries(&gw, "labels", 2);
    let said: Vec<&str> = labels
        .iter()
        .map(|e| e["detail"].as_str().unwrap())
        .collect();
    assert_eq!(
        said,
        [
            "node:l labels set role=pump,site=north removed -",
            "node:l labels set - removed role",
        ]
    );
    let desired = entries(&gw, "desired", 2);
    let said: Vec<&str> = desired
        .iter()
        .map(|e| e["detail"].as_str().unwrap())
        .collect();
    assert_eq!(
        said,
        [
            "node:l desired version 1 replace",
            "node:l desired version 2 merge",
        ]
    );
    let hash = |v: Value| outpost::audit::json_sha256_hex(&v);
    assert_eq!(
        desired[0]["args_sha256"],
        hash(serde_json::json!({"fan": 2}))
    );
    assert_eq!(
        desired[1]["args_sha256"],
        hash(serde_json::json!({"fan": 2, "led": "on"}))
    );
    let revoked = entries(&gw, "revoke", 1);
    for e in labels.iter().chain(&desired).chain(&revoked) {
        assert_eq!(e["actor"], me.as_str(), "{e}");
        assert_eq!(e["outcome"], "ok", "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_add_and_rm_on_a_running_gateway_are_in_its_audit_log_by_the_local_user() {
    let (gw, _d) = gateway();
    let node = SimNode::generated("node:t1");
    let file = gw.dir.path().join("t1.json");
    std::fs::write(&file, serde_json::to_vec(&node.document()).unwrap()).unwrap();
    let file = file.to_str().unwrap();
    let sudo = [("SUDO_USER", "audit-tester")];
    let out = ok(gw.cli_env(&["trust", "add", file, "--send"], &sudo));
    assert!(out.starts_with("trusted node:t1"), "{out}");
    let out = ok(gw.cli_env(&["trust", "add", file, "--send", "--issue"], &sudo));
    assert!(out.starts_with("updated node:t1"), "{out}");
    ok(gw.cli_env(&["trust", "rm", "node:t1"], &sudo));

    let key = outpost::audit::sha256_hex(
        outpost::envelope::b64_encode(&node.document().sign_pk).as_bytes(),
    );
    let added = entries(&gw, "trust_add", 2);
    let removed = entries(&gw, "trust_remove", 1);
    let said: Vec<&str> = added
        .iter()
        .chain(&removed)
        .map(|e| e["detail"].as_str().unwrap())
        .collect();
    assert_eq!(
        said,
        [
            "node:t1 trusted node send=true issue=false",
            "node:t1 updated node send=true issue=true",
            "node:t1 removed node",
        ]
    );
    for e in added.iter().chain(&removed) {
        assert_eq!(e["args_sha256"], key.as_str(), "{e}");
        assert_eq!(e["outcome"], "ok", "{e}");
        let actor = e["actor"].as_str().unwrap();
        assert!(actor.starts_with("local:audit-tester (sudo as "), "{e}");
    }
    // In the order they were made.
    let index = |e: &Value| e["index"].as_u64().unwrap();
    assert!(index(&added[0]) < index(&added[1]) && index(&added[1]) < index(&removed[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_in_the_console_name_the_subject_of_the_token_that_signed_in() {
    let (gw, d) = gateway();
    let manual = make_token(&gw, &["--max-uses", "1", "--approve", "manual"]);
    let gdoc = gateway_document(&d).await;
    let (st, v) = SimNode::generated("node:c")
        .self_enroll(&d, &gdoc, &manual)
        .await;
    assert_eq!(st, 202, "{v}");
    let admin = ok(gw.cli(&[
        "token",
        "issue",
        "--aud",
        "gateway:main",
        "--scope",
        "admin",
        "--ttl",
        "1h",
        "--sub",
        "alice@site-3",
    ]));
    let (_, ui) = crate::console::sign_in(&d, admin.trim()).await;
    let ui = ui.expect("a console session");
    let csrf = ui.csrf().await;
    let origin = Some(ui.origin.as_str());
    let r = ui
        .post("/ui/enrollments/node:c/approve", origin, &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    let r = ui
        .post(
            "/ui/revocations",
            origin,
            &[("csrf", &csrf), ("jti", "j-lost")],
        )
        .await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    // A repeat revokes nothing more, and is no new decision.
    let r = ui
        .post(
            "/ui/revocations",
            origin,
            &[("csrf", &csrf), ("jti", "j-lost")],
        )
        .await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    let approved = entries(&gw, "approve", 1);
    assert_eq!(approved[0]["actor"], "alice@site-3", "{approved:?}");
    let revoked = entries(&gw, "token_revoke", 1);
    assert_eq!(revoked[0]["actor"], "alice@site-3", "{revoked:?}");
    assert_eq!(revoked[0]["detail"], "j-lost revoked", "{revoked:?}");
}
