//! Power cuts under a running daemon (DECISIONS D9): `outpost run` runs with the
//! power-cut shim on its data directory and SIGKILLs itself right after a random write
//! while callers work it. Every write it had not fsynced is then rolled back, as a power
//! cut may leave the flash.
//!
//! The node, while four callers make tool calls; after each cut:
//!
//! - `outpost audit verify` passes;
//! - every call that was answered 200 has its audit entry at the index its evidence
//!   names;
//! - the next daemon answers a repeat of each such `job_id` with the same result
//!   without running the tool again (the tool's own record of its runs lives outside
//!   the data directory, so the cut does not touch it).
//!
//! The gateway, while four clients queue calls for a node and the node pulls and acks:
//! see [`queued_and_acked_gateway_messages_survive_power_cuts`].
//!
//! The upstream path, a node cut while its sync loop uploads what it queued for the
//! gateway: see [`outbox_messages_reach_the_gateway_once_across_node_power_cuts`].

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use serde_json::{json, Value};

use crate::harness::{http, pair, text, tool_script, wait_for, Daemon, Home};
use crate::powercut_shim::PowerCut;
use std::collections::BTreeSet;

const CUTS: usize = 20;
/// Each cut comes after a random number of writes below this, counted from when the
/// callers start (up to ~100 answered calls per run; the store's own power-cut test is
/// the one whose runs go past background checkpoints).
const WRITES: u32 = 2000;
/// Calls per caller before the test gives up waiting for the cut.
const MAX_CALLS: usize = 2000;

/// The shim; `None` (said on stderr) without a C compiler here.
fn shim_for(test: &str) -> Option<PowerCut> {
    PowerCut::build()
        .map_err(|why| crate::harness::skipped(test, &why))
        .ok()
}

/// Starts `home`'s daemon under the shim, to cut itself after a random one of its first
/// `writes` writes once `arm` exists. `None` (said on stderr) when the shim does not
/// load into it (an emulated target), which only the first run may find.
fn start_under_cut(
    cut: &PowerCut,
    home: &Home,
    writes: u32,
    arm: &std::path::Path,
    run: usize,
    test: &str,
) -> Option<Daemon> {
    let env = cut.env(
        &home.data(),
        rand::thread_rng().gen_range(1..writes),
        Some(arm),
    );
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let d = home.start_with_env(&env);
    if !cut.shim_ran() {
        assert_eq!(run, 0, "the shim stopped loading");
        crate::harness::skipped(
            test,
            "the LD_PRELOAD shim does not load into outpost (emulated target?)",
        );
        return None;
    }
    Some(d)
}

/// Waits for the daemon of run `run` to have SIGKILLed itself, as the shim does.
fn wait_for_cut(d: &mut Daemon, run: usize, who: &str) {
    use std::os::unix::process::ExitStatusExt;
    let status = wait_for("the cut", Duration::from_secs(10), || {
        d.child.try_wait().ok().flatten()
    });
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "run {run}: the {who} was not cut: {status:?}\n{}",
        d.log_text()
    );
}

/// `None` once the daemon is gone (the cut).
async fn call(d: &Daemon, job: &str, tok: &str) -> Option<(u16, Value)> {
    let resp = http()
        .post(d.url("/v1/tool_call"))
        .bearer_auth(tok)
        .json(&json!({"job_id": job, "tool_name": "stamp", "tool_args": {"job": job}}))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.ok()?;
    Some((status, v))
}

