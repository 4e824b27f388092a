use super::*;

#[test]
fn the_node_table_is_aligned_and_says_when() {
    let v = json!({"nodes": [
        {"node_id": "node:pump-17", "liveness": "online", "polling": true,
         "last_seen": 95_000, "queue_depth": 0, "oldest_age_s": 0},
        {"node_id": "node:b", "liveness": "never_seen", "polling": false,
         "last_seen": null, "queue_depth": 3, "oldest_age_s": 40},
    ]});
    let t = nodes_table(&v, 100_000);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert!(lines[0].starts_with("NODE          LIVENESS"), "{t}");
    assert!(
        lines[1].contains("online") && lines[1].contains("5s ago"),
        "{t}"
    );
    assert!(
        lines[2].contains("never") && lines[2].contains("40s"),
        "{t}"
    );
    assert!(nodes_table(&json!({"nodes": []}), 0).contains("no nodes enrolled"));
}
