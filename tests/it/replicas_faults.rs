//! Replicas under faults (the `gateway_pg` binary only): `kill -9` of the replica a real
//! node is draining from, twenty times; PostgreSQL itself stopped and started mid-run.

use std::collections::BTreeSet;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{free_port, http, listen_on, pair, Daemon, Home};
use crate::pg::PgCluster;
use crate::replicas::{parse_frames, replicas};
use crate::sim::{command, SimNode};

async fn status_upstream(n: &Daemon) -> String {
    let Ok(r) = http().get(n.url("/v1/status")).send().await else {
        return String::new();
    };
    let st: Value = r.json().await.unwrap_or(Value::Null);
    st["upstream"]["url"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Read the node's inbox oldest first and acknowledge what was read: the payload
/// numbers in the order the node stored them.
async fn drain_inbox(n: &Daemon, token: &str, got: &mut Vec<i64>) {
    drain_inbox_up_to(n, token, got, 1000).await
}

/// Take and acknowledge at most `limit` messages of the node's inbox.
async fn drain_inbox_up_to(n: &Daemon, token: &str, got: &mut Vec<i64>, limit: usize) {
    let Ok(r) = http()
        .get(n.url(&format!("/v1/inbox?limit={limit}")))
        .bearer_auth(token)
        .send()
        .await
    else {
        return;
    };
    let v: Value = r.json().await.unwrap_or(Value::Null);
    for m in v["messages"].as_array().cloned().unwrap_or_default() {
        got.push(m["payload"]["i"].as_i64().unwrap());
        let id = m["message_id"].as_str().unwrap();
        let r = http()
            .post(n.url(&format!("/v1/inbox/{id}/ack")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
}

/// The node's inbox holds this many per sender, so the drain is paced by the test's
/// acknowledgements and the node's wait after a pull it could not store whole (2 s):
/// 1,500 commands take at least 9 such waits (18 s), longer than the twenty kills
/// 600 ms apart (12 s plus restarts), however fast the gateway is (without the cap the whole backlog arrived before the fifth
/// kill once the PostgreSQL path got fast).
const INBOX_CAP: usize = 150;

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_replica_a_node_drains_from_20_times_loses_and_repeats_nothing() {
    let Some(homes) = replicas(2) else { return };
    let ports = [free_port(), free_port()];
    for (h, p) in homes.iter().zip(ports) {
        listen_on(h, p);
    }
    let urls = format!(
        "[\"http://127.0.0.1:{}\", \"http://127.0.0.1:{}\"]",
        ports[0], ports[1]
    );
    let node = Home::init(
        "node",
        "node:k1",
        &format!(
            "[upstream]\nurls = {urls}\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n\
             [queue]\nmax_messages_per_recipient = {INBOX_CAP}\n"
        ),
    );
    pair(&homes[0], &node);
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:k1", &["admin"], "1h");
    let mut gws: Vec<Daemon> = homes.iter().map(Home::start).collect();

    // A dashboard on the events, moving to the other replica (with Last-Event-ID)
    // whenever its replica dies.
    let seen: Arc<Mutex<Vec<(u64, String, Value)>>> = Arc::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let watcher = {
        let (seen, stop, admin) = (seen.clone(), stop.clone(), admin.clone());
        let bases: Vec<String> = ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect();
        tokio::spawn(async move {
            let mut k = 0;
            while !stop.is_cancelled() {
                let last = seen.lock().unwrap().last().map(|(id, _, _)| *id);
                let mut r = http()
                    .get(format!("{}/v1/events", bases[k % 2]))
                    .bearer_auth(&admin);
                if let Some(id) = last {
                    r = r.header("Last-Event-ID", id.to_string());
                }
                k += 1;
                let Ok(mut resp) = r.send().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let mut buf = String::new();
                loop {
                    match tokio::time::timeout(Duration::from_millis(200), resp.chunk()).await {
                        Ok(Ok(Some(c))) => {
                            buf.push_str(&String::from_utf8_lossy(&c));
                            parse_frames(&mut buf, &mut seen.lock().unwrap());
                        }
                        // The replica went away: resume at the other one.
                        Ok(_) => break,
                        Err(_) if stop.is_cancelled() => return,
                        Err(_) => {}
                    }
                }
            }
        })
    };

    const N: usize = 1500;
    let mut ids = Vec::with_capacity(N);
    for i in 0..N {
        ids.push(command(&gws[i % 2], &admin, "node:k1", i, 3600).await);
    }
    let n = node.start();
    let mut got = Vec::new();
    let mut kills = 0;
    while kills < 20 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        // At most 50 a round while the replicas are killed: the node's inbox (capped at
        // INBOX_CAP) keeps the drain going through all 20 kills however fast the machine
        // is (20 × 50 < N), instead of racing it.
        drain_inbox_up_to(&n, &node_admin, &mut got, 50).await;
        let up = status_upstream(&n).await;
        let Some(k) = ports.iter().position(|p| up.ends_with(&format!(":{p}"))) else {
            continue;
        };
        gws[k].signal(libc::SIGKILL);
        let _ = gws[k].child.wait();
        gws[k] = homes[k].start();
        kills += 1;
    }
    let mid_drain = got.len();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while got.len() < N {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {N} delivered after the kills\n{}",
            got.len(),
            n.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        drain_inbox(&n, &node_admin, &mut got).await;
    }
    eprintln!(
        "{kills} kills; {mid_drain} of {N} were in the node's inbox when the last one happened"
    );
    assert!(mid_drain < N, "the drain finished before the kills did");
    assert_eq!(
        got,
        (0..N as i64).collect::<Vec<_>>(),
        "exactly once, in order"
    );

    // Every command reports delivered, and the dashboard saw each delivery once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let delivered: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, name, _)| name == "delivered")
            .map(|(_, _, d)| d["message_id"].as_str().unwrap().to_string())
            .collect();
        let unique: BTreeSet<&String> = delivered.iter().collect();
        assert_eq!(
            unique.len(),
            delivered.len(),
            "a delivered event seen twice"
        );
        if ids.iter().all(|id| unique.contains(id)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {N} delivered events seen",
            ids.iter().filter(|id| unique.contains(id)).count()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    let _ = watcher.await;
    let ev_ids: Vec<u64> = seen.lock().unwrap().iter().map(|(id, _, _)| *id).collect();
    assert!(
        ev_ids.windows(2).all(|w| w[0] < w[1]),
        "event ids repeat or go back"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_stopped_mid_run_answers_503_then_recovers_with_nothing_lost() {
    let Some(pg) = PgCluster::start_private() else {
        return;
    };
    let Some(homes) = replicas(2) else { return };
    let url = pg.create_database();
    for h in &homes {
        Home::use_database(h.dir.path(), &url);
    }
    let sim = SimNode::new(9);
    sim.enroll(&homes[0]);
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let gws: Vec<Daemon> = homes.iter().map(Home::start).collect();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(command(&gws[i % 2], &admin, &sim.id, i, 3600).await);
    }

    pg.stop_fast();
    let r = http()
        .post(gws[0].url("/v1/commands"))
        .bearer_auth(&admin)
        .json(
            &serde_json::json!({"target": {"node_id": sim.id}, "command_type": "note", "body": {}}),
        )
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("storage_unavailable")),
        "{v}"
    );
    let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=5", sim.id);
    let (st, v) = sim.signed(&gws[1], "GET", &pq, None).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("storage_unavailable")),
        "{v}"
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.start();
    // Both replicas reconnect by themselves.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut i = 20;
    for gw in &gws {
        loop {
            let r = http()
                .post(gw.url("/v1/commands"))
                .bearer_auth(&admin)
                .json(&serde_json::json!({"target": {"node_id": sim.id}, "command_type": "note", "body": {"i": i}}))
                .send()
                .await
                .unwrap();
            if r.status().as_u16() == 202 {
                let v: Value = r.json().await.unwrap();
                ids.push(v["message_id"].as_str().unwrap().to_string());
                i += 1;
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no recovery: {}",
                gw.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // A long-poll at one replica wakes for a command queued at the other: the
    // listener reconnected too.
    let held = sim.pull(&gws[1], 10, 100);
    let (all, _) = held.await;
    assert_eq!(
        all, ids,
        "everything acknowledged before and after, in order"
    );
    sim.ack(&gws[0], &all).await;
    let send = async {
        // Not `wait_polling`: the poll above leaves the node shown as polling for a while.
        tokio::time::sleep(Duration::from_millis(300)).await;
        command(&gws[0], &admin, &sim.id, 99, 3600).await
    };
    let started = std::time::Instant::now();
    let ((woke, _), id) = tokio::join!(sim.pull(&gws[1], 10, 100), send);
    assert_eq!(woke, [id]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the listener did not come back"
    );
}

/// Clients that go away mid-request cancel the gateway's work at any await, also
/// inside a database transaction. A connection going back to the pool inside an
/// abandoned transaction would run the next borrower's statements in it (never
/// committed, its locks held). tokio-postgres queues a ROLLBACK when a transaction (or
/// its BEGIN) is dropped; these two tests hold the gateway to that.
#[tokio::test(flavor = "multi_thread")]
async fn requests_abandoned_mid_transaction_leave_nothing_open_and_lose_nothing() {
    let Some(homes) = replicas(1) else { return };
    let url = homes[0].db.clone().unwrap();
    let n = SimNode::new(11);
    n.enroll(&homes[0]);
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let gw = homes[0].start();
    let pq = format!("/v1/nodes/{}/pull?wait_s=1&max=5", n.id);
    let abandon = async {
        for k in 0..600u64 {
            let h = n.sign("GET", &pq, b"");
            // Given up after 0.3 to 6 ms: somewhere in the pull's transactions.
            let within = Duration::from_micros(300 + (k * 7919) % 5700);
            let _ = n.send_within(&gw, "GET", &pq, &h, b"", within).await;
        }
    };
    let queue = async {
        let mut ids = Vec::new();
        for i in 0..60 {
            ids.push(command(&gw, &admin, &n.id, i, 3600).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ids
    };
    let ((), ids) = tokio::join!(abandon, queue);
    // The ROLLBACK of an abandoned transaction is queued on its connection and sent by
    // the connection's task: under a loaded machine that takes a moment. A connection
    // still inside a transaction after 10 s is one left there.
    let pg = PgCluster::shared().unwrap();
    let idle_in_tx = || {
        pg.psql(
            &url,
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = 'outpost-gateway' AND state LIKE 'idle in transaction%'",
        )
    };
    let since = tokio::time::Instant::now();
    let mut open = idle_in_tx();
    while open != "0" && since.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        open = idle_in_tx();
    }
    assert_eq!(open, "0", "connections left inside a transaction for 10 s");
    // Every command answered 202 is queued (the abandoned pulls acked nothing).
    let (got, pending) = n.pull(&gw, 0, 100).await;
    assert_eq!((got, pending), (ids, 60));
}

/// The same at the state itself, deterministically: a tool call's transaction (job
/// binding, request, command) cancelled after a growing delay on a one-connection
/// pool, each time followed by a plain enqueue on that same connection, which must be
/// committed (visible to another session) when it returns.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_cancelled_at_any_point_never_swallows_the_next_write() {
    use outpost::gateway::storage::postgres::Postgres;
    use outpost::gateway::storage::{ForNode, GatewayState, JobRecord, NewJob, Queued};
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let url = pg.create_database();
    let cfg = outpost::config::from_str(&format!(
        "[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n[store]\nengine = \"postgres\"\npostgres_url = \"{url}\"\npostgres_pool = 1\n"
    ))
    .unwrap();
    let state = Postgres::open(
        cfg.gateway_db.as_ref().unwrap(),
        &cfg.queue,
        outpost::clock::system(),
    )
    .await
    .unwrap();
    let now = outpost::clock::system().now_ms();
    let msg = |id: String| ForNode {
        node_id: "node:c1".into(),
        message_id: id,
        payload_type: "COMMAND".into(),
        priority: 0,
        created_at_ms: now,
        expires_at_ms: now + 3_600_000,
        envelope: b"{}".to_vec(),
        max_attempts: 0,
        event: None,
    };
    for k in 0..150u64 {
        let job = NewJob {
            key: format!("job-{k}"),
            record: JobRecord {
                message_id: format!("req-{k}"),
                tool_name: "echo".into(),
                args_sha256: "00".into(),
            },
        };
        let call = state.queue_command(msg(format!("req-{k}")), Some(job));
        let _ = tokio::time::timeout(Duration::from_micros(20 * k), call).await;
        let id = format!("plain-{k}");
        assert_eq!(
            state.forward(msg(id.clone())).await.unwrap(),
            Queued::Queued
        );
        let seen = pg.psql(
            &url,
            &format!("SELECT count(*) FROM messages WHERE message_id = '{id}'"),
        );
        assert_eq!(
            seen,
            "1",
            "after a cancel at {} µs the next write was not committed",
            20 * k
        );
    }
}

/// Issue 25, defect 1: PostgreSQL crashes (`pg_ctl stop -m immediate`) in the middle of
/// a stream of commands through two replicas, whose clients retry each command with its
/// idempotency key until one replica accepts it. A commit that landed but whose answer
/// was lost was answered 503 `storage_unavailable` ("nothing was written"), and the
/// retry queued the command a second time under another message id. Every key must
/// reach the node exactly once, under the one message id its client was given.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_crashing_mid_stream_delivers_every_idempotency_key_exactly_once() {
    use std::collections::BTreeMap;

    let Some(pg) = PgCluster::start_private() else {
        return;
    };
    let Some(homes) = replicas(2) else { return };
    let url = pg.create_database();
    for h in &homes {
        Home::use_database(h.dir.path(), &url);
    }
    let sim = SimNode::new(12);
    sim.enroll(&homes[0]);
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    let gws: Vec<Daemon> = homes.iter().map(Home::start).collect();
    let urls: Vec<String> = gws.iter().map(|g| g.url("/v1/commands")).collect();

    const CLIENTS: usize = 32;
    const KEYS_PER_CLIENT: usize = 250;
    let stop = tokio_util::sync::CancellationToken::new();
    let refusals: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (urls, admin, node, stop) =
                (urls.clone(), admin.clone(), sim.id.clone(), stop.clone());
            let refusals = refusals.clone();
            tokio::spawn(async move {
                let mut answered = Vec::new();
                let mut attempt = c;
                for k in 0..KEYS_PER_CLIENT {
                    if stop.is_cancelled() {
                        break;
                    }
                    let key = format!("c{c}-k{k}");
                    let give_up = tokio::time::Instant::now() + Duration::from_secs(90);
                    loop {
                        attempt += 1;
                        let sent = http()
                            .post(&urls[attempt % 2])
                            .bearer_auth(&admin)
                            .header("Idempotency-Key", &key)
                            .json(&serde_json::json!({"target": {"node_id": node},
                                "command_type": "note", "body": {"c": c, "k": k}, "ttl_s": 3600}))
                            .send()
                            .await;
                        let why = match sent {
                            Ok(r) if r.status().as_u16() == 202 => {
                                let v: Value = r.json().await.unwrap();
                                answered.push((key, v["message_id"].as_str().unwrap().to_string()));
                                break;
                            }
                            Ok(r) => {
                                let st = r.status().as_u16();
                                let v: Value = r.json().await.unwrap_or(Value::Null);
                                let code = v["error"]["code"].as_str().unwrap_or("?").to_string();
                                assert_eq!(st, 503, "{key}: {v}");
                                code
                            }
                            Err(_) => "connection".to_string(),
                        };
                        *refusals.lock().unwrap().entry(why).or_default() += 1;
                        assert!(
                            tokio::time::Instant::now() < give_up,
                            "{key} never accepted"
                        );
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                answered
            })
        })
        .collect();

    // Crash PostgreSQL four times while the stream runs.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        pg.crash();
        tokio::time::sleep(Duration::from_millis(500)).await;
        pg.start();
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.cancel();
    let mut answered = BTreeMap::new();
    for c in clients {
        for (key, id) in c.await.unwrap() {
            assert!(answered.insert(key, id).is_none());
        }
    }
    let ids: BTreeSet<&String> = answered.values().collect();
    assert_eq!(
        ids.len(),
        answered.len(),
        "two keys answered with one message id"
    );

    // What the node receives: each key's message, once, and nothing else.
    let mut received = Vec::new();
    loop {
        let (got, _) = sim.pull(&gws[0], 0, 1000).await;
        if got.is_empty() {
            break;
        }
        sim.ack(&gws[0], &got).await;
        received.extend(got);
    }
    let refusals = refusals.lock().unwrap().clone();
    let lost: usize = gws
        .iter()
        .map(|g| g.log_text().matches("enqueue_outcome_unknown").count())
        .sum();
    eprintln!(
        "{} keys accepted, {} messages delivered; refused on the way: {refusals:?}; \
         {lost} commits lost and settled by the replicas",
        answered.len(),
        received.len()
    );
    assert!(
        !refusals.is_empty(),
        "the crashes refused nothing: the test did not test"
    );
    let unique: BTreeSet<&String> = received.iter().collect();
    assert_eq!(unique.len(), received.len(), "a message delivered twice");
    let extra: Vec<&&String> = unique.difference(&ids).collect();
    let missing: Vec<&&String> = ids.difference(&unique).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{} messages no client was answered with (a command queued twice): {extra:?}\n\
         {} answered but not delivered: {missing:?}",
        extra.len(),
        missing.len()
    );
}
