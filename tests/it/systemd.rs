//! systemd integration with a real notify socket, and the SIGTERM drain.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{http, wait_for, Home};

#[test]
fn notify_socket_gets_ready_watchdog_and_stopping() {
    let home = Home::init("node", "node:a", "");
    let sock_path = home.dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // 1 s watchdog → we expect a ping about every 0.5 s.
    let d = home.start_with_env(&[
        ("NOTIFY_SOCKET", sock_path.to_str().unwrap()),
        ("WATCHDOG_USEC", "1000000"),
    ]);
    let mut seen: Vec<(Instant, String)> = Vec::new();
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3500) {
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).to_string();
            for line in msg.lines() {
                seen.push((Instant::now(), line.to_string()));
            }
        }
    }
    let ready_at = seen.iter().position(|(_, m)| m == "READY=1");
    assert!(
        ready_at.is_some(),
        "no READY=1 in {:?}",
        seen.iter().map(|x| &x.1).collect::<Vec<_>>()
    );
    // api.addr exists only after READY's preconditions (store recovery) held.
    let pings: Vec<Instant> = seen
        .iter()
        .filter(|(_, m)| m == "WATCHDOG=1")
        .map(|(t, _)| *t)
        .collect();
    assert!(
        (4..=9).contains(&pings.len()),
        "expected ~6 watchdog pings in 3.5 s at a 0.5 s interval, got {}",
        pings.len()
    );
    assert!(
        seen.iter().any(|(_, m)| m.starts_with("STATUS=")),
        "no STATUS= line"
    );

    d.signal(libc::SIGTERM);
    let got_stopping = wait_for("STOPPING=1", Duration::from_secs(10), || {
        match sock.recv(&mut buf) {
            Ok(n) => String::from_utf8_lossy(&buf[..n])
                .lines()
                .any(|l| l == "STOPPING=1")
                .then_some(true),
            Err(_) => None,
        }
    });
    assert!(got_stopping);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_200_calls_leaves_nothing_half_done() {
    let home = Home::init("node", "node:a", "");
    let mut d = home.start();
    let tok = home.token("node:a", &["tool:echo"], "10m");
    let client = http();
    let mut handles = Vec::new();
    for i in 0..200 {
        let c = client.clone();
        let url = d.url("/v1/tool_call");
        let tok = tok.clone();
        handles.push(tokio::spawn(async move {
            let r = c
                .post(url)
                .bearer_auth(tok)
                .json(&json!({"job_id": format!("drain-{i}"), "tool_name": "echo", "tool_args": {"i": i}}))
                .send()
                .await;
            match r {
                Ok(resp) => {
                    let st = resp.status().as_u16();
                    let v: Value = resp.json().await.unwrap_or(Value::Null);
                    (i, Some(st), v)
                }
                Err(_) => (i, None, Value::Null), // refused: connection closed before execution
            }
        }));
    }
    // Signal while calls are in flight.
    tokio::time::sleep(Duration::from_millis(30)).await;
    d.signal(libc::SIGTERM);
    let mut completed = Vec::new();
    for h in handles {
        let (i, st, v) = h.await.unwrap();
        match st {
            Some(200) => completed.push((i, v["evidence"]["audit_index"].as_u64().unwrap())),
            Some(503) => assert_eq!(v["error"]["code"], "not_ready"),
            None => {}
            Some(other) => panic!("call {i}: unexpected status {other} {v}"),
        }
    }
    let st = wait_for("exit", Duration::from_secs(30), || {
        d.child.try_wait().ok().flatten()
    });
    assert!(st.success(), "exit status {st}");

    // Every completed call is in the audit log at the index it was answered with, and
    // every tool_call entry in the log was answered (nothing ran that nobody saw).
    let out = home.cli(&["audit", "export", "--jsonl"]);
    assert!(out.status.success());
    let entries: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (i, idx) in &completed {
        let e = &entries[*idx as usize];
        assert_eq!(e["job_id"], format!("drain-{i}"));
        assert_eq!(e["outcome"], "ok");
    }
    let ok_calls = entries
        .iter()
        .filter(|e| e["event"] == "tool_call" && e["outcome"] == "ok")
        .count();
    assert_eq!(
        ok_calls,
        completed.len(),
        "audit has calls nobody got an answer for"
    );
    assert!(home.cli(&["audit", "verify"]).status.success());
}
