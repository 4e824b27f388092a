//! Disk full on a really full filesystem: the test mounts a small tmpfs (root only;
//! otherwise it prints why and returns), fills it with a filler file, and checks:
//! enqueue answers `StorageFull` (never another error, never a panic), nothing already
//! stored is lost, and writes resume once space is freed. (SQLite keeps serving reads
//! while full; sled must reopen its database and can only do so once space is back.)

use std::io::Write;
use std::process::Command;

use super::*;

/// Unmounts on drop, so a failing assertion does not leave the mount behind.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_tmpfs(dir: &Path, size: &str) -> Result<Mount, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not running as root".into());
    }
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if !st.success() {
        return Err(format!("mount failed: {st}"));
    }
    Ok(Mount(dir.to_path_buf()))
}

/// Writes to `path` until the filesystem says ENOSPC.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("unexpected fill error {e}"),
        }
    }
    let _ = f.sync_all();
}

fn storage_full_on_a_full_tmpfs_then_resume(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let mount = match mount_tmpfs(d.path(), "8m") {
        Ok(m) => m,
        Err(why) => {
            super::skipped(&format!("disk-full test ({})", kind.name()), &why);
            return;
        }
    };
    let store_dir = d.path().join("store");
    let c = ManualClock::new(T0);
    let s = open(kind, &store_dir, &c);
    let mut confirmed = Vec::new();
    for i in 0..50 {
        let id = format!("pre{i}");
        s.enqueue(msg("gw", &id, 0, &[1u8; 512])).wait().unwrap();
        confirmed.push(id);
    }
    fill(&d.path().join("filler"));
    let mut full = 0;
    for i in 0..500 {
        let id = format!("full{i}");
        match s.enqueue(msg("gw", &id, 0, &[2u8; 512])).wait() {
            Ok(_) => confirmed.push(id),
            Err(StoreError::StorageFull) => {
                full += 1;
                if full >= 5 {
                    break;
                }
            }
            Err(e) => panic!("expected StorageFull, got {e:?}"),
        }
    }
    assert!(full >= 5, "the full disk was never reported");
    // A big body needs a blob file: also StorageFull, not an I/O error.
    assert_eq!(
        s.enqueue(msg("gw", "bigfull", 0, &[3u8; 200_000])).wait(),
        Err(StoreError::StorageFull)
    );
    match s.next_batch("outbox", "gw", 10_000, T0) {
        Ok(present) => assert_eq!(ids(&present), confirmed, "something stored was lost"),
        // sled cannot reopen its database while the disk is full (docs/DECISIONS.md).
        Err(StoreError::StorageFull) if kind != EngineKind::Sqlite => {}
        Err(e) => panic!("read failed while full: {e:?}"),
    }

    std::fs::remove_file(d.path().join("filler")).unwrap();
    let present = ids(&s.next_batch("outbox", "gw", 10_000, T0).unwrap());
    assert_eq!(present, confirmed, "something stored was lost");
    s.enqueue(msg("gw", "after", 0, &[4u8; 512]))
        .wait()
        .unwrap();
    confirmed.push("after".into());
    drop(s);
    let s = open(kind, &store_dir, &c);
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10_000, T0).unwrap()),
        confirmed
    );
    drop(s);
    drop(mount);
}

for_each_engine!(storage_full_on_a_full_tmpfs_then_resume);
