//! A node behind a slow link (a weak cellular connection: here a relay that passes
//! 24 KiB/s each way): a backlog in either direction is larger than what the link moves
//! within the node's request timeout. Before the sync loop sized its batches to the
//! link, every pull and every upload of the whole backlog timed out, was retried whole
//! after the backoff, and timed out again: nothing ever got through.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{free_port, http, listen_on, pair, Home};
use crate::sync_batches::{get_json, queue_depth};

/// Bytes a second the relay passes in each direction.
const RATE: u64 = 24 * 1024;

/// Copy `r` to `w` at [`RATE`]: a chunk of at most 1 KiB, then the time it would take
/// on the link.
async fn throttled<R, W>(mut r: R, mut w: W)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = [0u8; 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if w.write_all(&buf[..n]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_micros(n as u64 * 1_000_000 / RATE)).await;
    }
    let _ = w.shutdown().await;
}

struct Link {
    addr: SocketAddr,
    /// While false, connections are closed as soon as they are accepted.
    up: Arc<AtomicBool>,
}

/// A TCP relay to `to` that moves [`RATE`] bytes a second each way, down at first.
async fn slow_link(to: SocketAddr) -> Link {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let up = Arc::new(AtomicBool::new(false));
    let is_up = up.clone();
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            if !is_up.load(Ordering::SeqCst) {
                drop(c);
                continue;
            }
            tokio::spawn(async move {
                let Ok(up) = TcpStream::connect(to).await else {
                    return;
                };
                let (cr, cw) = c.into_split();
                let (ur, uw) = up.into_split();
                tokio::join!(throttled(cr, uw), throttled(ur, cw));
            });
        }
    });
    Link { addr, up }
}

/// 200 commands queued at the gateway and 200 messages in the node's outbox, each
/// backlog ~150 KB: at 24 KiB/s about 6 s on the link, three times the node's 2 s
/// request timeout. Both arrive, each once, and the node's log shows the slow answers
/// it sized its batches down for.
#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_gets_through_a_link_slower_than_the_request_timeout() {
    const N: u64 = 200;
    let port = free_port();
    let gw = Home::init("gateway", "gateway:main", "");
    listen_on(&gw, port);
    let link = slow_link(SocketAddr::from(([127, 0, 0, 1], port))).await;
    let node = Home::init(
        "node",
        "node:slow",
        &format!(
            "[upstream]\nurl = \"http://{}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\nrequest_timeout_s = 2\n",
            link.addr
        ),
    );
    pair(&gw, &node);
    let gw_admin = gw.token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:slow", &["admin"], "1h");
    let g = gw.start();
    // Both backlogs wait while the node is down.
    let pad = "p".repeat(200);
    for i in 0..N {
        let r = http()
            .post(g.url("/v1/commands"))
            .bearer_auth(&gw_admin)
            .json(&json!({"target": {"node_id": "node:slow"}, "command_type": "bench", "body": {"i": i, "pad": pad}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
    }
    // The link is down while the node starts and queues its own backlog.
    let n = node.start();
    for i in 0..N {
        let r = http()
            .post(n.url("/v1/outbox"))
            .bearer_auth(&node_admin)
            .json(&json!({"to": "gateway:main", "payload_type": "DATA", "payload": {"i": i, "pad": pad}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
    }
    link.up.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let limit = Duration::from_secs(150);
    loop {
        let st = get_json(&n, "/v1/status", &node_admin).await;
        let nodes = get_json(&g, "/v1/nodes", &gw_admin).await;
        let gw_queue = nodes["nodes"][0]["queue_depth"]
            .as_u64()
            .unwrap_or(u64::MAX);
        let inbox = queue_depth(&st, "inbox");
        let outbox = queue_depth(&st, "outbox");
        let gw_inbox = get_json(&g, "/v1/inbox?from=node:slow", &gw_admin).await["messages"]
            .as_array()
            .map_or(0, |m| m.len() as u64);
        if gw_queue == 0 && inbox == N && outbox == 0 && gw_inbox == N {
            break;
        }
        assert!(
            start.elapsed() < limit,
            "not through the slow link after {limit:?}: gateway queue {gw_queue}, node inbox {inbox} of {N}, node outbox {outbox}, gateway inbox {gw_inbox} of {N}\nnode log:\n{}",
            n.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "both backlogs through the slow link in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(
        n.log_text().contains("no answer from the gateway in time"),
        "the link was meant to be slower than the timeout: {}",
        n.log_text()
    );
}
