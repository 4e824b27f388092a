//! Approving and rejecting many waiting devices at once from the CLI (issue 38: 4, 11):
//! by a list of ids or every device of one token, and `outpost nodes` saying who waits
//! instead of "no nodes enrolled".

use crate::harness::text;
use crate::self_enroll::{gateway, make_token};
use crate::sim::{gateway_document, SimNode};

fn stdout(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", text(o));
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_and_rejects_waiting_devices_many_at_once() {
    let (gw, d) = gateway();
    let manual = make_token(&gw, &["--max-uses", "10", "--approve", "manual"]);
    let other = make_token(&gw, &["--max-uses", "10", "--approve", "manual"]);
    let gdoc = gateway_document(&d).await;
    let sims: Vec<SimNode> = (0..5)
        .map(|i| SimNode::generated(&format!("node:w{i}")))
        .collect();
    for (i, s) in sims.iter().enumerate() {
        let token = if i < 3 { &manual } else { &other };
        let (st, v) = s.self_enroll(&d, &gdoc, token).await;
        assert_eq!(st, 202, "{v}");
    }
    let out = stdout(&gw.cli(&["nodes"]));
    assert_eq!(
        out.trim(),
        "no node is enrolled yet; 5 devices wait for approval (outpost nodes pending)"
    );
    // Every device of one token, at once (the token node:w0 enrolled with).
    let pending: serde_json::Value =
        serde_json::from_str(&stdout(&gw.cli(&["nodes", "pending", "--json"]))).unwrap();
    let token_of = |n: &str| {
        pending["enrollments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["node_id"] == n)
            .map(|e| e["token_id"].as_str().unwrap().to_string())
            .unwrap()
    };
    let id = token_of("node:w0");
    assert_ne!(id, token_of("node:w3"));
    let with_manual = vec!["node:w0", "node:w1", "node:w2"];
    let out = stdout(&gw.cli(&["nodes", "approve", "--all-from-token", &id]));
    assert_eq!(out.lines().count(), with_manual.len(), "{out}");
    for n in &with_manual {
        assert!(out.contains(&format!("approved {n}")), "{out}");
    }
    // The rest by a list: one rejected, one approved; an unknown id fails, the others go.
    let rest: Vec<&str> = ["node:w0", "node:w1", "node:w2", "node:w3", "node:w4"]
        .into_iter()
        .filter(|n| !with_manual.contains(n))
        .collect();
    let o = gw.cli(&["nodes", "reject", rest[0], "node:nobody"]);
    assert!(!o.status.success(), "one of two failed: {}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("rejected {}", rest[0])));
    let out = stdout(&gw.cli(&["nodes", "approve", rest[1]]));
    assert!(out.contains(&format!("approved {}", rest[1])), "{out}");
    let table = stdout(&gw.cli(&["nodes"]));
    assert_eq!(table.lines().count(), 1 + with_manual.len() + 1, "{table}");
    assert!(!table.contains("wait for approval"), "{table}");
    let none = gw.cli(&["nodes", "approve"]);
    assert_eq!(
        none.status.code(),
        Some(64),
        "ids or --all-from-token: {}",
        text(&none)
    );
}

/// A device waiting for approval says what it is (issue 38: 4): a real node's request
/// carries its host name, OS, agent version and architecture, and the gateway adds the
/// address it came from; `outpost nodes pending` shows them beside the id. A device that
/// says too much is refused and leaves nothing; one that says nothing is listed with
/// dashes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_device_is_shown_with_what_it_says_about_itself() {
    use crate::self_enroll::{enrolling_node, enrollment_becomes, gw_url};
    let (gw, d) = gateway();
    let manual = make_token(&gw, &["--max-uses", "10", "--approve", "manual"]);
    let (home, _) = enrolling_node("node:delivery-17", &gw_url(&d), &manual);
    let node = home.start();
    enrollment_becomes(&node, "pending").await;

    let v: serde_json::Value =
        serde_json::from_str(&stdout(&gw.cli(&["nodes", "pending", "--json"]))).unwrap();
    let e = &v["enrollments"][0];
    assert_eq!(e["node_id"], "node:delivery-17", "{v}");
    assert_eq!(e["source"], "127.0.0.1", "{v}");
    let dev = &e["device"];
    assert_eq!(dev["agent_version"], env!("CARGO_PKG_VERSION"), "{v}");
    assert_eq!(dev["arch"], std::env::consts::ARCH, "{v}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(dev["hostname"], host.as_str(), "{v}");
    assert_eq!(
        dev["tools"],
        serde_json::json!([]),
        "tools are not kept: {v}"
    );
    let line = stdout(&gw.cli(&["nodes", "pending"]));
    for want in [
        "node:delivery-17".to_string(),
        format!("host {host}"),
        format!("outpost {}", env!("CARGO_PKG_VERSION")),
        "from 127.0.0.1".to_string(),
    ] {
        assert!(line.contains(&want), "{want:?} in {line}");
    }

    // Hostile: a host name over 255 bytes is refused as a bad request, nothing kept.
    let gdoc = gateway_document(&d).await;
    let liar = SimNode::generated("node:liar");
    let body = liar.enroll_request_sealing(
        &gdoc,
        &serde_json::json!({"token": manual, "device": {"agent_version": "1", "arch": "x", "hostname": "h".repeat(300)}}),
    );
    let (st, v) = liar
        .send(&d, "POST", "/v1/enroll", &[], &body)
        .await
        .unwrap();
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("bad_request")),
        "{v}"
    );
    // Silent (an older node): listed, with dashes for what it did not say.
    let quiet = SimNode::generated("node:quiet");
    let (st, v) = quiet.self_enroll(&d, &gdoc, &manual).await;
    assert_eq!(st, 202, "{v}");
    let list = stdout(&gw.cli(&["nodes", "pending"]));
    assert!(!list.contains("node:liar"), "{list}");
    let quiet_line = list.lines().find(|l| l.starts_with("node:quiet")).unwrap();
    assert!(quiet_line.contains("host -\tserial -"), "{quiet_line}");
    assert!(quiet_line.contains("from 127.0.0.1"), "{quiet_line}");
}
