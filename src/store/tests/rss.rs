//! Restart with many queued messages must not load them into memory. The parent fills
//! a store with 30,000 × 1 KiB messages (~30 MiB of bodies); a fresh child process (this
//! test binary, filtered to [`rss_child`]) opens it — including the verify-on-open scan —
//! reads counts, a batch, stats, runs a sweep, and reports its peak RSS growth.

use std::process::Command;

use super::*;

const CHILD_ENV: &str = "OUTPOST_STORE_RSS_CHILD";
const ENGINE_ENV: &str = "OUTPOST_STORE_RSS_ENGINE";
const N: usize = 30_000;

/// `VmHWM` / `VmRSS` of this process in KiB.
pub fn proc_status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn rss_child() {
    let dir = match std::env::var(CHILD_ENV) {
        Ok(d) => d,
        Err(_) => return,
    };
    let kind = EngineKind::all()
        .into_iter()
        .find(|k| Some(k.name()) == std::env::var(ENGINE_ENV).ok().as_deref())
        .unwrap_or(EngineKind::Sqlite);
    let base = proc_status_kib("VmRSS:");
    let c = ManualClock::new(T0);
    let s = open(kind, Path::new(&dir), &c);
    assert_eq!(s.pending("outbox", "gw").unwrap(), N);
    assert_eq!(s.next_batch("outbox", "gw", 50, T0).unwrap().len(), 50);
    assert_eq!(s.queue_stats(T0).unwrap()[0].depth, N as u64);
    assert!(s.sweep_expired(T0).wait().unwrap().is_empty());
    println!("RSS base={base} hwm={}", proc_status_kib("VmHWM:"));
}

fn restart_with_many_queued_streams(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    {
        let o = StoreOptions {
            max_messages_per_recipient: N as u64,
            ..opts(kind)
        };
        let s = Store::open(d.path(), o, Arc::new(c.clone())).unwrap();
        let body = vec![9u8; 1024];
        for chunk in 0..N / 500 {
            let ops = (0..500)
                .map(|i| WriteOp::Enqueue(msg("gw", &format!("m{chunk}-{i}"), 0, &body)))
                .collect();
            s.write(ops).wait().unwrap();
        }
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::tests::rss::rss_child",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD_ENV, d.path())
        .env(ENGINE_ENV, kind.name())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {text}");
    let line = text.lines().find(|l| l.starts_with("RSS ")).unwrap();
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.split('=').nth(1))
        .map(|v| v.parse().unwrap())
        .collect();
    let growth_kib = nums[1].saturating_sub(nums[0]);
    eprintln!(
        "{}: peak RSS growth on reopen with {N} queued: {growth_kib} KiB",
        kind.name()
    );
    // ~30 MiB of bodies are queued; loading them would blow far past this.
    assert!(
        growth_kib < 16 * 1024,
        "reopen grew RSS by {growth_kib} KiB"
    );
}

#[test]
fn sqlite_restart_with_many_queued_streams() {
    restart_with_many_queued_streams(EngineKind::Sqlite);
}

/// Measured here: sled 0.34 grows RSS by ~27 MiB just opening a store with 30 MiB
/// queued (it rebuilds its page table from the log at recovery), ~64 MiB with the
/// verify-on-open scan, despite `cache_capacity` = 4 MiB. Kept runnable with
/// `--ignored` to re-measure; one more reason SQLite is the default (docs/DECISIONS.md).
#[cfg(feature = "sled")]
#[test]
#[ignore = "sled 0.34 loads the store into memory on open (+27..64 MiB for 30 MiB queued); see docs/DECISIONS.md"]
fn sled_restart_with_many_queued_streams() {
    restart_with_many_queued_streams(EngineKind::Sled);
}
