//! `upstream.urls`: a node with two replicas of its gateway (same identity) sticks to
//! the one that answers, moves to the other on a connection error, a timeout or a 5xx,
//! and comes back, losing and repeating nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{copy_dir, free_port, http, listen_on, pair, Daemon, Home};
use crate::sim::{command as command_to, node_sends};

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
        let got = crate::sim::inbox_ints(&inbox);
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

/// What the test serves at the node's first upstream URL until a real replica takes
/// that address over: a replica that accepts connections and never answers (the node's
/// request timeout fires), or one that answers 503 to everything.
#[derive(Clone, Copy, Debug)]
enum Broken {
    Silent,
    Unavailable,
}

struct BrokenReplica {
    port: u16,
    /// Connections accepted (silent) or requests answered 503 (unavailable).
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl BrokenReplica {
    async fn start(kind: Broken) -> BrokenReplica {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        let task = tokio::spawn(async move {
            // Owned by this task, so stopping it closes every connection too.
            let mut held = Vec::new();
            let mut answering = tokio::task::JoinSet::new();
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                match kind {
                    Broken::Silent => {
                        counted.fetch_add(1, Ordering::SeqCst);
                        held.push(sock);
                    }
                    Broken::Unavailable => {
                        answering.spawn(answer_503(sock, Arc::clone(&counted)));
                    }
                }
            }
        });
        BrokenReplica { port, hits, task }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Close the listener and every connection; the port is free when this returns.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Read one request (head and `content-length` body), answer 503 with the gateway's
/// error shape, close.
async fn answer_503(mut sock: tokio::net::TcpStream, hits: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let body_start = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..body_start]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < body_start + length {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = r#"{"error":{"code":"storage_unavailable","message":"the test's broken replica"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    hits.fetch_add(1, Ordering::SeqCst);
    let _ = sock.write_all(answer.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// The payload numbers `k` of what the gateway's inbox lists, in its order.
async fn gateway_inbox(g: &Daemon, token: &str) -> Vec<i64> {
    let inbox: Value = http()
        .get(g.url("/v1/inbox"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    inbox["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .filter_map(|m| m["payload"]["k"].as_i64())
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_for_gateway_inbox(g: &Daemon, token: &str, want: &[i64], n: &Daemon) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = gateway_inbox(g, token).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gateway inbox {got:?}, want {want:?}: {}",
            n.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait (up to 30 s) until the gateway reports every one of `ids` delivered (acked by
/// the node: nothing of them is left to hand out again).
async fn wait_delivered(g: &Daemon, token: &str, ids: &[String]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for id in ids {
        loop {
            let m: Value = http()
                .get(g.url(&format!("/v1/messages/{id}")))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if m["state"] == "delivered" {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{id}: {m}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `upstream_replica_failed` lines in the node's log for `url`.
fn failures_of(n: &Daemon, url: &str) -> Vec<String> {
    let needle = format!("url={url} ");
    n.log_text()
        .lines()
        .filter(|l| l.contains("upstream_replica_failed") && l.contains(&needle))
        .map(str::to_string)
        .collect()
}

/// The node's first URL is broken (`kind`), its second a real gateway: commands reach
/// the node once each and in order, what the node sends reaches the gateway once, the
/// node stays with the replica that answers, and when a real replica takes over the
/// first address (and the second goes away) the node moves there without losing or
/// repeating anything.
async fn a_node_fails_over_past(kind: Broken) {
    let bad = BrokenReplica::start(kind).await;
    let port_b = free_port();
    let (url_a, url_b) = (bad.url(), format!("http://127.0.0.1:{port_b}"));
    let b = Home::init("gateway", "gateway:main", "");
    listen_on(&b, port_b);
    let node = Home::init(
        "node",
        "node:f2",
        &format!(
            "[upstream]\nurls = [\"{url_a}\", \"{url_b}\"]\ngateway_id = \"gateway:main\"\n\
             poll_wait_s = 1\nrequest_timeout_s = 2\n"
        ),
    );
    pair(&b, &node);
    let admin = b.token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:f2", &["admin"], "1h");
    let gb = b.start();
    let n = node.start();

    // Commands queued at the gateway reach the node once each, in order.
    let mut ids = Vec::new();
    let mut want = Vec::new();
    for i in 1..=3 {
        ids.push(command_to(&gb, &admin, "node:f2", i, 3600).await);
        want.push(i as i64);
    }
    wait_for_inbox(&n, &node_admin, &want).await;
    wait_upstream(&n, &url_b).await;
    assert!(
        bad.hits() > 0,
        "{kind:?}: the node never tried the first URL\n{}",
        n.log_text()
    );
    // Failed for the reason the test gave it, not another.
    let why = match kind {
        Broken::Silent => "operation timed out",
        Broken::Unavailable => "gateway answered 503 storage_unavailable",
    };
    assert!(
        failures_of(&n, &url_a).iter().any(|l| l.contains(why)),
        "{kind:?}: no failure of the first URL logged with {why:?}\n{}",
        n.log_text()
    );
    let settled = (bad.hits(), failures_of(&n, &url_b).len());
    // What the node sends reaches the gateway once each, in order.
    for k in 1..=3 {
        node_sends(&n, &node_admin, k).await;
    }
    wait_for_gateway_inbox(&gb, &admin, &[1, 2, 3], &n).await;
    for i in 4..=6 {
        ids.push(command_to(&gb, &admin, "node:f2", i, 3600).await);
        want.push(i as i64);
    }
    wait_for_inbox(&n, &node_admin, &want).await;
    wait_delivered(&gb, &admin, &ids).await;
    // Sticky: the node went back to the first URL only if the replica in use failed
    // (a loaded machine may make a request to B outlast the 2 s timeout).
    let now = (bad.hits(), failures_of(&n, &url_b).len());
    assert!(
        now.0 == settled.0 || now.1 > settled.1,
        "{kind:?}: the node left a replica that answered (hits at the first URL, failures \
         of the second: {settled:?} then {now:?})\n{}",
        n.log_text()
    );

    // A real replica takes over the first address, and the second goes away.
    bad.stop().await;
    let (ga, _replica) = match &b.db {
        // On PostgreSQL: a second replica on the same database, serving while the node
        // is still with B (commands queued through it reach the node through B), then
        // B is killed.
        Some(url) => {
            let a = Home::init("gateway", "gateway:main", "");
            std::fs::remove_dir_all(a.data()).unwrap();
            copy_dir(&b.data(), &a.data());
            Home::use_database(a.dir.path(), url);
            listen_on(&a, port_of(&url_a));
            let ga = a.start();
            for i in 7..=8 {
                ids.push(command_to(&ga, &admin, "node:f2", i, 3600).await);
                want.push(i as i64);
            }
            wait_for_inbox(&n, &node_admin, &want).await;
            let mut gb = gb;
            gb.signal(libc::SIGKILL);
            let _ = gb.child.wait();
            (ga, Some(a))
        }
        // On the embedded store one process holds the state: the gateway stops at the
        // second address and starts at the first.
        None => {
            let _ = gb.stop();
            listen_on(&b, port_of(&url_a));
            (b.start(), None)
        }
    };
    for i in 9..=11 {
        ids.push(command_to(&ga, &admin, "node:f2", i, 3600).await);
        want.push(i as i64);
    }
    wait_for_inbox(&n, &node_admin, &want).await;
    wait_upstream(&n, &url_a).await;
    node_sends(&n, &node_admin, 4).await;
    wait_for_gateway_inbox(&ga, &admin, &[1, 2, 3, 4], &n).await;
    wait_delivered(&ga, &admin, &ids).await;
    // Every command acked, so nothing is left to arrive late: the node's inbox stays
    // exactly the commands.
    wait_for_inbox(&n, &node_admin, &want).await;
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_fails_over_past_a_replica_that_never_answers_and_back() {
    a_node_fails_over_past(Broken::Silent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_fails_over_past_a_replica_answering_503_and_back() {
    a_node_fails_over_past(Broken::Unavailable).await;
}
