//! Every answer the node reads from a peer is capped: a fake gateway on the upstream URL
//! (plain HTTP on the path, a spoofed name, before the TLS pin is checked) that answers
//! with an endless body costs the node at most the cap, not an OOM kill.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{http, Home};
use crate::self_enroll::{enrolling_node, make_token};

/// What the fake gateway saw of its first connection.
#[derive(Default)]
struct Seen {
    written: AtomicU64,
    /// The client closed the connection while the body was still streaming.
    client_gone: AtomicBool,
}

/// Stop streaming here even if the client keeps reading (so that a client without a
/// cap does not eat the test machine's memory).
const SAFETY_LIMIT: u64 = 256 * 1024 * 1024;

/// A "gateway" that answers every request with 200 and a body that never ends.
async fn endless_gateway() -> (std::net::SocketAddr, Arc<Seen>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let first = seen.clone();
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let seen = if n == 0 {
                first.clone()
            } else {
                Arc::new(Seen::default())
            };
            n += 1;
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => head.extend_from_slice(&buf[..k]),
                    }
                }
                let start = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                              connection: close\r\n\r\n";
                if s.write_all(start).await.is_err() {
                    return;
                }
                // Whitespace: a JSON parser reading along would still be waiting.
                let chunk = vec![b' '; 64 * 1024];
                while seen.written.load(Ordering::SeqCst) < SAFETY_LIMIT {
                    if s.write_all(&chunk).await.is_err() {
                        seen.client_gone.store(true, Ordering::SeqCst);
                        return;
                    }
                    seen.written.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_secs(600)).await;
            });
        }
    });
    (addr, seen)
}

/// The peak resident set of process `pid`, in KiB (`VmHWM`).
fn peak_rss_kib(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_enrolling_node_stops_reading_an_endless_hello_at_the_cap() {
    // A real token (the node checks it before it asks anything), for a gateway that is
    // not the one answering.
    let gw = Home::init("gateway", "gateway:main", "");
    let token = make_token(&gw, &["--max-uses", "1"]);
    let (fake, seen) = endless_gateway().await;
    let (node, _) = enrolling_node("node:capped", &format!("http://{fake}"), &token);
    let d = node.start();
    let started = std::time::Instant::now();
    let reason = loop {
        let v: serde_json::Value = http()
            .get(d.url("/v1/status"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let e = &v["upstream"]["enrollment"];
        if let Some(r) = e["reason"].as_str().filter(|r| r.contains("too large")) {
            break r.to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the node never said the hello was too large: {v}\n{}",
            d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        reason.as_str(),
        "reading the answer: answer too large (over 65536 bytes)"
    );
    // The fake gateway learns of the hang-up when its next write fails, which may come
    // a moment after the node has said why.
    let gone = std::time::Instant::now();
    while !seen.client_gone.load(Ordering::SeqCst) {
        assert!(
            gone.elapsed() < Duration::from_secs(10),
            "the node never hung up on the endless body"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let written = seen.written.load(Ordering::SeqCst);
    assert!(
        written < 32 * 1024 * 1024,
        "the node stopped reading soon after the cap: {written} bytes went out"
    );
    let peak = peak_rss_kib(d.pid());
    assert!(peak < 128 * 1024, "node peak RSS {peak} KiB");
}
