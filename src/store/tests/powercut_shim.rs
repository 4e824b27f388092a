//! The power-cut shim's Rust side, shared by the store's power-cut test
//! (`store::tests::powercut`) and the daemon's (`tests/it/powercut.rs`, which includes
//! this file by path): builds `tests/support/powercut.c` with the system C compiler, sets up the
//! environment that preloads it, and rolls the watched files back over every write the
//! killed process had not synced. See `powercut.c` for the log format and DECISIONS D9
//! for the model. `OUTPOST_PCUT_DEBUG=1` prints, per run, what was rolled back.

use std::cell::Cell;
use std::collections::HashMap;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const SHIM: &str = include_str!("../../../tests/support/powercut.c");
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
    kind: u8,
    off: u64,
    old_size: u64,
    /// Bytes the write wrote.
    len: u64,
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

/// One log record: (kind, dev, ino, path, and the undo: its `off`, `old_size`, `len`,
/// `old`; for a sync `off` is the token).
type Record = (u8, u64, u64, PathBuf, Undo);

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
    let len = c.u64()?;
    let old_len = c.u64()? as usize;
    let old = c.take(old_len)?.to_vec();
    let undo = Undo {
        kind,
        off,
        old_size,
        len,
        old,
    };
    Some((kind, dev, ino, path, undo))
}

impl PowerCut {
    /// Builds the shim; the reason to skip when there is no C compiler here.
    pub fn build() -> Result<PowerCut, String> {
        let work = tempfile::tempdir().map_err(|e| e.to_string())?;
        let src = work.path().join("powercut.c");
        std::fs::write(&src, SHIM).map_err(|e| e.to_string())?;
        let lib = work.path().join("powercut.so");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
            .arg(&lib)
            .arg(&src)
            .args(["-ldl", "-lpthread"])
            .output()
            .map_err(|e| format!("no C compiler ({cc}): {e}"))?;
        // No compiler is a reason to skip; a shim that does not compile is a failure.
        assert!(
            out.status.success(),
            "{cc} could not build the power-cut shim: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = work.path().join("writes.log");
        Ok(PowerCut {
            _work: work,
            lib,
            log,
            cut_runs: Cell::new(0),
            rolled_back_writes: Cell::new(0),
        })
    }

    /// The environment that runs a process under the shim, watching the files under
    /// `dir`, and SIGKILLs it right after its `kill_at`-th write to them (0: never),
    /// counted from when the file `arm` exists (`None`: from the start). Starts a new
    /// log.
    pub fn env(&self, dir: &Path, kill_at: u32, arm: Option<&Path>) -> Vec<(String, String)> {
        let _ = std::fs::remove_file(&self.log);
        let dir = dir.canonicalize().unwrap();
        let mut env = vec![
            ("LD_PRELOAD".into(), self.lib.display().to_string()),
            ("OUTPOST_PCUT_LOG".into(), self.log.display().to_string()),
            ("OUTPOST_PCUT_DIR".into(), dir.display().to_string()),
            ("OUTPOST_PCUT_KILL_AT".into(), kill_at.to_string()),
        ];
        if let Some(arm) = arm {
            env.push(("OUTPOST_PCUT_ARM".into(), arm.display().to_string()));
        }
        env
    }

    /// Whether the shim ran in the process started with the last [`PowerCut::env`]:
    /// it does not load into a binary run under an emulator such as qemu-user.
    pub fn shim_ran(&self) -> bool {
        std::fs::read(&self.log).is_ok_and(|l| l.starts_with(HEADER))
    }

    /// Writes and truncates in the log of the last process run under the shim.
    pub fn logged_writes(&self) -> u64 {
        let log = std::fs::read(&self.log).unwrap_or_default();
        let mut c = Cursor(log.get(HEADER.len()..).unwrap_or_default());
        let mut n = 0;
        while let Some((kind, ..)) = next_record(&mut c) {
            n += u64::from(kind == b'W' || kind == b'T');
        }
        n
    }

    /// Runs with unsynced writes rolled back, and how many writes and truncates that
    /// undid, over all runs so far.
    pub fn totals(&self) -> (usize, u64) {
        (self.cut_runs.get(), self.rolled_back_writes.get())
    }

    /// Rolls every watched file back over the writes the killed child had not synced;
    /// returns how many writes and truncates it undid, wholly or in part.
    ///
    /// Even runs lose every unsynced write. Odd runs model a disk that kept each file's
    /// unsynced writes in order up to a random point and tore the write at that point
    /// at a random 512-byte boundary; each file gets its own point, so one file may
    /// keep writes that came after ones another file lost.
    pub fn roll_back(&self, run: usize) -> u64 {
        use rand::Rng;
        let mut rng = rand::thread_rng();
        let torn = run % 2 == 1;
        let log = std::fs::read(&self.log).unwrap();
        assert!(
            log.starts_with(HEADER),
            "run {run}: the power-cut shim did not run in the child"
        );
        let mut files: HashMap<(u64, u64), FileLog> = HashMap::new();
        let mut c = Cursor(&log[HEADER.len()..]);
        let mut pos = 0;
        while let Some((kind, dev, ino, path, undo)) = next_record(&mut c) {
            pos += 1;
            let f = files.entry((dev, ino)).or_default();
            f.path = path;
            f.ino = ino;
            match kind {
                b'W' | b'T' => f.pending.push((pos, undo)),
                b'B' => {
                    f.begun.insert(undo.off, pos);
                }
                b'S' => {
                    let began = f.begun.remove(&undo.off).unwrap();
                    f.pending.retain(|(p, _)| *p > began);
                }
                k => panic!("run {run}: bad power-cut log record {k}"),
            }
        }
        if std::env::var("OUTPOST_PCUT_DEBUG").is_ok() {
            for f in files.values() {
                eprintln!(
                    "run {run}: {} ino {} pending {} begun {:?}",
                    f.path.display(),
                    f.ino,
                    f.pending.len(),
                    f.begun
                );
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
            // Entries from `keep` on are lost; the one at `keep` only from byte `tear`.
            let keep = if torn {
                rng.gen_range(0..f.pending.len())
            } else {
                0
            };
            let (_, first) = &f.pending[keep];
            let tear = if torn && first.kind == b'W' && first.len > 512 {
                rng.gen_range(0..first.len.div_ceil(512)) * 512
            } else {
                0
            };
            if std::env::var("OUTPOST_PCUT_DEBUG").is_ok() {
                eprintln!(
                    "run {run}: {} pending on {}, lost from #{keep} byte {tear}: {:?}",
                    f.pending.len(),
                    f.path.display(),
                    f.pending
                        .iter()
                        .map(|(p, u)| (p, u.kind as char, u.off, u.len, u.old_size))
                        .collect::<Vec<_>>()
                );
            }
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&f.path)
                .unwrap();
            for (i, (_, u)) in f.pending.iter().enumerate().skip(keep).rev() {
                let from = if i == keep { tear } else { 0 };
                // The kept prefix of a torn write may have grown the file.
                file.set_len(u.old_size.max(u.off + from)).unwrap();
                if let Some(old) = u.old.get(from as usize..) {
                    file.write_all_at(old, u.off + from).unwrap();
                }
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
