//! Gateway replicas on one PostgreSQL database (the `gateway_pg` binary only): real
//! `outpost run` processes sharing a real database, synthetic nodes whose keys the
//! test holds (so each signed request can be sent to any replica, or replayed).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{copy_dir, http, Daemon, Home};
use crate::pg::PgCluster;
pub use crate::sim::{command, wait_polling, SimNode};

/// `n` gateway homes with one identity and one database; `None` (and a printed reason)
/// without PostgreSQL.
pub fn replicas(n: usize) -> Option<Vec<Home>> {
    PgCluster::shared()?;
    let first = Home::init("gateway", "gateway:main", "");
    let url = first.db.clone().expect("a gateway on PostgreSQL");
    let mut homes = vec![first];
    for _ in 1..n {
        let h = Home::init("gateway", "gateway:main", "");
        std::fs::remove_dir_all(h.data()).unwrap();
        copy_dir(&homes[0].data(), &h.data());
        Home::use_database(h.dir.path(), &url);
        homes.push(Home {
            db: Some(url.clone()),
            ..h
        });
    }
    Some(homes)
}

/// SSE frames as (id, event name, data) from a `/v1/events` response, until `done`.
pub async fn frames_until(
    resp: &mut reqwest::Response,
    buf: &mut String,
    out: &mut Vec<(u64, String, Value)>,
    within: Duration,
    done: impl Fn(&[(u64, String, Value)]) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while !done(out) {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => return false,
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        parse_frames(buf, out);
    }
    true
}

/// Move the complete frames at the start of `buf` to `out` (frames without an id, such
/// as the opening comment, are skipped).
pub fn parse_frames(buf: &mut String, out: &mut Vec<(u64, String, Value)>) {
    while let Some(end) = buf.find("\n\n") {
        let frame: String = buf.drain(..end + 2).collect();
        let (mut id, mut name, mut data) = (None, String::new(), Value::Null);
        for line in frame.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("event: ") {
                name = v.to_string();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = serde_json::from_str(v).unwrap_or(Value::Null);
            }
        }
        if let Some(id) = id {
            out.push((id, name, data));
        }
    }
}