#[tokio::test(flavor = "multi_thread")]
async fn answered_tool_calls_and_their_audit_survive_power_cuts() {
    let Some(cut) = shim_for("node power-cut test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let runs_file = dir.path().join("runs");
    // The tool records each run (its arguments hold the job id) and answers with its
    // pid, so a repeat that ran the tool again would answer differently.
    let tool = tool_script(
        dir.path(),
        "stamp",
        &format!(
            "a=$(cat)\necho \"$a\" >> {}\necho \"{{\\\"pid\\\":$$}}\"",
            runs_file.display()
        ),
        "",
    );
    let home = Home::init("node", "node:pc", &tool);
    let tok = home.token("node:pc", &["tool:stamp"], "1h");
    let arm = dir.path().join("arm");
    let mut answered: BTreeMap<String, Value> = BTreeMap::new();
    // The previous run's answers, replayed by the next daemon (all of them at the end).
    let mut fresh: Vec<(String, Value)> = Vec::new();
    for run in 0..CUTS {
        // Writes are counted from when the callers start, not during startup.
        // Writes are counted from when the callers start, not during startup.
        let Some(mut d) = start_under_cut(&cut, &home, WRITES, &arm, run, "node power-cut test")
        else {
            return;
        };
        for (job, body) in &fresh {
            let got = call(&d, job, &tok).await;
            assert_eq!(
                got.as_ref(),
                Some(&(200, body.clone())),
                "run {run}: job {job} answered differently after a power cut"
            );
        }

        std::fs::write(&arm, b"").unwrap();
        let callers = (0..4).map(|t| {
            let (d, tok) = (&d, &tok);
            async move {
                let mut ok = Vec::new();
                for i in 0..MAX_CALLS {
                    let job = format!("r{run}-t{t}-{i}");
                    match call(d, &job, tok).await {
                        Some((200, v)) => ok.push((job, v)),
                        Some((st, v)) => panic!("run {run}: {job}: {st} {v}"),
                        None => break,
                    }
                }
                ok
            }
        });
        let results = futures_util::future::join_all(callers).await;
        std::fs::remove_file(&arm).unwrap();
        wait_for_cut(&mut d, run, "daemon");
        drop(d);
        let undone = cut.roll_back(run);
        assert!(undone > 0, "run {run}: a cut with nothing to roll back");
        fresh = results.into_iter().flatten().collect();
        answered.extend(fresh.iter().cloned());

        let verify = home.cli(&["audit", "verify"]);
        assert!(verify.status.success(), "run {run}: {}", text(&verify));
        let export = home.cli(&["audit", "export", "--jsonl"]);
        assert!(export.status.success(), "run {run}: {}", text(&export));
        let entries: Vec<Value> = String::from_utf8(export.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for (job, body) in &answered {
            let index = body["evidence"]["audit_index"].as_u64().unwrap() as usize;
            assert_eq!(
                entries.get(index).map(|e| &e["job_id"]),
                Some(&json!(job)),
                "run {run}: the audit entry of answered job {job} is gone"
            );
        }
    }
    // The last cut's answers are checked by one more daemon, without the shim.
    let d = home.start();
    for (job, body) in &answered {
        let got = call(&d, job, &tok).await;
        assert_eq!(got.as_ref(), Some(&(200, body.clone())), "job {job}");
    }
    assert!(d.stop().success());
    let runs = std::fs::read_to_string(&runs_file).unwrap();
    for job in answered.keys() {
        let n = runs
            .lines()
            .filter(|l| l.contains(&format!("\"{job}\"")))
            .count();
        assert_eq!(n, 1, "answered job {job} ran {n} times");
    }
    let (cuts, writes) = cut.totals();
    eprintln!(
        "node power cuts: {cuts} cuts, {writes} unsynced writes rolled back, {} answered calls kept",
        answered.len()
    );
    assert!(
        answered.len() >= CUTS,
        "too few calls answered to prove anything"
    );
}

/// The gateway's side: four clients queue tool calls for an offline node (202) while
/// the node pulls and acks, and the gateway is cut right after a random write. After
/// each cut every queued message the gateway answered 202 for is still known, and every
/// one whose ack was answered 200 is `delivered` and never handed out again.
#[tokio::test(flavor = "multi_thread")]
async fn queued_and_acked_gateway_messages_survive_power_cuts() {
    use crate::gateway::{start, NODE};

    let Some(cut) = shim_for("gateway power-cut test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let arm = dir.path().join("arm");
    // The fixture's own gateway runs without the shim; each run replaces it.
    let mut fx = start();
    let (mut queued, mut acked) = (BTreeSet::new(), BTreeSet::new());
    let pull = format!("/v1/nodes/{NODE}/pull?wait_s=0&max=20");
    let ack_path = format!("/v1/nodes/{NODE}/ack");
    for run in 0..CUTS {
        // The previous gateway (the fixture's, or the last run's checker) stops first:
        // one daemon per data directory.
        fx.gw.signal(libc::SIGTERM);
        wait_for("the gateway to stop", Duration::from_secs(10), || {
            (!fx.gw.is_running()).then_some(())
        });
        let Some(gw) = start_under_cut(&cut, &fx.home, WRITES, &arm, run, "gateway power-cut test")
        else {
            return;
        };
        fx.gw = gw;
        std::fs::write(&arm, b"").unwrap();
        let fx_ref = &fx;
        let clients = (0..4).map(|t| async move {
            let mut ok = Vec::new();
            for i in 0..MAX_CALLS {
                let body = json!({"target": {"node_id": NODE}, "tool_name": "echo",
                                  "tool_args": {"t": t, "i": i}, "wait_s": 0});
                match fx_ref.try_client("/v1/tool_call", Some(body)).await {
                    Some((202, v)) => ok.push(v["message_id"].as_str().unwrap().to_string()),
                    Some((st, v)) => panic!("run {run}: queueing: {st} {v}"),
                    None => break,
                }
            }
            ok
        });
        let node = async {
            let mut ok = Vec::new();
            for _ in 0..MAX_CALLS {
                let Some((st, v)) = fx_ref.try_signed("GET", &pull, None).await else {
                    break;
                };
                assert_eq!(st, 200, "run {run}: pull: {v}");
                let ids: Vec<String> = v["envelopes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e["message_id"].as_str().unwrap().to_string())
                    .collect();
                if ids.is_empty() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let body = json!({"message_ids": ids});
                match fx_ref.try_signed("POST", &ack_path, Some(&body)).await {
                    Some((200, _)) => ok.extend(ids),
                    Some((st, v)) => panic!("run {run}: ack: {st} {v}"),
                    None => break,
                }
            }
            ok
        };
        let (sent, got) = tokio::join!(futures_util::future::join_all(clients), node);
        std::fs::remove_file(&arm).unwrap();
        wait_for_cut(&mut fx.gw, run, "gateway");
        let undone = cut.roll_back(run);
        assert!(undone > 0, "run {run}: a cut with nothing to roll back");
        let sent: Vec<String> = sent.into_iter().flatten().collect();
        queued.extend(sent.iter().cloned());
        acked.extend(got);

        // A gateway without the shim checks what survived (this run's messages; all of
        // them after the last cut).
        let old = std::mem::replace(&mut fx.gw, fx.home.start());
        drop(old);
        check_gateway(&fx, run, &sent, &acked).await;
        // Nothing acked is handed out again.
        let (st, v) = fx
            .signed(
                "GET",
                &format!("/v1/nodes/{NODE}/pull?wait_s=0&max=500"),
                None,
                |_, _| {},
            )
            .await;
        assert_eq!(st, 200, "{v}");
        for e in v["envelopes"].as_array().unwrap() {
            let id = e["message_id"].as_str().unwrap();
            assert!(
                !acked.contains(id),
                "run {run}: acked {id} handed out again"
            );
        }
    }
    let all: Vec<String> = queued.iter().cloned().collect();
    check_gateway(&fx, CUTS, &all, &acked).await;
    let (cuts, writes) = cut.totals();
    eprintln!(
        "gateway power cuts: {cuts} cuts, {writes} unsynced writes rolled back, {} queued and {} acked kept",
        queued.len(),
        acked.len()
    );
    // Enough happened to prove something. (Acks may name messages whose 202 the cut
    // swallowed, so the two sets are not nested.)
    assert!(
        queued.len() >= CUTS && !acked.is_empty(),
        "{} queued, {} acked",
        queued.len(),
        acked.len()
    );
}

/// Every message in `ids` (each answered 202) is known; the acked ones are delivered.
async fn check_gateway(
    fx: &crate::gateway::Fixture,
    run: usize,
    ids: &[String],
    acked: &std::collections::BTreeSet<String>,
) {
    for id in ids {
        let (st, m) = fx.client(&format!("/v1/messages/{id}"), None).await;
        assert_eq!(st, 200, "run {run}: queued message {id} is gone: {m}");
        if acked.contains(id) {
            assert_eq!(m["state"], "delivered", "run {run}: acked {id}: {m}");
        }
    }
}

/// Writes before an upstream-test cut: fewer than [`WRITES`], since here each run's
/// messages also have to be uploaded.
const UPSTREAM_WRITES: u32 = 600;

/// A node answers 202 for messages to its gateway (`POST /v1/outbox`) while its sync
/// loop uploads them, and is cut 20 times; the gateway runs throughout, without the
/// shim. A cut can fall between the gateway's acceptance and the node's record of it,
/// or between the node's 202 and the upload. After the last cut a node without the shim
/// must deliver every message it ever answered 202 for: each ends `delivered` on the
/// node and is in the gateway's inbox once, with its payload.
#[tokio::test(flavor = "multi_thread")]
async fn outbox_messages_reach_the_gateway_once_across_node_power_cuts() {
    let Some(cut) = shim_for("upstream power-cut test") else {
        return;
    };
    let gw = Home::init("gateway", "gateway:main", "");
    let node = Home::init("node", "node:up", "");
    pair(&gw, &node);
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let tok = node.token("node:up", &["admin"], "1h");
    let g = gw.start();
    let dropin = node.dir.path().join("outpost.d");
    std::fs::create_dir_all(&dropin).unwrap();
    std::fs::write(
        dropin.join("10-upstream.toml"),
        format!(
            "[upstream]\nurl = \"http://{}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n",
            g.addr
        ),
    )
    .unwrap();

    let arm = node.dir.path().join("arm");
    let mut answered: BTreeMap<String, Value> = BTreeMap::new();
    for run in 0..CUTS {
        let Some(mut d) = start_under_cut(
            &cut,
            &node,
            UPSTREAM_WRITES,
            &arm,
            run,
            "upstream power-cut test",
        ) else {
            return;
        };
        std::fs::write(&arm, b"").unwrap();
        let callers = (0..4).map(|t| {
            let (d, tok) = (&d, &tok);
            async move {
                let mut ok = Vec::new();
                for i in 0..MAX_CALLS {
                    let payload = json!({"run": run, "t": t, "i": i});
                    let body =
                        json!({"to": "gateway:main", "payload_type": "DATA", "payload": payload});
                    let Ok(resp) = http()
                        .post(d.url("/v1/outbox"))
                        .bearer_auth(tok)
                        .json(&body)
                        .send()
                        .await
                    else {
                        break;
                    };
                    let st = resp.status().as_u16();
                    let Ok(v) = resp.json::<Value>().await else {
                        break;
                    };
                    assert_eq!(st, 202, "run {run}: outbox: {v}");
                    ok.push((v["message_id"].as_str().unwrap().to_string(), payload));
                }
                ok
            }
        });
        let results = futures_util::future::join_all(callers).await;
        std::fs::remove_file(&arm).unwrap();
        wait_for_cut(&mut d, run, "node");
        drop(d);
        assert!(
            cut.roll_back(run) > 0,
            "run {run}: a cut with nothing to roll back"
        );
        answered.extend(results.into_iter().flatten());
    }

    // A node without the shim delivers the rest.
    let d = node.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut pending: BTreeSet<String> = answered.keys().cloned().collect();
    while !pending.is_empty() {
        let mut still = BTreeSet::new();
        for id in &pending {
            let resp = http()
                .get(d.url(&format!("/v1/messages/{id}")))
                .bearer_auth(&tok)
                .send()
                .await
                .unwrap();
            let st = resp.status().as_u16();
            let v: Value = resp.json().await.unwrap();
            assert_eq!(st, 200, "answered message {id} is gone from the node: {v}");
            if v["state"] != "delivered" {
                assert_eq!(v["state"], "queued", "{id}: {v}");
                still.insert(id.clone());
            }
        }
        pending = still;
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} answered messages not delivered after 90 s: {:?}\nnode log:\n{}\ngateway log (end):\n{}",
            pending.len(),
            pending.iter().take(5).collect::<Vec<_>>(),
            d.log_text(),
            tail(&g.log_text(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The gateway's inbox, drained: each message once, as sent.
    let mut received: BTreeMap<String, Value> = BTreeMap::new();
    loop {
        let v: Value = http()
            .get(g.url("/v1/inbox?from=node:up"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let msgs = v["messages"].as_array().unwrap().clone();
        if msgs.is_empty() {
            break;
        }
        for m in msgs {
            let id = m["message_id"].as_str().unwrap().to_string();
            assert!(
                received.insert(id.clone(), m["payload"].clone()).is_none(),
                "{id} reached the gateway twice"
            );
            let resp = http()
                .post(g.url(&format!("/v1/inbox/{id}/ack")))
                .bearer_auth(&admin)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 200, "ack {id}");
        }
    }
    for (id, payload) in &answered {
        assert_eq!(
            received.get(id),
            Some(payload),
            "answered message {id} did not reach the gateway as sent"
        );
    }
    let (cuts, writes) = cut.totals();
    eprintln!(
        "upstream power cuts: {cuts} cuts, {writes} unsynced writes rolled back, {} answered, {} received",
        answered.len(),
        received.len()
    );
    assert!(answered.len() >= CUTS, "only {} answered", answered.len());
}

/// Issue 25 (2): commands pulled by a node that is cut while it stores them. Every
/// envelope the node stored has exactly one `envelope_accepted` entry. Before, a pulled
/// batch was stored in one commit and its entries appended in a second one: a cut
/// between the two left envelopes stored without entries (and the redelivery after
/// restart was a duplicate, which writes none), with `audit verify` content.
/// (Commands are queued while the node runs, so most are pulled one or a few at a
/// time: two small commits each on the old code, and a cut between them is likely.)
#[tokio::test(flavor = "multi_thread")]
async fn every_envelope_pulled_across_power_cuts_keeps_its_audit_entry() {
    const RUNS: usize = 10;
    const MAX_PER_RUN: usize = 3_000;
    let Some(cut) = shim_for("inbound power-cut test") else {
        return;
    };
    let gw = Home::init("gateway", "gateway:main", "");
    let node = Home::init("node", "node:in", "");
    pair(&gw, &node);
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let g = gw.start();
    let dropin = node.dir.path().join("outpost.d");
    std::fs::create_dir_all(&dropin).unwrap();
    std::fs::write(
        dropin.join("10-upstream.toml"),
        format!(
            "[upstream]\nurl = \"http://{}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n",
            g.addr
        ),
    )
    .unwrap();
    let arm = node.dir.path().join("arm");
    let mut queued: BTreeSet<String> = BTreeSet::new();
    let mut next = 0;
    for run in 0..RUNS {
        // The count starts once the daemon is up (the arm file); the commands are queued
        // after that, while the node long-polls, so its writes are the inbound path's.
        let Some(mut d) = start_under_cut(&cut, &node, 60, &arm, run, "inbound power-cut test")
        else {
            return;
        };
        std::fs::write(&arm, b"").unwrap();
        for _ in 0..MAX_PER_RUN {
            if !d.is_running() {
                break;
            }
            queued.insert(crate::sim::command(&g, &admin, "node:in", next, 3600).await);
            next += 1;
        }
        wait_for_cut(&mut d, run, "node");
        drop(d);
        std::fs::remove_file(&arm).unwrap();
        cut.roll_back(run);
    }

    // A node without the shim takes the rest.
    let d = node.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let v: Value = http()
            .get(g.url("/v1/nodes"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["nodes"][0]["queue_depth"] == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog did not drain: {v}\n{}",
            tail(&d.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(d.stop().success());
    let entries = crate::harness::envelope_accepted_counts(&node);
    let missing = queued
        .iter()
        .filter(|id| !entries.contains_key(*id))
        .count();
    let twice = entries.values().filter(|c| **c != 1).count();
    let (cuts, writes) = cut.totals();
    eprintln!("inbound power cuts: {cuts} cuts, {writes} unsynced writes rolled back");
    assert_eq!(
        (missing, twice),
        (0, 0),
        "of {} envelopes stored, {missing} have no envelope_accepted entry and {twice} more than one",
        queued.len()
    );
    assert_eq!(entries.len(), queued.len());
}

/// The last `n` lines of a log.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
