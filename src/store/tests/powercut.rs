//! Power-cut test: the crash test's child, killed, and then every write it had not
//! synced rolled back — what a power cut may leave on the flash.
//!
//! SIGKILL alone keeps the page cache, so the crash test cannot see an answer given
//! before the fsync that covers it. Here the child runs with an `LD_PRELOAD` shim
//! (`powercut.c`, built with the system C compiler at test time) that logs, before each
//! write or truncate of a store file, the bytes it replaces, and marks each successful
//! fsync/fdatasync. After the kill, each file is rolled back over the entries logged
//! since the start of its last completed sync. Writes that raced with a sync count as
//! lost. The checks are the crash test's: every acknowledged enqueue present exactly
//! once unless acked, no acked message back, counters right, `doctor` healthy.
//!
//! What it does not model: torn or reordered writes within the unsynced set (only
//! "all of it lost"; the crash test covers "all of it kept"), and directory entries
//! (creating, renaming and removing files is taken as durable).
//!
//! `OUTPOST_PCUT_DEBUG=1` prints, per run, what was rolled back. The kill count is the
//! crash test's (`OUTPOST_STORE_CRASH_KILLS`, default 50).

use std::cell::Cell;
use std::collections::HashMap;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::crash::kill_loop;
use super::*;

const SHIM: &str = include_str!("powercut.c");
const HEADER: &[u8] = b"PCUT1\n";

pub struct PowerCut {
    _work: tempfile::TempDir,
    lib: PathBuf,
    log: PathBuf,
    /// Runs in which the child had unsynced writes that were rolled back.
    cut_runs: Cell<usize>,
    /// Writes and truncates rolled back, over all runs.
    rolled_back_writes: Cell<u64>,
}

/// One logged write or truncate: `[off, off + old.len())` held `old`, the file was
/// `old_size` bytes long.
struct Undo {
    off: u64,
    old_size: u64,
    old: Vec<u8>,
}