pub async fn subscribe(gw: &Daemon, token: &str, last_id: Option<u64>) -> reqwest::Response {
    let mut r = http().get(gw.url("/v1/events")).bearer_auth(token);
    if let Some(id) = last_id {
        r = r.header("Last-Event-ID", id.to_string());
    }
    let resp = r.send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_share_queues_wakeups_events_replay_checks_and_sweeps() {
    let Some(homes) = replicas(3) else { return };
    let nodes: Vec<SimNode> = (0..3).map(SimNode::new).collect();
    for n in &nodes {
        n.enroll(&homes[0]);
    }
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let gws: Vec<Daemon> = homes.iter().map(Home::start).collect();
    let mut sse = subscribe(&gws[2], &admin, None).await;

    // Commands through every replica in turn; each node pulls through another one and
    // acks through a third, a few at a time: each node's order is the order queued.
    let mut queued: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..60 {
        let node = &nodes[i % 3].id;
        let id = command(&gws[i % 3], &admin, node, i, 3600).await;
        queued.entry(node.clone()).or_default().push(id);
    }
    for (k, n) in nodes.iter().enumerate() {
        let (puller, acker) = (&gws[(k + 1) % 3], &gws[(k + 2) % 3]);
        let mut got = Vec::new();
        loop {
            let (ids, pending) = n.pull(puller, 0, 7).await;
            assert_eq!(pending as usize, 20 - got.len(), "{}", n.id);
            if ids.is_empty() {
                break;
            }
            n.ack(acker, &ids).await;
            got.extend(ids);
        }
        assert_eq!(got, queued[&n.id], "{}: FIFO across replicas", n.id);
    }

    // A long-poll held at one replica wakes when another commits a command for it.
    let mut lags = Vec::new();
    for round in 0..5 {
        let (held_at, queue_at) = (&gws[round % 3], &gws[(round + 1) % 3]);
        let n = &nodes[0];
        let held = n.pull(held_at, 20, 10);
        let send = async {
            // Not `wait_polling`: the previous round's poll leaves the node shown as
            // polling for its wait + 3 s, so the condition would hold too early.
            tokio::time::sleep(Duration::from_millis(400)).await;
            let id = command(queue_at, &admin, &n.id, 1000 + round, 3600).await;
            (id, Instant::now())
        };
        let ((ids, _), (id, committed)) = tokio::join!(held, send);
        lags.push(committed.elapsed());
        assert_eq!(ids, std::slice::from_ref(&id));
        n.ack(queue_at, &ids).await;
    }
    lags.sort();
    eprintln!("long-poll wake-up after a commit at another replica: {lags:?}");
    assert!(
        lags[2] < Duration::from_millis(100),
        "median wake-up {:?} (all: {lags:?})",
        lags[2]
    );

    // A node long-polling at one replica shows as polling at another.
    let held = nodes[1].pull(&gws[0], 3, 10);
    let look = wait_polling(&gws[2], &admin, &nodes[1].id);
    let (_, r1) = tokio::join!(held, look);
    assert_eq!(
        (r1["polling"].as_bool(), r1["liveness"].as_str()),
        (Some(true), Some("online")),
        "{r1}"
    );

    // A signed request replayed to another replica is refused there.
    let n = &nodes[1];
    let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=1", n.id);
    let h = n.sign("GET", &pq, b"");
    let first = n.send(&gws[0], "GET", &pq, &h, b"").await.unwrap();
    assert_eq!(first.0, 200, "{}", first.1);
    let again = n.send(&gws[1], "GET", &pq, &h, b"").await.unwrap();
    assert_eq!(again.0, 401, "replayed to another replica: {}", again.1);

    // An expired message is swept, and reported, once across the three replicas.
    let short = command(&gws[0], &admin, &nodes[2].id, 2000, 1).await;
    let mut buf = String::new();
    let mut seen = Vec::new();
    let ok = frames_until(
        &mut sse,
        &mut buf,
        &mut seen,
        Duration::from_secs(15),
        |f| {
            f.iter()
                .any(|(_, name, d)| name == "expired" && d["message_id"] == short.as_str())
        },
    )
    .await;
    assert!(ok, "no expired event for {short}");
    // Give the other replicas' sweepers two more ticks to (wrongly) report it again.
    frames_until(
        &mut sse,
        &mut buf,
        &mut seen,
        Duration::from_secs(3),
        |_| false,
    )
    .await;
    let expired = seen
        .iter()
        .filter(|(_, name, d)| name == "expired" && d["message_id"] == short.as_str())
        .count();
    assert_eq!(expired, 1, "expired events for one message");
    let (_, m) = {
        let r = http()
            .get(gws[1].url(&format!("/v1/messages/{short}")))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    assert_eq!(m["state"], "expired", "{m}");

    // The stream saw every replica's events, each once, ids increasing; a subscriber
    // resuming at another replica from an id in the middle gets exactly the rest.
    let ids: Vec<u64> = seen.iter().map(|(id, _, _)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids not increasing");
    let queued_events: BTreeSet<String> = seen
        .iter()
        .filter(|(_, name, _)| name == "queued")
        .map(|(_, _, d)| d["message_id"].as_str().unwrap().to_string())
        .collect();
    for id in queued.values().flatten() {
        assert!(queued_events.contains(id), "no queued event for {id}");
    }
    // Each node came online once, although it spoke to every replica.
    for n in &nodes {
        let online = seen
            .iter()
            .filter(|(_, name, d)| name == "node_online" && d["node_id"] == n.id.as_str())
            .count();
        assert_eq!(online, 1, "node_online events for {}", n.id);
    }
    let mid = ids[ids.len() / 2];
    let want: Vec<u64> = ids.iter().copied().filter(|i| *i > mid).collect();
    let mut resumed = subscribe(&gws[1], &admin, Some(mid)).await;
    let (mut buf2, mut got) = (String::new(), Vec::new());
    let last = *ids.last().unwrap();
    frames_until(
        &mut resumed,
        &mut buf2,
        &mut got,
        Duration::from_secs(10),
        |f| f.iter().any(|(id, _, _)| *id >= last),
    )
    .await;
    let got_ids: Vec<u64> = got.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(got_ids, want, "resumed with Last-Event-ID {mid}");
}

/// Each replica caches a node's audit frontier; an extension accepted by another
/// replica must not leave it refusing the next upload as a gap.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_audit_log_syncs_through_alternating_replicas() {
    use ed25519_dalek::SigningKey;
    use outpost::audit::{
        leaf_hash, origin_for, sign_checkpoint, AuditEntry, AuditEvent, AuditOutcome, AuditRecord,
        Frontier,
    };
    let Some(homes) = replicas(2) else { return };
    let n = SimNode::new(7);
    n.enroll(&homes[0]);
    let gws: Vec<Daemon> = homes.iter().map(Home::start).collect();
    let all: Vec<Vec<u8>> = (0..12)
        .map(|i| {
            AuditEntry::from_record(
                i,
                1_000 + i,
                AuditRecord::new(AuditEvent::ToolCall, AuditOutcome::Ok),
            )
            .canonical_bytes()
        })
        .collect();
    let path = format!("/v1/nodes/{}/audit", n.id);
    for (round, upto) in [3usize, 6, 9, 12].into_iter().enumerate() {
        let gw = &gws[round % 2];
        let (st, v) = n.signed(gw, "GET", &path, None).await;
        assert_eq!(st, 200, "{v}");
        let from = v["size"].as_u64().unwrap() as usize;
        assert_eq!(from, upto - 3, "confirmed size at replica {}", round % 2);
        let mut fr = Frontier::new();
        for e in &all[..upto] {
            fr.push(leaf_hash(e));
        }
        let note = sign_checkpoint(
            &SigningKey::from_bytes(&[47; 32]),
            &origin_for(&n.id),
            fr.size(),
            &fr.root(),
        );
        let texts: Vec<String> = all[from..upto]
            .iter()
            .map(|b| String::from_utf8(b.clone()).unwrap())
            .collect();
        let (st, v) = n
            .signed(
                gw,
                "POST",
                &path,
                Some(&json!({"entries": texts, "checkpoint": note})),
            )
            .await;
        assert_eq!((st, v["size"].as_u64()), (200, Some(upto as u64)), "{v}");
    }
}

/// Wait (up to 10 s) until PostgreSQL holds `want` as `node`'s newest pull number: the
/// pull that took it has begun (its `begin_pull` committed) at whichever replica.
async fn pull_begun(pg: &PgCluster, url: &str, node: &str, want: u64) {
    let sql = format!("SELECT pull FROM node_pulls WHERE node_id = '{node}'");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = pg.psql(url, &sql);
        if got == want.to_string() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{node}'s newest pull is {got:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// D11, PROTOCOL §12.1: a node has one pull at a time across replicas. A long-poll held
/// at replica A (one the node gave up on) answers empty at once when the node pulls at
/// B; what is queued next, even through A, is handed out once, to B's pull.
#[tokio::test(flavor = "multi_thread")]
async fn a_newer_pull_at_another_replica_supersedes_the_one_held() {
    let Some(homes) = replicas(2) else { return };
    let pg = PgCluster::shared().expect("replicas run on PostgreSQL");
    let url = homes[0].db.clone().expect("a gateway on PostgreSQL");
    let n = SimNode::new(8);
    n.enroll(&homes[0]);
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let gws: Vec<Daemon> = homes.iter().map(Home::start).collect();

    let (a_tx, a_rx) = tokio::sync::oneshot::channel();
    // Held at A: an empty queue and the longest wait there is (60 s).
    let held_at_a = async {
        let got = n.pull(&gws[0], 60, 10).await;
        let _ = a_tx.send((got, Instant::now()));
    };
    let rest = async {
        pull_begun(pg, &url, &n.id, 1).await;
        let at_b = n.pull(&gws[1], 60, 11);
        let meanwhile = async {
            let sent = Instant::now();
            pull_begun(pg, &url, &n.id, 2).await;
            let ((ids, _), answered) = tokio::time::timeout(Duration::from_secs(20), a_rx)
                .await
                .expect("the pull held at A still held 20 s after a newer one began at B")
                .expect("A's pull answered");
            eprintln!(
                "the superseded pull answered within {:?} of the newer one",
                answered.saturating_duration_since(sent)
            );
            assert_eq!(ids, Vec::<String>::new(), "the superseded pull at A");
            // B's pull is still held (nothing was queued): queue through A.
            command(&gws[0], &admin, &n.id, 1, 3600).await
        };
        let ((got, pending), id) = tokio::join!(at_b, meanwhile);
        assert_eq!((got, pending), (vec![id.clone()], 1), "B's pull");
        id
    };
    let ((), id) = tokio::join!(held_at_a, rest);
    // Handed out once (by B's pull), not also by A's.
    let m: Value = http()
        .get(gws[0].url(&format!("/v1/messages/{id}")))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&m["state"], &m["attempts"]),
        (&json!("delivering"), &json!(1)),
        "{m}"
    );
}

/// The gateway's own key rotation across replicas (PROTOCOL §15.7): the new pair made
/// with `--prepare` and copied to one other replica, the rotation run on the first;
/// the replica with the copy follows and signs with the new key, every replica hands
/// the statement to nodes with their pulls, and a replica without the copy keeps the
/// retired key and says what to do.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_follow_a_gateway_key_rotation() {
    let Some(homes) = replicas(3) else { return };
    let sim = SimNode::new(7);
    sim.enroll(&homes[0]);
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let gws: Vec<Daemon> = homes.iter().map(Home::start).collect();

    let o = homes[0].cli(&["identity", "rotate", "--prepare"]);
    assert!(o.status.success(), "{}", crate::harness::text(&o));
    let new_pk = String::from_utf8(o.stdout).unwrap().trim().to_string();
    std::fs::copy(
        homes[0].data().join("keys.next.json"),
        homes[1].data().join("keys.next.json"),
    )
    .unwrap();
    let o = homes[0].cli(&["identity", "rotate", "--wait", "20"]);
    assert!(o.status.success(), "{}", crate::harness::text(&o));
    assert_eq!(String::from_utf8(o.stdout).unwrap().trim(), new_pk);

    // The replica with the copy follows within its database check.
    let doc_of = |h: &Home| -> Value {
        serde_json::from_str(&crate::harness::read_file(&h.data().join("identity.json"))).unwrap()
    };
    crate::harness::wait_for("replica 1 to follow", Duration::from_secs(30), || {
        (doc_of(&homes[1])["sign_pk"] == new_pk.as_str()).then_some(())
    });
    // The one without says so, and keeps the retired key.
    crate::harness::wait_for(
        "replica 2 to say it cannot follow",
        Duration::from_secs(30),
        || {
            gws[2]
                .log_text()
                .contains("gateway_rotation_not_followed")
                .then_some(())
        },
    );
    assert_ne!(doc_of(&homes[2])["sign_pk"], new_pk.as_str());

    // Every replica hands the statement to the node; what replica 1 queues now is
    // signed with the new key.
    let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=10", sim.id);
    for gw in &gws {
        let (st, v) = sim.signed(gw, "GET", &pq, None).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(
            v["gateway_rotation"]["new_doc"]["sign_pk"],
            new_pk.as_str(),
            "{v}"
        );
    }
    command(&gws[1], &admin, &sim.id, 1, 600).await;
    let (st, v) = sim.signed(&gws[1], "GET", &pq, None).await;
    assert_eq!(st, 200, "{v}");
    let new_doc: outpost::envelope::IdentityDocument =
        serde_json::from_value(v["gateway_rotation"]["new_doc"].clone()).unwrap();
    let mut only_new = outpost::envelope::TrustStore::new();
    only_new
        .add(
            new_doc,
            outpost::envelope::Rights {
                send: true,
                issue: false,
            },
        )
        .unwrap();
    let env =
        outpost::envelope::Envelope::from_json(v["envelopes"][0].to_string().as_bytes()).unwrap();
    let now = outpost::clock::system().now_ms();
    outpost::envelope::check_relay(&env, &only_new, now, 300_000, 86_400_000)
        .expect("signed with the new key");
}
