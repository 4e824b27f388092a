use super::*;
use crate::envelope::Keys;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Found by the fault harness (scripts/chaos.py flap and crash, docs/RELIABILITY.md
/// F5): two identical requests signed in the same millisecond carried the same
/// signature, and the gateway refused the second as a replay.
#[tokio::test]
async fn two_requests_in_one_millisecond_never_share_a_signature() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        let _ = tx.send(String::from_utf8_lossy(&head).to_lowercase());
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if sock.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let up = Upstream {
        url: format!("http://{addr}"),
        urls: vec![format!("http://{addr}")],
        gateway_id: "gateway:main".into(),
        ca_file: None,
        poll_wait_s: 1,
        enroll_token_file: None,
        enroll_token_delete: false,
        request_timeout_s: 5,
        retry_max_s: 60,
    };
    let t = Transport::new(
        &up,
        "node:a",
        Arc::new(KeyRing::from(Keys::generate())),
        Arc::new(|_| None),
    )
    .unwrap();
    let path = t.node_path("pull") + "?wait_s=0&max=50";
    let now = 1_780_000_000_000;
    for _ in 0..3 {
        t.get::<serde_json::Value>(&path, now, Duration::ZERO)
            .await
            .unwrap();
    }
    let header = |head: &str, name: &str| -> String {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_default()
            .to_string()
    };
    let mut stamps = Vec::new();
    let mut sigs = std::collections::HashSet::new();
    for _ in 0..3 {
        let head = rx.recv().await.unwrap();
        stamps.push(header(&head, "outpost-timestamp").parse::<u64>().unwrap());
        sigs.insert(header(&head, "outpost-signature"));
    }
    assert_eq!(stamps, [now, now + 1, now + 2]);
    assert_eq!(sigs.len(), 3, "a signature was sent twice");
}

/// A server that answers every request 401 `clock_skew` with a statement made by
/// `answer(signature header)`, and sends each request head to the channel.
async fn skew_server(
    answer: impl Fn(&str) -> crate::envelope::TimeStatement + Send + Sync + 'static,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (tx, answer) = (tx.clone(), answer.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = sock.read(&mut chunk).await {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        let head = String::from_utf8_lossy(&head).to_string();
                        let sig = header(&head, "outpost-signature");
                        let _ = tx.send(head);
                        let body = serde_json::json!({"ok": false, "error": {
                            "code": "clock_skew", "message": "x", "time": answer(&sig)}})
                        .to_string();
                        let resp = format!(
                            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if sock.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), rx)
}

/// A header's value (the name in any case).
fn header(head: &str, name: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(": ")?;
            k.eq_ignore_ascii_case(name).then(|| v.to_string())
        })
        .unwrap_or_default()
}

fn upstream(urls: Vec<String>) -> Upstream {
    Upstream {
        url: urls[0].clone(),
        urls,
        gateway_id: "gateway:main".into(),
        ca_file: None,
        poll_wait_s: 1,
        enroll_token_file: None,
        enroll_token_delete: false,
        request_timeout_s: 5,
        retry_max_s: 60,
    }
}

/// RELIABILITY F2: the gateway's signed time comes back as `ClockSkew` once it
/// verifies under the pinned key and echoes the request; it is about this node, so
/// the next replica is not tried; and the next stamp is not one past the refused one.
#[tokio::test]
async fn a_verified_clock_skew_answer_is_clock_skew_without_failover() {
    use crate::envelope::sign_time_statement;
    const WEEK: u64 = 7 * 86_400_000;
    let real = 1_780_000_000_000;
    let gw = Keys::generate();
    let pk = gw.sign_pk();
    let (url, mut heads) =
        skew_server(move |sig| sign_time_statement(&gw, "gateway:main", "node:a", real, sig)).await;
    let (second, mut second_heads) = skew_server(|_| unreachable!()).await;
    let node = Arc::new(KeyRing::from(Keys::generate()));
    let t = Transport::new(
        &upstream(vec![url, second]),
        "node:a",
        node.clone(),
        Arc::new(move |id: &str| (id == "gateway:main").then_some(pk)),
    )
    .unwrap();
    let path = t.node_path("pull") + "?wait_s=0&max=50";
    let err = t
        .get::<serde_json::Value>(&path, real + WEEK, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SyncError::ClockSkew { gateway_ms, sent_ms } if gateway_ms == real && sent_ms == real + WEEK),
        "{err:?}"
    );
    assert!(heads.recv().await.is_some());
    assert!(second_heads.try_recv().is_err(), "failed over on a 4xx");
    // The corrected time goes out as it is, not one past the week-ahead stamp.
    let err = t
        .get::<serde_json::Value>(&path, real + 10, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, SyncError::ClockSkew { sent_ms, .. } if sent_ms == real + 10));
    let head = heads.recv().await.unwrap();
    assert_eq!(header(&head, "outpost-timestamp"), (real + 10).to_string());
}

/// A statement for another request, or by a key other than the one pinned for the
/// gateway, is a plain 401.
#[tokio::test]
async fn a_statement_that_does_not_verify_is_a_plain_401() {
    use crate::envelope::sign_time_statement;
    let real = 1_780_000_000_000;
    let gw = Keys::generate();
    let pk = gw.sign_pk();
    let stranger = Arc::new(Keys::generate());
    // Another request's echo; the right echo under a key that is not the pinned one.
    for (signer, echo) in [(Arc::new(gw), Some("b3RoZXI")), (stranger, None)] {
        let (url, _heads) = skew_server(move |sig| {
            sign_time_statement(&signer, "gateway:main", "node:a", real, echo.unwrap_or(sig))
        })
        .await;
        let t = Transport::new(
            &upstream(vec![url]),
            "node:a",
            Arc::new(KeyRing::from(Keys::generate())),
            Arc::new(move |_: &str| Some(pk)),
        )
        .unwrap();
        let err = t
            .get::<serde_json::Value>(&t.node_path("pull"), real, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, SyncError::Status { status: 401, code, .. } if code == "clock_skew"),
            "{err:?}"
        );
    }
}

/// A gateway's message is kept for `outpost status` (a retired node learns when and by
/// whom), without control characters (no forged log lines) and bounded.
#[test]
fn a_gateway_message_is_kept_printable_and_bounded() {
    let e = SyncError::Status {
        status: 401,
        code: "node_revoked".into(),
        message: kept("node:a was retired on 2026-12-02T10:00:00Z by local:alice\n\u{1b}[2J"),
    };
    assert_eq!(
        e.to_string(),
        "gateway answered 401 node_revoked: node:a was retired on 2026-12-02T10:00:00Z by local:alice[2J"
    );
    assert_eq!(kept(&"x".repeat(5_000)).len(), MAX_MESSAGE_CHARS);
    let bare = SyncError::Status {
        status: 503,
        code: String::new(),
        message: String::new(),
    };
    assert_eq!(bare.to_string(), "gateway answered 503 ");
}
