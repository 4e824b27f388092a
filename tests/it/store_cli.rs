//! The store through the CLI on a real data dir: send → queue ls/show/export, damage →
//! doctor reports it → the daemon still starts with the damage quarantined; backup.

use serde_json::Value;

use crate::harness::{http, text, Home};

#[tokio::test(flavor = "multi_thread")]
async fn damaged_record_is_reported_quarantined_and_the_daemon_still_starts() {
    let home = Home::init("node", "node:a", "");
    let peer = Home::init("node", "node:b", "");
    let doc = peer.identity_json();
    let o = home.cli_stdin(&["trust", "add", "-", "--send"], doc.as_bytes());
    assert!(o.status.success(), "{}", text(&o));
    let mut ids = Vec::new();
    for i in 0..3 {
        let o = home.cli_stdin(
            &["send", "--to", "node:b", "--type", "DATA", "--ttl", "1h"],
            format!("{{\"reading\":{i}}}").as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        ids.push(v["message_id"].as_str().unwrap().to_string());
    }
    let ls = home.cli(&["queue", "ls"]);
    assert!(
        String::from_utf8_lossy(&ls.stdout).contains("node:b"),
        "{}",
        text(&ls)
    );
    let show = home.cli(&["queue", "show", &ids[1]]);
    assert!(
        String::from_utf8_lossy(&show.stdout).contains("\"queued\""),
        "{}",
        text(&show)
    );
    let export = home.cli(&["queue", "export", "--jsonl"]);
    assert_eq!(
        String::from_utf8_lossy(&export.stdout).lines().count(),
        3,
        "{}",
        text(&export)
    );
    let doctor = home.cli(&["doctor"]);
    assert!(doctor.status.success(), "{}", text(&doctor));

    // A consistent snapshot while nothing is broken.
    let backup = home.dir.path().join("backup");
    let o = home.cli(&["backup", backup.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(backup.join("keys.json").exists());

    // Damage one queued message record (tree 2) in place.
    {
        let c = rusqlite::Connection::open(home.data().join("store/store.sqlite3")).unwrap();
        // Tree 2 (messages) lives in table t2 (store layout 2, see store/engine/sqlite/tables.rs).
        let n = c
            .execute(
                "UPDATE t2 SET v = x'01deadbeef00' WHERE rid = (SELECT min(rid) FROM t2)",
                [],
            )
            .unwrap();
        assert_eq!(n, 1);
    }
    let d = home.start();
    let r = http().get(d.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let st: Value = http()
        .get(d.url("/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let depth: u64 = st["queues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["peer"] == "node:b")
        .map(|q| q["depth"].as_u64().unwrap())
        .sum();
    assert_eq!(depth, 2, "the two intact messages stay queued: {st}");
    assert!(d.stop().success());
    let doc = home.cli(&["doctor"]);
    let out = String::from_utf8_lossy(&doc.stdout).to_string();
    assert!(
        !doc.status.success(),
        "doctor must report the damage:\n{}",
        text(&doc)
    );
    assert!(out.contains("quarantined records: 1"), "{out}");
}
