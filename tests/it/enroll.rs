//! Enrolling while the gateway runs (both engines): a fleet enrolled in one
//! `trust add` connects at once and every node is accepted on first contact; a node
//! enrolled again with new keys is accepted without a gateway restart.

use crate::harness::{text, Home};
use crate::sim::SimNode;

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_enrolled_in_one_write_is_accepted_at_once_and_new_keys_without_restart() {
    let home = Home::init("gateway", "gateway:main", "");
    let gw = home.start();
    let nodes: Vec<SimNode> = (0..60)
        .map(|i| SimNode::with_keys(&format!("node:e{i}"), 100 + i))
        .collect();
    // One write for the whole fleet: the documents one per line.
    let lines: String = nodes.iter().map(|n| n.identity_json() + "\n").collect();
    let o = home.cli_stdin(&["trust", "add", "-", "--send"], lines.as_bytes());
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 60);

    // All connect together, right after (before: most were refused while one request
    // reloaded the trust store and the others answered from the old copy).
    let pulls = nodes.iter().map(|n| {
        let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=1", n.id);
        let gw = &gw;
        async move { n.signed(gw, "GET", &pq, None).await }
    });
    let answers = futures_util::future::join_all(pulls).await;
    let refused: Vec<_> = answers.iter().filter(|(st, _)| *st != 200).collect();
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        refused.first()
    );

    // A node re-enrolled with new keys (a key rotation) is accepted with them at once.
    let rotated = SimNode::with_keys("node:e0", 250);
    let o = home.cli_stdin(
        &["trust", "add", "-", "--send"],
        rotated.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("updated node:e0"));
    let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=1", rotated.id);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let (st, v) = rotated.signed(&gw, "GET", &pq, None).await;
        if st == 200 {
            break;
        }
        // At most the trust store's reload interval (1 s) may pass.
        assert!(
            std::time::Instant::now() < deadline,
            "new keys refused: {st} {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // And the old keys no longer pass.
    let (st, _) = nodes[0].signed(&gw, "GET", &pq, None).await;
    assert_eq!(st, 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_enrolled_one_after_another_are_accepted_at_once_and_a_removed_one_refused() {
    let home = Home::init("gateway", "gateway:main", "");
    let gw = home.start();
    // Each enrolled and connecting at once, well within a second of the previous one's
    // first contact (before: a miss re-read the peers at most once a second, and a
    // database-backed gateway read a copy its NOTIFY had not refreshed yet).
    let nodes: Vec<SimNode> = (0..4)
        .map(|i| SimNode::with_keys(&format!("node:s{i}"), 40 + i))
        .collect();
    for n in &nodes {
        let o = home.cli_stdin(
            &["trust", "add", "-", "--send"],
            n.identity_json().as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o));
        let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=1", n.id);
        let (st, v) = n.signed(&gw, "GET", &pq, None).await;
        assert_eq!(st, 200, "{} refused on first contact: {v}", n.id);
    }

    // `trust rm` while the gateway runs: the node is refused within about a second
    // (before: a known peer never made the gateway re-read, so it was accepted until
    // a restart).
    let gone = &nodes[1];
    let o = home.cli(&["trust", "rm", &gone.id]);
    assert!(o.status.success(), "{}", text(&o));
    let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=1", gone.id);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (st, _) = gone.signed(&gw, "GET", &pq, None).await;
        if st == 401 {
            break;
        }
        assert_eq!(st, 200);
        assert!(
            std::time::Instant::now() < deadline,
            "a removed node is still accepted after 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // The others are untouched.
    let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=1", nodes[2].id);
    assert_eq!(nodes[2].signed(&gw, "GET", &pq, None).await.0, 200);
}
