//! Issue #14: clients that never finish (item 3) and requests hyper cannot parse (item
//! 8), at the node and at the gateway. Raw sockets, so we can be the client no library
//! would be.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::Home;

/// Short limits, so that each slow client is cut within seconds.
const SHORT: &str =
    "[api]\nheader_timeout_ms = 1000\nbody_timeout_ms = 1500\nidle_timeout_ms = 2000\n";

/// Send `bytes`, then read until the server closes; how long that took, or `None` if
/// it was still open after `max`. Also returns what the server sent.
pub fn time_to_close(addr: SocketAddr, bytes: &[u8], max: Duration) -> (Option<Duration>, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    let start = Instant::now();
    s.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = max.saturating_sub(start.elapsed());
        if left.is_zero() {
            return (None, got);
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (Some(start.elapsed()), got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (Some(start.elapsed()), got)
            }
            Err(_) => return (None, got),
        }
    }
}

/// Status, content type and JSON body of one raw response.
pub fn parse_response(raw: &[u8]) -> (u16, String, Value) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (
        status,
        ctype,
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn both_roles(extra: &str) -> Vec<(Home, crate::harness::Daemon)> {
    [("node", "node:slow"), ("gateway", "gateway:main")]
        .into_iter()
        .map(|(role, id)| {
            let h = Home::init(role, id, extra);
            let d = h.start();
            (h, d)
        })
        .collect()
}

#[test]
fn slow_and_silent_connections_are_closed_within_the_timeouts() {
    for (home, d) in both_roles(SHORT) {
        let role = home.node_id.clone();
        // A body the handler waits for: the node reads envelopes without a token.
        let body_path = if role.starts_with("node") {
            "/v1/envelopes"
        } else {
            "/v1/revocations"
        };
        let slow_body = format!(
            "POST {body_path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        );
        let cases: Vec<(&str, Vec<u8>, u64)> = vec![
            (
                "partial headers",
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n".to_vec(),
                1000,
            ),
            ("1 of 100 body bytes", slow_body.into_bytes(), 1500),
            ("nothing at all", Vec::new(), 1000),
        ];
        let results: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = cases
                .iter()
                .map(|(_, bytes, _)| {
                    s.spawn(|| time_to_close(d.addr, bytes, Duration::from_secs(10)))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for ((name, _, limit_ms), (took, got)) in cases.iter().zip(results) {
            let took = took.unwrap_or_else(|| panic!("{role}: {name}: still open after 10 s"));
            assert!(
                took < Duration::from_millis(limit_ms + 2500),
                "{role}: {name}: closed only after {took:?}"
            );
            if !got.is_empty() {
                // If anything was answered, it is our JSON (the node: 408 body_timeout).
                let (st, ctype, v) = parse_response(&got);
                assert_eq!(ctype, "application/json", "{role}: {name}");
                assert_eq!(v["ok"], false, "{role}: {name}: {v}");
                if role.starts_with("node") {
                    assert_eq!(
                        (st, v["error"]["code"].as_str()),
                        (408, Some("body_timeout"))
                    );
                }
            }
        }
        if role.starts_with("node") {
            // The body timeout is answered, not only enforced.
            let (_, got) = time_to_close(
                d.addr,
                b"POST /v1/envelopes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
                Duration::from_secs(10),
            );
            assert_eq!(
                parse_response(&got).0,
                408,
                "{}",
                String::from_utf8_lossy(&got)
            );
        }
    }
}

#[test]
fn unparseable_requests_get_the_json_error_shape() {
    let mut huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    // Past hyper's own read-buffer limit (~400 KiB), where it answers 431 by itself.
    huge.extend(std::iter::repeat_n(b'a', 512 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("huge headers", huge, 431, "headers_too_large"),
        (
            "negative Content-Length",
            b"POST /v1/tool_call HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "garbage request line",
            b"this is not http\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "binary garbage",
            b"\x16\x03\x01\x02\x00\x01\x00\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
    ];
    let mut failures = Vec::new();
    for (home, d) in both_roles("") {
        for (name, req, want_status, want_code) in &cases {
            let (closed, got) = time_to_close(d.addr, req, Duration::from_secs(10));
            let (st, ctype, v) = parse_response(&got);
            let ok = closed.is_some()
                && st == *want_status
                && ctype == "application/json"
                && v["ok"] == false
                && v["error"]["code"] == *want_code
                && v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty());
            if !ok {
                let mut raw = String::from_utf8_lossy(&got).to_string();
                raw.truncate(300);
                failures.push(format!(
                    "{}: {name}: want {want_status} {want_code} and close, got closed={} {raw:?}",
                    home.node_id,
                    closed.is_some()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Read one response with a Content-Length body from a keep-alive connection.
fn read_one(s: &mut TcpStream) -> (u16, Value) {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "connection closed mid-head");
        got.push(b[0]);
    }
    let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    (
        parse_response(&got).0,
        serde_json::from_slice(&body).unwrap(),
    )
}

#[test]
fn keep_alive_clients_and_long_lived_streams_are_not_cut() {
    for (home, d) in both_roles(SHORT) {
        let mut s = TcpStream::connect(d.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for i in 0..5 {
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let (st, v) = read_one(&mut s);
            assert_eq!(st, 200, "{}: request {i}: {v}", home.node_id);
            // Pauses shorter than the idle timeout (2 s) but, together, longer than it.
            std::thread::sleep(Duration::from_millis(700));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_stream_outlives_the_header_and_idle_timeouts() {
    let home = Home::init("gateway", "gateway:main", SHORT);
    // A node the gateway may seal to, so that a call for it is queued (and announced).
    let keys = outpost::envelope::Keys::from_secret_bytes(&[11; 32], &[12; 32]);
    let doc =
        outpost::envelope::IdentityDocument::new("node:t1", "node", &keys, "2026-01-01T00:00:00Z");
    let o = home.cli_stdin(
        &["trust", "add", "-", "--send"],
        &serde_json::to_vec(&doc).unwrap(),
    );
    assert!(o.status.success(), "{}", crate::harness::text(&o));
    let admin = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut events = client
        .get(gw.url("/v1/events"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status().as_u16(), 200);
    // Hold the stream past both timeouts (1 s and 2 s), then see it still deliver.
    let quiet_until = tokio::time::Instant::now() + Duration::from_secs(4);
    while let Ok(chunk) = tokio::time::timeout_at(quiet_until, events.chunk()).await {
        assert!(chunk.unwrap().is_some(), "the event stream was closed");
    }
    let resp = client
        .post(gw.url("/v1/tool_call"))
        .bearer_auth(&admin)
        .json(
            &json!({"target": {"node_id": "node:t1"}, "tool_name": "echo",
                      "tool_args": {}, "wait_s": 0}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("event: queued") {
        let chunk = tokio::time::timeout_at(deadline, events.chunk())
            .await
            .unwrap_or_else(|_| panic!("no queued event: {seen}"))
            .unwrap()
            .expect("the event stream was closed");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}
