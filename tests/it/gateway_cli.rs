//! The gateway's client commands (issue 29: 7), run as an operator on the gateway host
//! would: `outpost nodes`, `outpost call`, `outpost command`, `outpost message`, each
//! with the gateway's config and nothing else (no token minted by hand, no JSON body).

use serde_json::Value;

use crate::harness::{pair, text, wait_for};

fn out(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_lists_nodes_calls_a_tool_and_queues_a_command_from_the_cli() {
    let (gw, node) = crate::harness::gateway_and_node("node:cli", 2);
    pair(&gw, &node);
    let _g = gw.start();
    // Enrolled, never seen.
    let o = gw.cli(&["nodes"]);
    assert!(o.status.success(), "{}", text(&o));
    let table = out(&o);
    assert!(table.starts_with("NODE"), "{table}");
    assert!(
        table.contains("node:cli") && table.contains("never"),
        "{table}"
    );

    let _n = node.start();
    wait_for(
        "the node online",
        std::time::Duration::from_secs(20),
        || {
            let o = gw.cli(&["nodes", "--json"]);
            let v: Value = serde_json::from_str(&out(&o)).ok()?;
            (v["nodes"][0]["liveness"] == "online").then_some(())
        },
    );
    // A tool call, its result on stdout.
    let o = gw.cli(&[
        "call",
        "node:cli",
        "echo",
        "--args",
        r#"{"hi":1}"#,
        "--wait",
        "20s",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let result: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(result["hi"], 1, "{}", text(&o));
    // A command with an idempotency key: the retry gets the same id.
    let args = [
        "command",
        "node:cli",
        "note",
        "--body",
        r#"{"n":7}"#,
        "--key",
        "k-1",
    ];
    let first = gw.cli(&args);
    assert!(first.status.success(), "{}", text(&first));
    let again = gw.cli(&args);
    assert!(again.status.success(), "{}", text(&again));
    let id = out(&first);
    assert_eq!(
        id,
        out(&again),
        "a retry with the same key is the same command"
    );
    // Where it is.
    let state = wait_for(
        "the command delivered",
        std::time::Duration::from_secs(20),
        || {
            let o = gw.cli(&["message", &id]);
            let v: Value = serde_json::from_str(&out(&o)).ok()?;
            (v["state"] == "delivered").then_some(v)
        },
    );
    assert_eq!(state["message_id"], id.as_str());
    // A node that does not exist: the gateway's answer, said plainly.
    let o = gw.cli(&["call", "node:nope", "echo"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unknown_node"),
        "{}",
        text(&o)
    );
    // On a node's config: told to use the gateway's.
    let o = node.cli(&["nodes"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
}

/// Issue 29 (5): `trust add` without `--send` made a node that could never talk, and the
/// gateway still answered 202 and queued for it; its refusal log line did not name the
/// node. Now `trust add` warns, `/v1/nodes` shows it, queueing is refused with 409
/// `node_without_send`, and the refusal line names the node and the fix.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_trusted_without_send_is_flagged_and_nothing_is_queued_for_it() {
    let (gw, node) = crate::harness::gateway_and_node("node:mute", 1);
    let o = gw.cli_stdin(&["trust", "add", "-"], node.identity_json().as_bytes());
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("without --send"),
        "{}",
        text(&o)
    );
    let o = node.cli_stdin(
        &["trust", "add", "-", "--send", "--issue"],
        gw.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let g = gw.start();
    let o = gw.cli(&["nodes", "--json"]);
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["nodes"][0]["can_connect"], false, "{v}");
    let o = gw.cli(&["command", "node:mute", "note"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("409 node_without_send"),
        "{}",
        text(&o)
    );
    // The node tries anyway: the gateway's line names it and the fix.
    let _n = node.start();
    let line = wait_for(
        "the refusal logged",
        std::time::Duration::from_secs(20),
        || {
            g.log_text()
                .lines()
                .find(|l| l.contains("node_request_refused") && l.contains("node:mute"))
                .map(str::to_string)
        },
    );
    assert!(line.contains("--send"), "{line}");
}
