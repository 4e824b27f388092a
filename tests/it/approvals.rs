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
