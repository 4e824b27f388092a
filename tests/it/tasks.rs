//! The node's task worker (`TASK_REQUEST`s from its gateway, run as local tool calls).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{http, pair, Home};
use crate::sync_batches::{get_json, queue_depth};

/// A task whose result cannot be queued (the outbox to its requester is at its cap, and
/// there is no upstream to drain it) stays queued and is tried again on the worker's
/// 5 s tick. Before, the worker counted it as done and ran it again at once, in a loop
/// for as long as the outbox stayed full: thousands of attempts a second, a core spent.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_whose_result_cannot_be_queued_waits_instead_of_spinning() {
    let gw = Home::init("gateway", "gateway:main", "");
    let node = Home::init(
        "node",
        "node:t1",
        "[queue]\nmax_messages_per_recipient = 1\n",
    );
    pair(&gw, &node);
    let admin = node.token("node:t1", &["admin"], "1h");
    let n = node.start();
    // The one outbox slot for the gateway is taken, and nothing uploads it.
    let r = http()
        .post(n.url("/v1/outbox"))
        .bearer_auth(&admin)
        .json(&json!({"to": "gateway:main", "payload_type": "DATA", "payload": {"fill": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
    // A task from the gateway, as it would pull it: sealed by the gateway, with a
    // token the gateway issued for this node.
    let token = gw.token("node:t1", &["tool:echo"], "1h");
    let payload =
        json!({"tool_name": "echo", "tool_args": {"x": 1}, "token": token, "job_id": "spin-1"});
    let sealed = gw.cli_stdin(
        &[
            "envelope",
            "seal",
            "--to",
            "node:t1",
            "--type",
            "TASK_REQUEST",
        ],
        payload.to_string().as_bytes(),
    );
    assert!(sealed.status.success(), "{}", crate::harness::text(&sealed));
    let r = http()
        .post(n.url("/v1/envelopes"))
        .header("Content-Type", "application/json")
        .body(sealed.stdout)
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "{}: {}",
        r.status(),
        r.text().await.unwrap()
    );
    let attempts = || n.log_text().matches("task_result_not_queued").count();
    let start = Instant::now();
    while attempts() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the task never ran: {}",
            n.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Four seconds more: the worker's tick is 5 s, so at most one more try. (A window,
    // not a condition: what is measured is how often it tries.)
    let before = attempts();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = attempts() - before;
    assert!(
        during <= 2,
        "{during} attempts to queue the same result in 4 s"
    );
    // The task is still there, to be answered once the outbox has room.
    let st = get_json(&n, "/v1/status", &admin).await;
    assert_eq!(queue_depth(&st, "tasks"), 1, "{}", st["queues"]);
}
