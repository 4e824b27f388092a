//! A real node and a real gateway moving batches: the sizes of what one request carries
//! stay within what the other side accepts, and a batch that cannot be stored whole
//! is stored in order up to what fits.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{free_port, http, listen_on, pair, Daemon, Home};

/// A gateway on a fixed port (so it can restart where the node expects it) and a node
/// paired with it.
fn pair_on(gw_extra: &str, node_extra: &str) -> (Home, Home) {
    let port = free_port();
    let gw = Home::init("gateway", "gateway:main", gw_extra);
    listen_on(&gw, port);
    let node = Home::init(
        "node",
        "node:b1",
        &format!(
            "[upstream]\nurl = \"http://127.0.0.1:{port}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n{node_extra}"
        ),
    );
    pair(&gw, &node);
    (gw, node)
}

/// `GET path` with a bearer token, as JSON (also used by `slow_link`).
pub(crate) async fn get_json(d: &Daemon, path: &str, token: &str) -> Value {
    http()
        .get(d.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn wait_until<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match f().await {
            Ok(()) => return,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not after {limit:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Requests the gateway answered so far (its `/metrics`, open on loopback).
async fn requests(g: &Daemon) -> u64 {
    let text = http()
        .get(g.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("outpost_http_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn outbox_depth(status: &Value) -> u64 {
    queue_depth(status, "outbox")
}

/// Messages in a node's `queue`, all peers, from its `/v1/status`.
pub(crate) fn queue_depth(status: &Value, queue: &str) -> u64 {
    status["queues"]
        .as_array()
        .map(|qs| {
            qs.iter()
                .filter(|q| q["queue"] == queue)
                .map(|q| q["depth"].as_u64().unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

/// Three ~0.9 MiB messages: each fits the gateway's 1 MiB message limit, together they
/// are more than its 2 MiB request-body limit. Before uploads were bounded in bytes the
/// node sent all three in one request, the gateway answered 413 every time, and the
/// messages went to the dead-letter queue after their attempts ran out.
#[tokio::test(flavor = "multi_thread")]
async fn large_outbox_messages_reach_the_gateway_in_uploads_under_its_body_limit() {
    let (gw, node) = pair_on("", "");
    let gw_admin = gw.token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:b1", &["admin"], "1h");
    // The node queues while the gateway is down, so all three wait for one push.
    let n = node.start();
    let big = "x".repeat(680_000);
    for i in 0..3 {
        let r = http()
            .post(n.url("/v1/outbox"))
            .bearer_auth(&node_admin)
            .json(&json!({"to": "gateway:main", "payload_type": "DATA", "payload": {"i": i, "blob": big}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
    }
    let g = gw.start();
    wait_until(
        "all three in the gateway inbox",
        Duration::from_secs(40),
        || async {
            let inbox = get_json(&g, "/v1/inbox", &gw_admin).await;
            let got = crate::sim::inbox_ints(&inbox);
            (got == vec![0, 1, 2])
                .then_some(())
                .ok_or(format!("{got:?}"))
        },
    )
    .await;
    let status = get_json(&n, "/v1/status", "").await;
    assert_eq!(outbox_depth(&status), 0, "{status}");
    assert!(
        !g.log_text().contains("payload_too_large"),
        "{}",
        g.log_text()
    );
}

/// A backlog arrives in batches opened on all cores, and the node's inbox lists it in
/// the order it was queued. (The inbox lists by the time a message was received; when
/// each opening worker stamped its own envelopes, one finishing a later envelope a
/// moment before another finished an earlier one listed them out of order.)
#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_opened_on_all_cores_is_listed_in_the_order_it_was_queued() {
    // The most one inbox page lists.
    const N: usize = 1_000;
    let (gw, node) = pair_on("", "");
    let gw_admin = gw.token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:b1", &["admin"], "1h");
    let g = gw.start();
    for i in 0..N {
        crate::sim::command(&g, &gw_admin, "node:b1", i, 3600).await;
    }
    let n = node.start();
    wait_until(
        "the whole backlog in the inbox",
        Duration::from_secs(60),
        || async {
            let inbox = get_json(&n, &format!("/v1/inbox?limit={N}"), &node_admin).await;
            let len = inbox["messages"].as_array().map_or(0, |m| m.len());
            (len == N)
                .then_some(())
                .ok_or(format!("{len} in the inbox"))
        },
    )
    .await;
    let inbox = get_json(&n, &format!("/v1/inbox?limit={N}"), &node_admin).await;
    let listed: Vec<i64> = inbox["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["payload"]["i"].as_i64().unwrap())
        .collect();
    let out_of_order = listed.windows(2).filter(|w| w[0] > w[1]).count();
    assert_eq!(out_of_order, 0, "{out_of_order} inversions");
    assert_eq!(listed, (0..N as i64).collect::<Vec<_>>());
}

/// 30 commands wait at the gateway for a node whose inbox takes 10 per sender: the
/// node stores the first 10 (a batch of 30 cannot be stored whole, so it is stored
/// one by one until the cap), leaves the rest queued upstream, and takes them in order
/// as its inbox is acknowledged.
#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_beyond_the_inbox_cap_arrives_in_order_as_room_frees() {
    let (gw, node) = pair_on("", "[queue]\nmax_messages_per_recipient = 10\n");
    let gw_admin = gw.token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:b1", &["admin"], "1h");
    let g = gw.start();
    for i in 0..30 {
        crate::sim::command(&g, &gw_admin, "node:b1", i, 3600).await;
    }
    let n = node.start();
    let mut seen = Vec::new();
    for round in 0..3 {
        wait_until(
            &format!("round {round}"),
            Duration::from_secs(30),
            || async {
                let inbox = get_json(&n, "/v1/inbox", &node_admin).await;
                let len = inbox["messages"].as_array().map_or(0, |m| m.len());
                (len == 10)
                    .then_some(())
                    .ok_or(format!("{len} in the inbox"))
            },
        )
        .await;
        if round == 0 {
            // Full inbox, 20 still upstream: the node waits between pulls instead of
            // pulling the same envelopes again and again (before: about 7 a second).
            let before = requests(&g).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let during = requests(&g).await - before;
            assert!(
                during <= 6,
                "{during} gateway requests in 3 s while the node's inbox was full"
            );
        }
        let inbox = get_json(&n, "/v1/inbox", &node_admin).await;
        let page = inbox["messages"].as_array().cloned().unwrap_or_default();
        for m in &page {
            seen.push(m["payload"]["i"].as_i64().unwrap());
            let id = m["message_id"].as_str().unwrap();
            let r = http()
                .post(n.url(&format!("/v1/inbox/{id}/ack")))
                .bearer_auth(&node_admin)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
        }
    }
    assert_eq!(seen, (0..30).collect::<Vec<_>>());
    // The node acks upstream right after storing: the last round may still be on its
    // way.
    wait_until(
        "the gateway's queue empty",
        Duration::from_secs(10),
        || async {
            let nodes = get_json(&g, "/v1/nodes", &gw_admin).await;
            (nodes["nodes"][0]["queue_depth"] == 0)
                .then_some(())
                .ok_or(nodes.to_string())
        },
    )
    .await;
}

/// libfaketime (Debian's `faketime`, installed by `scripts/setup-ci.sh`); `None` (the
/// test skips, saying so) where it is missing, unless `OUTPOST_TEST_FAKETIME_REQUIRE` is
/// set, as `.ci/run` does: there a missing library fails the test instead of hiding it.
pub(crate) fn faketime_lib() -> Option<String> {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
        .map(|p| p.to_string_lossy().into_owned());
    if found.is_none() {
        assert!(
            std::env::var_os("OUTPOST_TEST_FAKETIME_REQUIRE").is_none(),
            "libfaketime missing but OUTPOST_TEST_FAKETIME_REQUIRE is set"
        );
        crate::harness::skipped(
            "clock-jump tests",
            "libfaketime missing (apt-get install faketime)",
        );
    }
    found
}

/// RELIABILITY F6: a node that boots with its clock in 1970 resumes from its time floor
/// and runs behind real time by its downtime; a command its gateway queued with a short
/// TTL was then listed in the node's inbox after it had expired. The gateway's clock
/// stands for real time here and runs 60 s ahead of the node's floor (libfaketime
/// `+60` on the gateway: the same as 60 s without power, without waiting them out).
/// The node now takes the `created_at` of its gateway's signed envelopes as a lower
/// bound of real time while its own clock is behind its floor.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_boot_in_1970_the_node_takes_real_time_from_its_gateway() {
    let Some(lib) = faketime_lib() else {
        return;
    };
    let (gw, node) = pair_on("", "");
    let gw_admin = gw.token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:b1", &["admin"], "1h");
    let g = gw.start_with_env(&[
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME", "+60"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]);
    // A first run with the right clock leaves the store's time floor at about now.
    let n = node.start();
    wait_until("the node synced once", Duration::from_secs(20), || async {
        let st = get_json(&n, "/v1/status", "").await;
        (st["upstream"]["connected"] == true)
            .then_some(())
            .ok_or(format!("{}", st["upstream"]))
    })
    .await;
    n.stop();

    // The node comes back with its clock in 1970; a command with a 6 s TTL waits for it.
    let queued = std::time::Instant::now();
    crate::sim::command(&g, &gw_admin, "node:b1", 7, 6).await;
    let n = node.start_with_env(&[
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME", "@1970-01-02 00:00:00"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]);
    wait_until(
        "the command in the node's inbox",
        Duration::from_secs(5),
        || async {
            let inbox = get_json(&n, "/v1/inbox", &node_admin).await;
            let len = inbox["messages"].as_array().map_or(0, |m| m.len());
            (len == 1).then_some(()).ok_or(format!("{inbox}"))
        },
    )
    .await;
    let seen = queued.elapsed();
    // By the time it took to arrive plus its TTL plus a second, it has expired by any
    // clock that is behind real time by no more than that arrival time.
    tokio::time::sleep((seen + Duration::from_secs(7)).saturating_sub(queued.elapsed())).await;
    let inbox = get_json(&n, "/v1/inbox", &node_admin).await;
    assert_eq!(
        inbox["messages"].as_array().map(Vec::len),
        Some(0),
        "listed {:?} after it was queued with a 6 s TTL: the node's time is behind real \
         time by its downtime\n{inbox}\n{}",
        queued.elapsed(),
        n.log_text()
    );
    assert!(
        n.log_text().contains("time_moved_forward"),
        "{}",
        n.log_text()
    );
}

/// RELIABILITY F2: a node whose clock jumped a week ahead and was then set right stayed
/// a week ahead (its time floor never goes back), so its gateway refused every signed
/// request (`Outpost-Timestamp` outside the skew) and nothing flowed either way until
/// real time caught up. The gateway now answers such a request, once its signature
/// verifies, with `clock_skew` and its signed time; the node lowers its time to it when
/// its own clock agrees, and syncs at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_clock_went_a_week_ahead_and_back_talks_to_its_gateway_again() {
    let Some(lib) = faketime_lib() else {
        return;
    };
    let (gw, node) = pair_on("", "");
    let gw_admin = gw.token("gateway:main", &["admin"], "1h");
    let node_admin = node.token("node:b1", &["admin"], "1h");
    let g = gw.start();
    // libfaketime reads the offset file again on every clock reading (no cache), so
    // rewriting it steps the node's clock the way a bad NTP answer and its fix would.
    let offset = node.dir.path().join("faketime.rc");
    let set_clock = |spec: &str| {
        let tmp = offset.with_extension("tmp");
        std::fs::write(&tmp, format!("{spec}\n")).unwrap();
        std::fs::rename(&tmp, &offset).unwrap();
    };
    set_clock("+0");
    let n = node.start_with_env(&[
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME_TIMESTAMP_FILE", offset.to_str().unwrap()),
        ("FAKETIME_NO_CACHE", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]);
    let inbox_ids = || async {
        let inbox = get_json(&n, "/v1/inbox", &node_admin).await;
        let got = crate::sim::inbox_ints(&inbox);
        (got, inbox)
    };
    crate::sim::command(&g, &gw_admin, "node:b1", 0, 3600).await;
    wait_until(
        "the first command in the node's inbox",
        Duration::from_secs(20),
        || async {
            let (got, inbox) = inbox_ids().await;
            (got == vec![0]).then_some(()).ok_or(format!("{inbox}"))
        },
    )
    .await;
    // A bad NTP answer: a week ahead. The gateway refuses the node's requests and says
    // its time; the node's clock does not agree with it yet, so its time stays.
    set_clock("+7d");
    wait_until(
        "the node refused to take the gateway's time while its clock is ahead",
        Duration::from_secs(20),
        || async {
            // (A node without the fix says nothing; its second refused request shows it
            // kept its time.)
            let kept = n.log_text().contains("time_not_corrected")
                || g.log_text().matches("node_request_refused").count() >= 2;
            kept.then_some(()).ok_or(n.log_text())
        },
    )
    .await;
    // Meanwhile the node refuses what it would seal with a time the gateway refuses: a
    // 503 now, not a 202 for a message the gateway answers `not_yet_valid` later (the
    // short clock-fwd chaos run lost 90 such messages before this).
    wait_until(
        "the node kept the gateway's time it could not take",
        Duration::from_secs(20),
        || async {
            n.log_text()
                .contains("time_not_corrected")
                .then_some(())
                .ok_or(n.log_text())
        },
    )
    .await;
    // (A month-long token: the hour-long one has expired by the node's clock.)
    let long_admin = node.token("node:b1", &["admin"], "30d");
    let r = http()
        .post(n.url("/v1/outbox"))
        .bearer_auth(&long_admin)
        .json(&json!({"to": "gateway:main", "payload_type": "DATA", "payload": {"up": 0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503, "outbox while a week ahead");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "not_ready", "{v}");
    // NTP sets the clock right; two commands wait at the gateway, one for an hour, one
    // for a week. Both were created after everything the node had remembered, so
    // neither can be one whose id it forgot while it was ahead (PROTOCOL §6).
    set_clock("+0");
    crate::sim::command(&g, &gw_admin, "node:b1", 1, 3600).await;
    crate::sim::command(&g, &gw_admin, "node:b1", 2, 7 * 86_400).await;
    // Noticed within a second or so, not at the next attempt of the backoff schedule.
    wait_until(
        "both commands in the node's inbox",
        Duration::from_secs(5),
        || async {
            let (got, inbox) = inbox_ids().await;
            // The first, an hour long, may have been swept as expired while the node
            // was a week ahead (by design: a clock ahead expires things early).
            got.ends_with(&[1, 2]).then_some(()).ok_or(format!(
                "{inbox}\n{}",
                get_json(&n, "/v1/status", "").await["upstream"]
            ))
        },
    )
    .await;
    // And the other way: a message the node queues now reaches the gateway.
    let r = http()
        .post(n.url("/v1/outbox"))
        .bearer_auth(&node_admin)
        .json(&json!({"to": "gateway:main", "payload_type": "DATA", "payload": {"up": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
    wait_until(
        "the node's message in the gateway inbox",
        Duration::from_secs(30),
        || async {
            let inbox = get_json(&g, "/v1/inbox", &gw_admin).await;
            let got = inbox["messages"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m["payload"]["up"] == 1));
            got.then_some(()).ok_or(format!("{inbox}"))
        },
    )
    .await;
    assert!(n.log_text().contains("time_moved_back"), "{}", n.log_text());
}
