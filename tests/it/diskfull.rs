//! A full disk at the node, for real: the data directory on a small tmpfs that the test
//! mounts, filled until tool calls get 507, then freed. Afterwards `audit verify`
//! passes and every call that was answered 200 keeps its audit entry at its evidence
//! index (the disk-full episode used to leave a checkpoint over an entry that was never
//! written, and verification failed for ever after).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{http, text, Home};

/// A tmpfs mounted over a directory for the test's lifetime.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a `size` tmpfs on `dir`, keeping what `dir` held; None (with the reason
    /// printed) where this machine does not let the test mount.
    fn over(dir: &Path, size: &str) -> Option<Tmpfs> {
        let keep = dir.with_extension("before-mount");
        std::fs::rename(dir, &keep).unwrap();
        std::fs::create_dir(dir).unwrap();
        let o = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output();
        match o {
            Ok(o) if o.status.success() => {}
            other => {
                crate::harness::skipped(
                    "disk-full tests",
                    &format!(
                        "cannot mount a tmpfs here ({}); they need root",
                        match other {
                            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                            Err(e) => e.to_string(),
                        }
                    ),
                );
                std::fs::remove_dir(dir).unwrap();
                std::fs::rename(&keep, dir).unwrap();
                return None;
            }
        }
        let cp = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", keep.display()))
            .arg(dir)
            .status()
            .unwrap();
        assert!(cp.success());
        Some(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes `path` until the filesystem refuses (ENOSPC).
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0xA5u8; 64 * 1024];
    while f.write_all(&block).and_then(|_| f.sync_data()).is_ok() {}
    // Whatever is left (less than a block) goes too.
    for _ in 0..64 {
        if f.write_all(&block[..1024])
            .and_then(|_| f.sync_data())
            .is_err()
        {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_never_breaks_the_audit_log() {
    let home = Home::init("node", "node:full", "[audit]\ncheckpoint_interval_s = 1\n");
    let Some(_mount) = Tmpfs::over(&home.data(), "8m") else {
        return;
    };
    let d = home.start();
    let tok = home.token("node:full", &["tool:echo"], "10m");
    let call = |job: String, pad: usize| {
        let url = d.url("/v1/tool_call");
        let tok = tok.clone();
        async move {
            let body = json!({"job_id": job, "tool_name": "echo",
                              "tool_args": {"pad": "x".repeat(pad)}});
            let r = http()
                .post(url)
                .bearer_auth(tok)
                .json(&body)
                .send()
                .await
                .unwrap();
            let st = r.status().as_u16();
            (st, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // job id → the audit index its 200 answer named.
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    let note = |job: &str, st: u16, v: &Value, acked: &mut BTreeMap<String, u64>| {
        assert!(st == 200 || st == 507, "{st} {v}");
        if st == 200 {
            acked.insert(
                job.to_string(),
                v["evidence"]["audit_index"].as_u64().unwrap(),
            );
        } else {
            assert_eq!(v["error"]["code"], "storage_full", "{v}");
        }
    };
    for i in 0..5 {
        let job = format!("before-{i}");
        let (st, v) = call(job.clone(), 10).await;
        assert_eq!(st, 200, "{v}");
        note(&job, st, &v, &mut acked);
    }

    let filler = home.data().join("filler");
    fill(&filler);
    let mut refused = 0;
    for i in 0..200 {
        let job = format!("full-{i}");
        let (st, v) = call(job.clone(), 32 * 1024).await;
        note(&job, st, &v, &mut acked);
        if st == 507 {
            refused += 1;
            if refused >= 5 {
                break;
            }
        }
    }
    assert!(
        refused >= 5,
        "the full disk never gave a 507: {}",
        d.log_text()
    );

    // Space comes back; a checkpoint interval (and a sweeper pass, at most 4 s apart)
    // passes before the next call. A plain wait, not a poll: on correct code nothing
    // observable happens here (the log did not grow, so no checkpoint is signed); the
    // old code signed one over the entry that was never written.
    std::fs::remove_file(&filler).unwrap();
    tokio::time::sleep(Duration::from_millis(5_000)).await;
    for i in 0..5 {
        let job = format!("after-{i}");
        let (st, v) = call(job.clone(), 10).await;
        assert_eq!(st, 200, "{v}");
        note(&job, st, &v, &mut acked);
    }
    // The daemon signs a last checkpoint on its way down, over everything it appended.
    let log = d.log_text();
    assert!(d.stop().success(), "{log}");
    // The journal shares the full disk: one line when appends start failing, one when
    // they work again (with the count), nothing per request.
    assert_eq!(log.matches("audit_append_failed").count(), 1, "{log}");
    assert_eq!(log.matches("audit_append_recovered").count(), 1, "{log}");

    let o = home.cli(&["audit", "verify"]);
    assert!(
        o.status.success(),
        "audit verify after the disk-full episode: {}",
        text(&o)
    );
    let o = home.cli(&["audit", "export", "--jsonl"]);
    assert!(o.status.success(), "{}", text(&o));
    let entries: Vec<Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (job, index) in &acked {
        let e = &entries[*index as usize];
        assert_eq!(e["job_id"], job.as_str(), "entry {index}: {e}");
    }
}

/// Issue 25 (2): commands synced into a node whose disk fills up mid-sync. Every
/// envelope the node stored has exactly one `envelope_accepted` entry: the envelopes
/// of a pulled batch and their entries are one commit. Before, they were two, and the
/// second one's failure was discarded: a batch stored and acknowledged just as the
/// disk filled kept no entry (2,999 entries for 3,000 envelopes, `audit verify` happy).
#[tokio::test(flavor = "multi_thread")]
async fn every_envelope_synced_into_a_filling_disk_has_its_audit_entry() {
    const COMMANDS: usize = 3_000;
    let (gw, node) = crate::harness::gateway_and_node("node:fill", 1);
    crate::harness::pair(&gw, &node);
    let Some(_mount) = Tmpfs::over(&node.data(), "12m") else {
        return;
    };
    let g = gw.start();
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let pad = "p".repeat(1_500);
    let mut queued = std::collections::BTreeSet::new();
    for i in 0..COMMANDS {
        let r = http()
            .post(g.url("/v1/commands"))
            .bearer_auth(&admin)
            .json(
                &json!({"target": {"node_id": "node:fill"}, "command_type": "note",
                          "body": {"i": i, "pad": pad}, "ttl_s": 3600}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202);
        let v: Value = r.json().await.unwrap();
        queued.insert(v["message_id"].as_str().unwrap().to_string());
    }
    // Leave the node room for part of the backlog only: the disk fills mid-sync.
    let room = node.data().join("room");
    std::fs::write(&room, vec![0u8; 3 << 20]).unwrap();
    let filler = node.data().join("filler");
    fill(&filler);
    std::fs::remove_file(&room).unwrap();
    let n = node.start();
    let depth = |v: &Value| -> u64 {
        v["nodes"]
            .as_array()
            .and_then(|ns| ns.iter().find(|x| x["node_id"] == "node:fill"))
            .and_then(|x| x["queue_depth"].as_u64())
            .unwrap_or(u64::MAX)
    };
    let nodes = || async {
        http()
            .get(g.url("/v1/nodes"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    // Until the sync stalls on the full disk (the depth stops moving for 3 s).
    let mut last = u64::MAX;
    let mut still = 0;
    while still < 30 {
        let d = depth(&nodes().await);
        assert!(d > 0, "the whole backlog fitted: make the room smaller");
        if d == last {
            still += 1;
        } else {
            still = 0;
            last = d;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_file(&filler).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while depth(&nodes().await) != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog did not drain once the disk had room: {}",
            n.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(n.stop().success());
    let entries = crate::harness::envelope_accepted_counts(&node);
    let missing: Vec<&String> = queued
        .iter()
        .filter(|id| !entries.contains_key(*id))
        .collect();
    let twice: Vec<(&String, &usize)> = entries.iter().filter(|(_, c)| **c != 1).collect();
    assert!(
        missing.is_empty() && twice.is_empty(),
        "{} of {COMMANDS} envelopes stored without an envelope_accepted entry ({missing:?}); \
         entries more than once: {twice:?}",
        missing.len()
    );
    assert_eq!(entries.len(), COMMANDS);
}
