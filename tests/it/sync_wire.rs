//! The node reads the gateway's answers as typed messages: a malformed answer is a
//! failure (logged, retried with backoff), never "nothing pending".

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{http, Home};

/// A stand-in gateway that answers every request `200` with `body`, until dropped.
struct FakeGateway {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
}

impl FakeGateway {
    fn start(body: &'static str) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((mut c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                // The node's requests are GETs or small POSTs: read the head and body.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = c.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_lowercase();
                    if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if rest.len() >= len {
                            break;
                        }
                    }
                }
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FakeGateway { addr, stop }
    }
}

impl Drop for FakeGateway {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Before the typed contract, a pull answer without `pending_count` read as "0
/// pending" and the node went live as if the gateway had nothing for it.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_pull_answer_is_a_failure_not_an_empty_queue() {
    let gw = FakeGateway::start(r#"{"envelopes":[]}"#);
    let node = Home::init(
        "node",
        "node:a",
        &format!(
            "[upstream]\nurl = \"http://{}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n",
            gw.addr
        ),
    );
    let d = node.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        let v: Value = http()
            .get(d.url("/v1/status"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["upstream"]["last_error"].is_string() {
            break v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the handshake never failed: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let up = &status["upstream"];
    assert_eq!(up["state"], "offline", "{status}");
    assert_eq!(up["connected"], false, "{status}");
    let err = up["last_error"].as_str().unwrap();
    assert!(
        err.contains("malformed") && err.contains("pending_count"),
        "{err}"
    );
    assert!(
        d.log_text().contains("gateway_answer_malformed"),
        "{}",
        d.log_text()
    );
}

/// An answer far larger than any the protocol produces (a pull carries at most ~4 MiB)
/// is refused before it is held in memory: a 512 MiB board must not be made to buffer
/// whatever a misbehaving gateway or proxy sends. Before the cap, this 24 MiB answer
/// was read whole and taken as "nothing pending".
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_gateway_answer_is_refused_not_buffered() {
    let pad = "a".repeat(24 * 1024 * 1024);
    let body: &'static str = Box::leak(
        format!(r#"{{"envelopes":[],"pending_count":0,"pad":"{pad}"}}"#).into_boxed_str(),
    );
    let gw = FakeGateway::start(body);
    let node = Home::init(
        "node",
        "node:a",
        &format!(
            "[upstream]\nurl = \"http://{}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n",
            gw.addr
        ),
    );
    let d = node.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v: Value = http()
            .get(d.url("/v1/status"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(err) = v["upstream"]["last_error"].as_str() {
            assert!(err.contains("too large"), "{v}");
            assert_eq!(v["upstream"]["connected"], false, "{v}");
            break;
        }
        assert!(
            v["upstream"]["connected"] != true,
            "the oversized answer was accepted: {v}"
        );
        assert!(tokio::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
