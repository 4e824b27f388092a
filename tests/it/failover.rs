//! `upstream.urls`: a node with two replicas of its gateway (same identity) sticks to
//! the one that answers, moves to the other when it dies, and comes back.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{copy_dir, free_port, http, listen_on, pair, Daemon, Home};

async fn command(g: &Daemon, token: &str, i: i64) {
    let r = http()
        .post(g.url("/v1/commands"))
        .bearer_auth(token)
        .json(&json!({"target": {"node_id": "node:f1"}, "command_type": "ping", "body": {"i": i}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
}

async fn wait_for_inbox(n: &Daemon, token: &str, want: &[i64]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let inbox: Value = http()
            .get(n.url("/v1/inbox"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let got: Vec<i64> = inbox["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .filter_map(|m| m["payload"]["i"].as_i64())
                    .collect()
            })
            .unwrap_or_default();
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node inbox {got:?}, want {want:?}: {}",
            n.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait (up to 10 s) until the node reports `want` as the upstream in use: the report
/// follows the node's requests, and one may be under way to the other replica.
async fn wait_upstream(n: &Daemon, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = upstream_url(n).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "upstream {got}, want {want}\n{}",
            n.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn upstream_url(n: &Daemon) -> String {
    let st: Value = http()
        .get(n.url("/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    st["upstream"]["url"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_moves_to_the_replica_that_answers_and_back() {
    let (port_a, port_b) = (free_port(), free_port());
    let a = Home::init("gateway", "gateway:main", "");
    listen_on(&a, port_a);
    let urls = format!("[\"http://127.0.0.1:{port_a}\", \"http://127.0.0.1:{port_b}\"]");
    let node = Home::init(
        "node",
        "node:f1",
        &format!("[upstream]\nurls = {urls}\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n"),
    );
    pair(&a, &node);
    // Replica B: the same identity and enrolments (a copy of A's data directory).
    let b = Home::init("gateway", "gateway:main", "");
    listen_on(&b, port_b);
    std::fs::remove_dir_all(b.data()).unwrap();
    copy_dir(&a.data(), &b.data());
    // On PostgreSQL the replicas share one database (the state is not in the data dir).
    if let Some(url) = &a.db {
        Home::use_database(b.dir.path(), url);
    }
    let admin = a.token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:f1", &["admin"], "1h");

    let ga = a.start();
    let n = node.start();
    command(&ga, &admin, 1).await;
    wait_for_inbox(&n, &node_admin, &[1]).await;
    assert_eq!(upstream_url(&n).await, format!("http://127.0.0.1:{port_a}"));

    // A dies; B takes over. (Dead before B queues: on a shared database a dying A
    // could otherwise still hand B's command to the node's long-poll.)
    let mut ga = ga;
    ga.signal(libc::SIGKILL);
    let _ = ga.child.wait();
    let gb = b.start();
    command(&gb, &admin, 2).await;
    wait_for_inbox(&n, &node_admin, &[1, 2]).await;
    wait_upstream(&n, &format!("http://127.0.0.1:{port_b}")).await;
    // What the node sends goes to B too.
    let r = http()
        .post(n.url("/v1/outbox"))
        .bearer_auth(&node_admin)
        .json(&json!({"to": "gateway:main", "payload_type": "DATA", "payload": {"from": "f1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let inbox: Value = http()
            .get(gb.url("/v1/inbox"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if inbox["messages"].as_array().is_some_and(|m| m.len() == 1) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{inbox}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A is back and B dies: the node returns to A.
    drop(ga);
    let ga = a.start();
    gb.signal(libc::SIGKILL);
    command(&ga, &admin, 3).await;
    wait_for_inbox(&n, &node_admin, &[1, 2, 3]).await;
    wait_upstream(&n, &format!("http://127.0.0.1:{port_a}")).await;
    assert!(
        n.log_text().contains("upstream_failover"),
        "{}",
        n.log_text()
    );
}
