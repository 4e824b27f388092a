use super::*;
use serde_json::json;

/// The typed status the CLI reads from a daemon's answer.
fn status(v: &Value) -> Status {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn the_summary_has_no_raw_json_and_an_aligned_table() {
    let v = json!({"node_id": "node:a", "role": "node", "version": "0.1.0", "uptime_s": 75, "store": "embedded",
        "upstream": {"state": "offline", "url": "http://gw:8787", "connected": false,
                     "last_ok_ms": null, "last_error": "connection refused"},
        "audit": {"size": 12, "synced_size": 3},
        "queues": [{"queue": "outbox", "peer": "gateway:a-rather-long-gateway-name-here",
                    "depth": 1234, "oldest_age_s": 5},
                   {"queue": "inbox", "peer": "node:b", "depth": 2, "oldest_age_s": 4000}],
        "clock": {"now_ms": 1, "wall_ms": 1, "behind_floor": false, "max_skew_s": 300}});
    let out = summary(&status(&v), 0);
    assert!(!out.contains('{'), "{out}");
    assert!(
        out.contains("upstream: offline via http://gw:8787, last error: connection refused"),
        "{out}"
    );
    let table: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "queues:")
        .skip(1)
        .collect();
    assert_eq!(table.len(), 3, "{out}");
    // Right-aligned columns end at the same place on every row.
    let ends = |l: &str, word: &str| l.find(word).map(|i| i + word.len());
    assert_eq!(ends(table[0], "DEPTH"), ends(table[1], "1234"), "{out}");
    assert_eq!(ends(table[0], "DEPTH"), ends(table[2], " 2"), "{out}");
    assert_eq!(table[1].find("gateway:"), table[0].find("PEER"), "{out}");
}

#[test]
fn a_pending_key_rotation_is_one_line_and_none_is_silent() {
    let mut v = json!({"node_id": "node:a", "role": "node", "version": "0.1.0", "uptime_s": 5, "store": "embedded",
        "upstream": {"state": "connected", "url": "http://gw:8787", "connected": true},
        "audit": {"size": 1, "synced_size": 1}, "queues": [],
        "key_rotation": {"state": "pending", "new_sign_pk": "NEWKEY"},
        "clock": {"now_ms": 1, "wall_ms": 1, "behind_floor": false, "max_skew_s": 300}});
    let out = summary(&status(&v), 0);
    assert!(
        out.contains("key rotation: to NEWKEY waits for the gateway"),
        "{out}"
    );
    v["key_rotation"] = json!({"state": "none"});
    assert!(!summary(&status(&v), 0).contains("key rotation"));
}
