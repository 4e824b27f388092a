//! `outpost queue ls|show|requeue|purge --dead|export --jsonl`, `backup`, `doctor`.

use std::io::{IsTerminal, Write};
use std::path::Path;

use serde_json::json;

use super::common::{load_config, open_store};
use super::{ConfigArg, Exit, QueueCmd};
use crate::store::{Store, StoredMessage};

pub fn queue_cmd(arg: &ConfigArg, cmd: QueueCmd) -> anyhow::Result<()> {
    let cfg = load_config(arg)?;
    let store = open_store(&cfg)?;
    let res = match cmd {
        QueueCmd::Ls => ls(&store),
        QueueCmd::Show { id } => show(&store, &id),
        QueueCmd::Requeue { id } => store
            .requeue(&id)
            .wait()
            .map(|_| println!("requeued {id}"))
            .map_err(|e| Exit::failed(format!("requeue {id}: {e}")).into()),
        QueueCmd::Purge { dead: _ } => {
            let mut total = 0;
            loop {
                let n = store.purge_dead().wait()?;
                total += n;
                if n == 0 {
                    break;
                }
            }
            println!("purged {total} dead letter(s)");
            Ok(())
        }
        QueueCmd::Export { jsonl: _ } => export(&store),
    };
    store.close();
    res
}

fn ls(store: &Store) -> anyhow::Result<()> {
    let stats = store.queue_stats(store.now_ms())?;
    if stats.is_empty() {
        println!("all queues are empty");
    } else {
        println!(
            "{:<10} {:<32} {:>8} {:>12} {:>12}",
            "QUEUE", "PEER", "DEPTH", "OLDEST_S", "BYTES"
        );
        for s in stats {
            println!(
                "{:<10} {:<32} {:>8} {:>12} {:>12}",
                s.queue, s.peer, s.depth, s.oldest_age_s, s.bytes
            );
        }
    }
    let dead = store.dead_letters(None, 1000)?;
    if !dead.items.is_empty() {
        println!(
            "\n{} dead letter(s) (outpost queue show ID; requeue ID; purge --dead):",
            dead.items.len()
        );
        for m in dead.items {
            println!(
                "  {}  {} → {}  attempts {}",
                m.message_id, m.queue, m.peer, m.attempts
            );
        }
    }
    Ok(())
}

fn describe(m: &StoredMessage) -> serde_json::Value {
    json!({
        "message_id": m.message_id,
        "queue": m.queue,
        "peer": m.peer,
        "payload_type": m.payload_type,
        "priority": m.priority,
        "state": m.state.as_str(),
        "created_at_ms": m.created_at_ms,
        "expires_at_ms": m.expires_at_ms,
        "attempts": m.attempts,
        "max_attempts": m.max_attempts,
        "next_attempt_at_ms": m.next_attempt_at_ms,
        "body_bytes": m.body.len(),
    })
}

fn show(store: &Store, id: &str) -> anyhow::Result<()> {
    let Some(st) = store.status(id)? else {
        return Err(Exit::failed(format!("no message {id}")).into());
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "message_id": id,
            "state": st.state.as_str(),
            "queue": st.queue,
            "peer": st.peer,
            "attempts": st.attempts,
            "next_attempt_at_ms": st.next_attempt_at_ms,
            "reason": st.reason,
        }))?
    );
    Ok(())
}

