//! The operator's day (issue 38), the CLI and node side: what an operator is told about
//! a retired node and a rejected device is true and leads somewhere, and an enrollment
//! token can be written where only its owner reads it.

use std::os::unix::fs::PermissionsExt;

use serde_json::Value;

use crate::harness::{http, text, Home};
use crate::self_enroll::{
    command_is_delivered, enrolling_node, enrollment_becomes, gateway, gw_url, make_token,
};

/// A retired node's status says it was retired (not "trust add it"); `trust add` of its
/// identity document is refused with the date and the way back, and lists nothing;
/// `command` and `call` for it say it was retired.
#[tokio::test(flavor = "multi_thread")]
async fn a_retired_node_is_told_the_truth_and_cannot_be_half_trusted_again() {
    let (gw, gwd) = gateway();
    let token = make_token(&gw, &["--max-uses", "2"]);
    let (n, _) = enrolling_node("node:old", &gw_url(&gwd), &token);
    let d = n.start();
    enrollment_becomes(&d, "enrolled").await;
    command_is_delivered(&gw, &gwd, "node:old").await;
    let o = gw.cli(&["nodes", "revoke", "node:old"]);
    assert!(o.status.success(), "{}", text(&o));

    // The device: refused as retired, and told so.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let hint = loop {
        let v: Value = http()
            .get(d.url("/v1/status"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["upstream"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("node_revoked"))
        {
            break v["upstream"]["hint"].as_str().unwrap_or("").to_string();
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(!hint.contains("trust add"), "{hint}");
    assert!(
        hint.contains("retired") && hint.contains("enrollment token"),
        "{hint}"
    );
    let o = n.cli(&["status"]);
    let s = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(s.contains("retired") && !s.contains("trust add"), "{s}");
    // When and by whom, as the gateway's record says (the gateway's answer carries it).
    assert!(
        s.contains("node:old was retired on 20") && s.contains(" by local:"),
        "{s}"
    );

    // The gateway: its document cannot be trusted again by hand.
    let doc = n.identity_json();
    let o = gw.cli_stdin(&["trust", "add", "-", "--send"], doc.as_bytes());
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("node:old was retired on 20") && err.contains("enrollment token"),
        "{err}"
    );
    // By whom: the local user who ran `nodes revoke` (kept on the record).
    assert!(err.contains(" by local:"), "{err}");
    let o = gw.cli(&["nodes"]);
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("node:old"),
        "{}",
        text(&o)
    );
    for args in [
        vec!["command", "node:old", "ping"],
        vec!["call", "node:old", "echo", "--wait", "1s"],
    ] {
        let o = gw.cli(&args);
        assert!(!o.status.success(), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(
            err.contains("was retired on 20") && !err.contains("trust add"),
            "{args:?}: {err}"
        );
    }
}

/// A device rejected by mistake is let in by approving it; its log says so instead of
/// advising a new token, and the decision is in the gateway's audit log.
#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_device_can_be_approved_after_all() {
    let (gw, gwd) = gateway();
    let manual = make_token(&gw, &["--max-uses", "2", "--approve", "manual"]);
    let (n, _) = enrolling_node("node:b", &gw_url(&gwd), &manual);
    let d = n.start();
    enrollment_becomes(&d, "pending").await;
    let o = gw.cli(&["nodes", "reject", "node:b"]);
    assert!(o.status.success(), "{}", text(&o));
    let e = enrollment_becomes(&d, "refused").await;
    assert_eq!(e["code"], "rejected", "{e}");
    let log = d.log_text();
    assert!(log.contains("outpost nodes approve"), "{log}");
    d.stop();

    let o = gw.cli(&["nodes", "approve", "node:b"]);
    assert!(o.status.success(), "{}", text(&o));
    // Its next retry (here: its next start) finds itself enrolled.
    let d = n.start();
    enrollment_becomes(&d, "enrolled").await;
    command_is_delivered(&gw, &gwd, "node:b").await;
    let o = gw.cli(&["audit", "export", "--jsonl"]);
    assert!(o.status.success(), "{}", text(&o));
    let events: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].to_string())
        .collect();
    assert_eq!(
        events,
        [
            "\"enroll_token_create\"",
            "\"enroll\"",
            "\"reject\"",
            "\"approve\""
        ],
        "{events:?}"
    );
}

/// `enroll-token create --out FILE` writes the token readable by its owner only, even
/// over a world-readable file, and prints nothing on stdout.
#[test]
fn an_enrollment_token_written_with_out_is_0600() {
    let gw = Home::init("gateway", "gateway:main", "");
    let file = gw.dir.path().join("enroll.token");
    std::fs::write(&file, "old").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let f = file.to_str().unwrap();
    let o = gw.cli(&["enroll-token", "create", "--max-uses", "3", "--out", f]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stdout.is_empty(), "{}", text(&o));
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(token.trim().len() > 40 && !token.contains("old"), "{token}");
    // The token in the file is one the gateway recorded.
    let o = gw.cli(&["enroll-token", "list", "--json"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
}

/// A gateway address that accepts connections and never answers: a blackholed link.
fn silent_gateway() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept() {
            held.push(s);
        }
    });
    addr
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A blackholed link is said as an unreachable gateway, since when, with the backoff's
/// next attempt; the backoff stops doubling at `upstream.retry_max_s`.
#[tokio::test(flavor = "multi_thread")]
async fn a_blackholed_gateway_is_unreachable_since_a_time_with_the_next_attempt() {
    let gw = silent_gateway();
    let n = Home::init(
        "node",
        "node:far",
        &format!(
            "[upstream]\nurl = \"http://{gw}\"\ngateway_id = \"gateway:main\"\n\
             request_timeout_s = 1\npoll_wait_s = 1\nretry_max_s = 5\n"
        ),
    );
    let d = n.start();
    let started = now_ms();
    let mut ahead = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let up = loop {
        let v: Value = http()
            .get(d.url("/v1/status"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let up = v["upstream"].clone();
        if let Some(next) = up["next_attempt_at_ms"].as_u64() {
            let wait = next.saturating_sub(now_ms());
            if !ahead.iter().any(|(n, _)| *n == next) {
                ahead.push((next, wait));
            }
        }
        if ahead.len() >= 3 {
            break up;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{up}\n{ahead:?}\n{}",
            d.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let since = up["failing_since_ms"].as_u64().expect("failing_since_ms");
    assert!(
        since >= started.saturating_sub(1_000) && since <= now_ms(),
        "{up}"
    );
    assert_eq!(up["reason"], "slow", "{up}");
    assert!(
        up["hint"]
            .as_str()
            .is_some_and(|h| h.contains("unreachable")),
        "{up}"
    );
    // 5 s, then 10 s without the cap: every wait is at most 5 s and its 10 % jitter.
    for (_, wait) in &ahead {
        assert!(*wait <= 5_600, "{ahead:?}");
    }
    let o = n.cli(&["status"]);
    let s = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        s.contains("gateway unreachable since 20") && s.contains("next attempt at 20"),
        "{s}"
    );
}
