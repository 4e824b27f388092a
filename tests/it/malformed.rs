//! Bad input of every kind gets the documented JSON error, and the daemon never dies.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::harness::Home;

/// Send raw bytes (so we can send what no well-behaved client would) and parse the answer.
fn raw(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (status, body)
}

fn post(path: &str, ctype: Option<&str>, auth: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(c) = ctype {
        r.push_str(&format!("Content-Type: {c}\r\n"));
    }
    if let Some(a) = auth {
        r.push_str(&format!("Authorization: Bearer {a}\r\n"));
    }
    r.push_str("\r\n");
    let mut v = r.into_bytes();
    v.extend_from_slice(body);
    v
}

#[test]
fn thirty_plus_malformed_requests_get_documented_errors() {
    let home = Home::init("node", "node:a", "[api]\nmax_body_bytes = 65536\n");
    let mut d = home.start();
    let tok = home.token("node:a", &["tool:*", "admin"], "10m");
    let j = Some("application/json");
    let t = Some(tok.as_str());
    let big = vec![b'a'; 200_000];
    let mut big_json = b"{\"tool_name\":\"echo\",\"tool_args\":{\"x\":\"".to_vec();
    big_json.extend(std::iter::repeat_n(b'x', 100_000));
    big_json.extend_from_slice(b"\"}}");
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("not json", post("/v1/tool_call", j, t, b"hello"), 400, "bad_request"),
        ("empty body", post("/v1/tool_call", j, t, b""), 400, "bad_request"),
        ("json array", post("/v1/tool_call", j, t, b"[1,2]"), 400, "bad_request"),
        ("json null", post("/v1/tool_call", j, t, b"null"), 400, "bad_request"),
        ("truncated", post("/v1/tool_call", j, t, b"{\"tool_name\":"), 400, "bad_request"),
        ("trailing garbage", post("/v1/tool_call", j, t, b"{\"tool_name\":\"echo\"} x"), 400, "bad_request"),
        ("tool_name number", post("/v1/tool_call", j, t, b"{\"tool_name\":5}"), 400, "bad_request"),
        ("tool_name missing", post("/v1/tool_call", j, t, b"{\"tool_args\":{}}"), 400, "bad_request"),
        ("unknown field", post("/v1/tool_call", j, t, b"{\"tool_name\":\"echo\",\"x\":1}"), 400, "bad_request"),
        ("job_id number", post("/v1/tool_call", j, t, b"{\"tool_name\":\"echo\",\"job_id\":7}"), 400, "bad_request"),
        ("job_id bad chars", post("/v1/tool_call", j, t, b"{\"tool_name\":\"echo\",\"job_id\":\"a b/c\"}"), 400, "bad_request"),
        ("empty tool name", post("/v1/tool_call", j, t, b"{\"tool_name\":\"\"}"), 400, "bad_request"),
        ("invalid utf-8", post("/v1/tool_call", j, t, b"{\"tool_name\":\"\xff\xfe\"}"), 400, "bad_request"),
        ("no content type", post("/v1/tool_call", None, t, b"{\"tool_name\":\"echo\"}"), 415, "unsupported_media_type"),
        ("text/plain", post("/v1/tool_call", Some("text/plain"), t, b"{\"tool_name\":\"echo\"}"), 415, "unsupported_media_type"),
        ("form", post("/v1/tool_call", Some("application/x-www-form-urlencoded"), t, b"a=b"), 415, "unsupported_media_type"),
        ("huge body", post("/v1/tool_call", j, t, &big), 413, "payload_too_large"),
        ("huge valid json", post("/v1/tool_call", j, t, &big_json), 413, "payload_too_large"),
        ("unknown tool", post("/v1/tool_call", j, t, b"{\"tool_name\":\"rm_rf\"}"), 404, "unknown_tool"),
        ("args fail schema", post("/v1/tool_call", j, t, b"{\"tool_name\":\"pii_redact\",\"tool_args\":{\"text\":5}}"), 400, "bad_request"),
        ("args missing required", post("/v1/tool_call", j, t, b"{\"tool_name\":\"pii_redact\",\"tool_args\":{}}"), 400, "bad_request"),
        ("args not object", post("/v1/tool_call", j, t, b"{\"tool_name\":\"pii_redact\",\"tool_args\":\"text\"}"), 400, "bad_request"),
        ("garbage token", post("/v1/tool_call", j, Some("v4.public.garbage"), b"{\"tool_name\":\"echo\"}"), 401, "unauthorized"),
        ("token of wrong version", post("/v1/tool_call", j, Some("v2.local.AAAA"), b"{\"tool_name\":\"echo\"}"), 401, "unauthorized"),
        ("body token differs from header", post("/v1/tool_call", j, t, b"{\"tool_name\":\"echo\",\"token\":\"other\"}"), 400, "bad_request"),
        ("envelope not json", post("/v1/envelopes", j, None, b"nope"), 400, "bad_request"),
        ("envelope wrong version", post("/v1/envelopes", j, None, b"{\"v\":2}"), 400, "unsupported_version"),
        ("envelope empty object", post("/v1/envelopes", j, None, b"{}"), 400, "bad_request"),
        ("outbox missing fields", post("/v1/outbox", j, t, b"{\"to\":\"node:b\"}"), 400, "bad_request"),
        ("outbox unknown recipient", post("/v1/outbox", j, t, b"{\"to\":\"node:zz\",\"payload_type\":\"DATA\",\"payload\":{}}"), 400, "bad_request"),
        ("outbox payload not object", post("/v1/outbox", j, t, b"{\"to\":\"node:a\",\"payload_type\":\"DATA\",\"payload\":3}"), 400, "bad_request"),
        ("outbox without token", post("/v1/outbox", j, None, b"{\"to\":\"node:a\",\"payload_type\":\"DATA\",\"payload\":{}}"), 401, "unauthorized"),
        ("inbox ack unknown id", post("/v1/inbox/nope/ack", j, t, b""), 404, "not_found"),
        ("unknown route", post("/v1/nope", j, t, b"{}"), 404, "not_found"),
        ("wrong method", b"DELETE /v1/tool_call HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(), 405, "method_not_allowed"),
        ("message status unknown", b"GET /v1/messages/none HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(), 404, "not_found"),
        ("inbox without token", b"GET /v1/inbox HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(), 401, "unauthorized"),
        ("inbox bad query", format!("GET /v1/inbox?limit=abc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\nConnection: close\r\n\r\n").into_bytes(), 400, "bad_request"),
    ];
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for (name, req, want_status, want_code) in &cases {
        let (status, body) = raw(d.addr, req);
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let ok = status == *want_status
            && v["ok"] == false
            && v["error"]["code"].as_str() == Some(want_code)
            && v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty());
        if !ok {
            failures.push(format!(
                "{name}: want {want_status} {want_code}, got {status} {body}"
            ));
        }
        assert!(d.is_running(), "daemon died on case {name:?}");
    }
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Internal details never leak.
    let (_, body) = raw(
        d.addr,
        &post("/v1/tool_call", j, t, b"{\"tool_name\":\"rm_rf\"}"),
    );
    assert!(!body.contains(home.data().to_str().unwrap()), "{body}");
}