#[derive(Default)]
struct FileLog {
    path: PathBuf,
    ino: u64,
    /// Entries not yet covered by a sync, in log order: (log position, undo).
    pending: Vec<(usize, Undo)>,
    /// Syncs begun: token → log position of the 'B' record.
    begun: HashMap<u64, usize>,
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// One log record: (kind, dev, ino, path, off, old_size, old bytes).
type Record = (u8, u64, u64, PathBuf, u64, u64, Vec<u8>);

/// The next record; `None` at the end, or at a record the kill cut short (the shim
/// logs before it writes, so that write never happened).
fn next_record(c: &mut Cursor<'_>) -> Option<Record> {
    let kind = c.take(1)?[0];
    let dev = c.u64()?;
    let ino = c.u64()?;
    let plen = u16::from_le_bytes(c.take(2)?.try_into().ok()?) as usize;
    let path = PathBuf::from(std::str::from_utf8(c.take(plen)?).ok()?);
    let off = c.u64()?;
    let old_size = c.u64()?;
    let old_len = c.u64()? as usize;
    let old = c.take(old_len)?.to_vec();
    Some((kind, dev, ino, path, off, old_size, old))
}

impl PowerCut {
    /// Builds the shim; `None` (with the reason) when there is no C compiler here.
    pub fn build() -> Result<PowerCut, String> {
        let work = tempfile::tempdir().map_err(|e| e.to_string())?;
        let src = work.path().join("powercut.c");
        std::fs::write(&src, SHIM).map_err(|e| e.to_string())?;
        let lib = work.path().join("powercut.so");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
            .arg(&lib)
            .arg(&src)
            .args(["-ldl", "-lpthread"])
            .output()
            .map_err(|e| format!("no C compiler ({cc}): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{cc} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let log = work.path().join("writes.log");
        Ok(PowerCut {
            _work: work,
            lib,
            log,
            cut_runs: Cell::new(0),
            rolled_back_writes: Cell::new(0),
        })
    }

    /// Sets up `cmd` to run under the shim, watching the files under `store`, and to
    /// SIGKILL itself right after its `kill_at`-th write to them (0: never).
    pub fn prepare(&self, cmd: &mut Command, store: &Path, kill_at: u32) {
        let _ = std::fs::remove_file(&self.log);
        let store = store.canonicalize().unwrap();
        cmd.env("LD_PRELOAD", &self.lib)
            .env("OUTPOST_PCUT_LOG", &self.log)
            .env("OUTPOST_PCUT_DIR", store)
            .env("OUTPOST_PCUT_KILL_AT", kill_at.to_string());
    }

    /// Does the shim load into this test binary? (It does not when the binary runs
    /// under an emulator whose loader cannot take a host library.)
    pub fn loads(&self) -> bool {
        let probe = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        self.prepare(&mut cmd, probe.path(), 0);
        // Without the child env var, `crash_child` returns at once.
        let ok = cmd
            .args(["--exact", "store::tests::crash::crash_child", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok && std::fs::read(&self.log).is_ok_and(|l| l.starts_with(HEADER))
    }

    /// Rolls every watched file back over the writes the killed child had not synced;
    /// returns how many writes and truncates it undid.
    pub fn roll_back(&self, run: usize) -> u64 {
        let log = std::fs::read(&self.log).unwrap();
        assert!(
            log.starts_with(HEADER),
            "run {run}: the power-cut shim did not run in the child"
        );
        let mut files: HashMap<(u64, u64), FileLog> = HashMap::new();
        let mut c = Cursor(&log[HEADER.len()..]);
        let mut pos = 0;
        while let Some((kind, dev, ino, path, off, old_size, old)) = next_record(&mut c) {
            pos += 1;
            let f = files.entry((dev, ino)).or_default();
            f.path = path;
            f.ino = ino;
            match kind {
                b'W' | b'T' => f.pending.push((pos, Undo { off, old_size, old })),
                b'B' => {
                    f.begun.insert(off, pos);
                }
                b'S' => {
                    let began = f.begun.remove(&off).unwrap();
                    f.pending.retain(|(p, _)| *p > began);
                }
                k => panic!("run {run}: bad power-cut log record {k}"),
            }
        }
        let mut writes = 0;
        for f in files.into_values().filter(|f| !f.pending.is_empty()) {
            // Rolled back only if the path still names the same file (a file replaced
            // by a rename is someone else's now).
            match std::fs::metadata(&f.path) {
                Ok(m) if m.ino() == f.ino => {}
                _ => continue,
            }
            if std::env::var("OUTPOST_PCUT_DEBUG").is_ok() {
                eprintln!(
                    "run {run}: {} pending on {}: {:?}",
                    f.pending.len(),
                    f.path.display(),
                    f.pending
                        .iter()
                        .map(|(p, u)| (p, u.off, u.old_size, u.old.len()))
                        .collect::<Vec<_>>()
                );
            }
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&f.path)
                .unwrap();
            for (_, u) in f.pending.iter().rev() {
                file.set_len(u.old_size).unwrap();
                file.write_all_at(&u.old, u.off).unwrap();
                writes += 1;
            }
        }
        if writes > 0 {
            self.cut_runs.set(self.cut_runs.get() + 1);
            self.rolled_back_writes
                .set(self.rolled_back_writes.get() + writes);
        }
        writes
    }
}

fn power_cut_loop(kind: EngineKind) {
    let cut = match PowerCut::build() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED power-cut test: {why}");
            return;
        }
    };
    if !cut.loads() {
        eprintln!("SKIPPED power-cut test: the LD_PRELOAD shim does not load into this test binary (emulated target?)");
        return;
    }
    kill_loop(kind, Some(&cut));
    eprintln!(
        "power cut: {} runs had unsynced writes; {} writes rolled back",
        cut.cut_runs.get(),
        cut.rolled_back_writes.get()
    );
}

for_each_engine!(power_cut_loop);