/// Streams every queued and dead message as JSON Lines (metadata; bodies are sealed
/// envelopes or decrypted inbox records and stay on the device).
fn export(store: &Store) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let progress = std::io::stderr().is_terminal();
    let mut n = 0u64;
    let mut queues: Vec<String> = store
        .queue_stats(store.now_ms())?
        .into_iter()
        .map(|s| s.queue)
        .collect();
    queues.dedup();
    let mut sources: Vec<Option<String>> = queues.into_iter().map(Some).collect();
    sources.push(None); // dead letters
    for q in sources {
        let mut after: Option<String> = None;
        loop {
            let page = match &q {
                Some(q) => store.list(q, None, after.as_deref(), 500)?,
                None => store.dead_letters(after.as_deref(), 500)?,
            };
            for m in &page.items {
                serde_json::to_writer(&mut out, &describe(m))?;
                out.write_all(b"\n")?;
                n += 1;
            }
            if progress {
                eprint!("\rexported {n} messages");
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    out.flush()?;
    if progress {
        eprintln!();
    }
    Ok(())
}

pub fn backup(arg: &ConfigArg, path: &Path) -> anyhow::Result<()> {
    let cfg = load_config(arg)?;
    if path.exists() {
        return Err(Exit::failed(format!("{} exists; choose a new path", path.display())).into());
    }
    let store = open_store(&cfg)?;
    std::fs::create_dir_all(path)?;
    eprintln!("snapshotting the store into {} …", path.display());
    store.backup_to(&path.join("store"))?;
    // The key pair and identity, and what a key rotation leaves (daemon::rotation): the
    // retired signing keys `audit verify` needs for older checkpoints, the retired pair
    // still opening envelopes sealed to it during its grace, a prepared pair and its
    // statement not yet delivered. Private keys stay 0600.
    let files = [
        ("keys.json", 0o600),
        ("identity.json", 0o644),
        ("key-history.json", 0o644),
        ("keys.previous.json", 0o600),
        ("keys.next.json", 0o600),
        ("rotation.json", 0o644),
    ];
    let mut copied = Vec::new();
    for (f, mode) in files {
        let src = cfg.data_dir.join(f);
        if src.exists() {
            let bytes = std::fs::read(&src)?;
            crate::app::keyfile::write_atomic(&path.join(f), &bytes, mode)?;
            copied.push(f);
        }
    }
    store.close();
    println!(
        "backup written to {} (store snapshot, {})",
        path.display(),
        copied.join(", ")
    );
    Ok(())
}

pub fn doctor(arg: &ConfigArg) -> anyhow::Result<()> {
    let cfg = load_config(arg)?;
    super::common::check_identity_matches(&cfg)?;
    let store = open_store(&cfg)?;
    eprintln!("checking the store in {} …", cfg.data_dir.display());
    let report = store.doctor()?;
    print_report(&report);
    let mut problems = Vec::new();
    if !report.healthy() {
        problems.push("the store has damage (listed above)".to_string());
    }
    if !report.quarantined.is_empty() {
        problems.push(format!(
            "{} record(s) were quarantined (damaged, set aside, never delivered): keep the data dir for analysis",
            report.quarantined.len()
        ));
    }
    // Keys: present, private (the daemon refuses group/world-readable key files).
    match crate::envelope::Keys::load(&crate::app::keyfile::keys_path(&cfg.data_dir)) {
        Ok(_) => println!("keys: ok (0600)"),
        Err(e) => problems.push(format!("keys: {e}")),
    }
    // Disk: free space of the data dir's filesystem.
    if let Some((free, total)) = disk_free(&cfg.data_dir) {
        let pct = free as f64 * 100.0 / total.max(1) as f64;
        println!(
            "disk: {} MiB free of {} MiB ({pct:.0} %)",
            free >> 20,
            total >> 20
        );
        match disk_verdict(free, total) {
            DiskVerdict::Ok => {}
            DiskVerdict::LowShare => println!(
                "disk: note: under {LOW_SHARE_PCT} % of the filesystem is free (still {} MiB)",
                free >> 20
            ),
            DiskVerdict::Short => problems.push(format!(
                "disk: only {} MiB free (under {} MiB); writes will soon answer storage_full",
                free >> 20,
                MIN_FREE_BYTES >> 20
            )),
        }
    }
    // Clock: is the wall clock behind the store's persisted time floor?
    let wall = crate::clock::system().now_ms();
    let floor = store.now_ms();
    if wall + 1000 < floor {
        problems.push(format!(
            "clock: wall clock is {} s behind the store's time floor (no RTC / NTP not synced yet)",
            (floor - wall) / 1000
        ));
    } else {
        println!("clock: ok");
    }
    store.close();
    if problems.is_empty() {
        println!("doctor: all checks passed");
        Ok(())
    } else {
        for p in &problems {
            println!("PROBLEM: {p}");
        }
        Err(Exit::failed(format!("{} problem(s) found", problems.len())).into())
    }
}

fn print_report(r: &crate::store::DoctorReport) {
    println!("engine: {}", r.engine);
    let sections: [(&str, &Vec<String>); 5] = [
        ("integrity", &r.integrity),
        ("undecodable records", &r.undecodable),
        ("missing blobs", &r.missing_blobs),
        ("corrupt blobs", &r.corrupt_blobs),
        ("quarantined records", &r.quarantined),
    ];
    for (name, items) in sections {
        if items.is_empty() {
            println!("{name}: none");
        } else {
            println!("{name}: {}", items.len());
            for i in items {
                println!("  {i}");
            }
        }
    }
    println!("healthy: {}", r.healthy());
}

/// Below this much free space the store's next compaction, backup or burst of writes
/// can fail: a problem, whatever the size of the disk.
const MIN_FREE_BYTES: u64 = 64 << 20;
/// Under this share free the operator is told, but a large disk with gigabytes left
/// is not a problem (a 5 % rule alone failed doctor on a 252 GiB disk with 12 GiB free).
const LOW_SHARE_PCT: u64 = 5;

#[derive(Debug, PartialEq, Eq)]
enum DiskVerdict {
    Ok,
    LowShare,
    Short,
}

fn disk_verdict(free: u64, total: u64) -> DiskVerdict {
    if free < MIN_FREE_BYTES {
        DiskVerdict::Short
    } else if free.saturating_mul(100) < total.saturating_mul(LOW_SHARE_PCT) {
        DiskVerdict::LowShare
    } else {
        DiskVerdict::Ok
    }
}

fn disk_free(dir: &Path) -> Option<(u64, u64)> {
    crate::store::disk_usage(dir).map(|d| (d.available, d.total))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_big_disk_with_gigabytes_free_is_not_a_problem() {
        // The CI machine: 252 GiB, 12 GiB free (4.8 %).
        assert_eq!(disk_verdict(12 * GIB, 252 * GIB), DiskVerdict::LowShare);
        assert_eq!(disk_verdict(100 * GIB, 252 * GIB), DiskVerdict::Ok);
    }

    #[test]
    fn a_nearly_full_card_is_a_problem_whatever_its_size() {
        assert_eq!(disk_verdict(10 << 20, 8 * GIB), DiskVerdict::Short);
        assert_eq!(disk_verdict(63 << 20, 100 << 20), DiskVerdict::Short);
        assert_eq!(disk_verdict(0, 0), DiskVerdict::Short);
        assert_eq!(disk_verdict(MIN_FREE_BYTES, 8 * GIB), DiskVerdict::LowShare);
    }
}
