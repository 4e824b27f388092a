//! Power cuts under a running node (DECISIONS D9): the daemon runs with the power-cut
//! shim on its data directory and SIGKILLs itself right after a random write, while
//! four callers make tool calls. Every write it had not fsynced is then rolled back, as
//! a power cut may leave the flash. After each cut:
//!
//! - `outpost audit verify` passes;
//! - every call that was answered 200 has its audit entry at the index its evidence
//!   names;
//! - the next daemon answers a repeat of each such `job_id` with the same result
//!   without running the tool again (the tool's own record of its runs lives outside
//!   the data directory, so the cut does not touch it).

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use serde_json::{json, Value};

use crate::harness::{http, text, tool_script, wait_for, Daemon, Home};
use crate::powercut_shim::PowerCut;

const CUTS: usize = 20;
/// Calls per caller before the test gives up waiting for the cut.
const MAX_CALLS: usize = 400;

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
    let cut = match PowerCut::build() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED node power-cut test: {why}");
            return;
        }
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
    let mut rng = rand::thread_rng();
    for run in 0..CUTS {
        // Writes are counted from when the callers start, not during startup.
        let env = cut.env(&home.data(), rng.gen_range(1..300), Some(&arm));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut d = home.start_with_env(&env);
        if !cut.shim_ran() {
            assert_eq!(run, 0, "the shim stopped loading");
            eprintln!("SKIPPED node power-cut test: the LD_PRELOAD shim does not load into outpost (emulated target?)");
            return;
        }
        for (job, body) in &answered {
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
        let status = wait_for("the cut", Duration::from_secs(10), || {
            d.child.try_wait().ok().flatten()
        });
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                status.signal(),
                Some(libc::SIGKILL),
                "run {run}: the daemon was not cut: {status:?}\n{}",
                d.log_text()
            );
        }
        drop(d);
        let undone = cut.roll_back(run);
        assert!(undone > 0, "run {run}: a cut with nothing to roll back");
        answered.extend(results.into_iter().flatten());

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
