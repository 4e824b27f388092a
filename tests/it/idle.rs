//! An idle pair writes nothing: a real gateway and a real node, connected and
//! long-polling with nothing to do, leave their disks alone (OPERATIONS "Idle writes":
//! at most 4 KiB a minute and one fsync a minute each; BENCHMARKS "Idle writes" has the
//! 10-minute measurement). Field devices run on SD cards for years.
//!
//! Two measures, both per process:
//! - the bytes it sent to the block layer (`write_bytes` in `/proc/PID/io`), when the
//!   test directory is on a disk (on tmpfs nothing reaches a block device and the
//!   counter stays 0 whatever is written, so there this measure is skipped, said so);
//! - whether its store files changed at all (size or mtime of every file under
//!   `data/store`): the store fsyncs only after a commit, and every commit writes its
//!   WAL, so unchanged files mean no commit and no fsync. This one works on any
//!   filesystem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::harness::{http, pair, Daemon, Home};

/// The measured window. The budget is per minute averaged over 10; over this window an
/// idle pair must commit nothing at all (the one periodic commit left, the time floor,
/// comes 10 minutes after the last commit, and both stores committed at start).
const WINDOW: Duration = Duration::from_secs(30);
/// One page: a stray write of anything (a log line) stays within it; one store commit
/// (a WAL frame is a page plus its header) does not.
const MAX_WRITE_BYTES: u64 = 4096;

fn write_bytes(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Whether writes under `dir` reach a block device (not tmpfs/ramfs).
fn on_a_disk(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    // SAFETY: statfs(2) writes only the struct we pass.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return false;
    }
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let t = s.f_type as i64;
    t != TMPFS_MAGIC && t != RAMFS_MAGIC
}

/// Size and mtime of every file under `dir`.
fn files(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), (m.len(), m.modified().unwrap()));
            }
        }
    }
    out
}

struct Watched<'a> {
    name: &'static str,
    daemon: &'a Daemon,
    store: PathBuf,
    bytes: u64,
    files: BTreeMap<PathBuf, (u64, SystemTime)>,
}

impl<'a> Watched<'a> {
    fn start(name: &'static str, home: &Home, daemon: &'a Daemon) -> Self {
        let store = home.data().join("store");
        Watched {
            name,
            daemon,
            bytes: write_bytes(daemon.pid()),
            files: files(&store),
            store,
        }
    }

    /// What changed since `start`: bytes written, and the store files that changed.
    fn delta(&self) -> (u64, Vec<String>) {
        let bytes = write_bytes(self.daemon.pid()) - self.bytes;
        let now = files(&self.store);
        let changed = now
            .iter()
            .filter(|(p, v)| self.files.get(*p) != Some(*v))
            .map(|(p, (len, _))| {
                let was = self.files.get(p).map(|(l, _)| *l);
                format!("{} ({was:?} → {len} bytes)", p.display())
            })
            .collect();
        (bytes, changed)
    }
}

async fn polling(gw: &Daemon, admin: &str) -> bool {
    let v: serde_json::Value = http()
        .get(gw.url("/v1/nodes"))
        .bearer_auth(admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["nodes"][0]["polling"] == true
}

/// Regression (issue 25, defect 8): the node committed and fsynced every 4 s (its
/// sweeper's pass and the time floor), ~170 KiB a minute, and the gateway every second
/// (~390 KiB a minute), with nothing to do.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_connected_pair_writes_nothing_to_disk() {
    let (gw_home, node_home) = crate::harness::gateway_and_node("node:idle", 5);
    pair(&gw_home, &node_home);
    let admin = gw_home.token("gateway:main", &["admin"], "1h");
    let gw = gw_home.start();
    let node = node_home.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !polling(&gw, &admin).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node never long-polled: {}",
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let the start settle (handshake, first chores, the logs of both).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let disk = on_a_disk(gw_home.dir.path());
    let watched = [
        Watched::start("gateway", &gw_home, &gw),
        Watched::start("node", &node_home, &node),
    ];
    tokio::time::sleep(WINDOW).await;
    assert!(polling(&gw, &admin).await, "still connected at the end");
    let mut report = Vec::new();
    let mut over = false;
    for w in &watched {
        let (bytes, changed) = w.delta();
        report.push(format!(
            "{}: write_bytes {bytes} in {WINDOW:?}, store files changed: {changed:?}",
            w.name
        ));
        over |= !changed.is_empty() || (disk && bytes > MAX_WRITE_BYTES);
    }
    if !disk {
        crate::harness::skipped("idle write_bytes check", "the test directory is not on a block device (tmpfs): the store files and fsyncs are still checked");
    }
    assert!(!over, "an idle pair wrote:\n{}", report.join("\n"));
}
