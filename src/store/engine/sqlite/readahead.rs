//! Keeps the kernel from caching the store's files in large folios.
//!
//! Since Linux 6.16, ext4 caches file data in large folios (up to several MiB) when it
//! reads ahead. The page cache then tracks dirtiness per folio: one 2 KiB page written
//! into a range that was read sequentially dirties, and on fsync writes, the whole
//! folio. SQLite reads its WAL from start to end when it opens a store (recovery), and
//! then overwrites that same file from its start; measured on this project's 6.18 VM
//! (`OUTPOST_BENCH_COLD_ONLY=1`), a store reopened after an unclean stop with a cold
//! page cache wrote 173 KB per one-message commit instead of 17.6 KB, until the pages
//! left the cache (DECISIONS D8; docs/BENCHMARKS-store.md): ten times the wear on an SD
//! card.
//!
//! Pages read with readahead off come into the cache as single 4 KiB folios. So the
//! engine reads the WAL once itself, through a descriptor with `POSIX_FADV_RANDOM`,
//! before SQLite opens it ([`prewarm`]), and turns readahead off on every descriptor
//! SQLite holds on the database and the WAL ([`no_readahead`]). What that costs: a
//! scan of data that is not in the page cache reads 4 KiB at a time instead of in
//! large sequential requests.
//!
//! Both are best effort: an error here only means the old behaviour, so it is logged
//! at debug level and otherwise ignored. Elsewhere than Linux both do nothing.

use std::path::{Path, PathBuf};

/// The files of the store at `db`: the database and its WAL, as the kernel names them
/// (absolute, symlinks resolved), for comparing with `/proc/self/fd` links.
pub fn store_files(db: &Path) -> Vec<PathBuf> {
    let dir = match db.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let (Ok(dir), Some(name)) = (std::fs::canonicalize(dir), db.file_name()) else {
        return Vec::new();
    };
    let db = dir.join(name);
    let mut wal = db.clone().into_os_string();
    wal.push("-wal");
    vec![db, PathBuf::from(wal)]
}

/// Reads `path`, if it exists, through a descriptor with readahead off, so its pages
/// enter the page cache as single folios and a later reader finds them there.
pub fn prewarm(path: &Path) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::FileExt;
        use std::os::unix::io::AsRawFd;
        let Ok(f) = std::fs::File::open(path) else {
            return;
        };
        advise_random(f.as_raw_fd());
        let mut buf = vec![0u8; 64 * 1024];
        let mut off = 0u64;
        loop {
            match f.read_at(&mut buf, off) {
                Ok(0) => break,
                Ok(n) => off += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, path = %path.display(), "prewarm stopped");
                    break;
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

/// Turns readahead off on every descriptor of this process that is open on one of
/// `files`. Descriptors are matched by their `/proc/self/fd` link; one closed and
/// reused by another thread between the look and the advice gets the advice instead,
/// which costs that file its readahead and nothing else.
pub fn no_readahead(files: &[PathBuf]) {
    #[cfg(target_os = "linux")]
    {
        if files.is_empty() {
            return;
        }
        let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        for entry in fds.flatten() {
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if let Ok(target) = std::fs::read_link(entry.path()) {
                if files.contains(&target) {
                    advise_random(fd);
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = files;
}

#[cfg(target_os = "linux")]
fn advise_random(fd: i32) {
    // SAFETY: posix_fadvise only reads its integer arguments; on a descriptor that is
    // not (or no longer) a regular file it fails with EBADF/ESPIPE, which is ignored.
    let rc = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM) };
    if rc != 0 {
        tracing::debug!(fd, rc, "posix_fadvise(RANDOM) failed");
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn store_files_are_absolute_and_name_the_wal() {
        let d = tempfile::tempdir().unwrap();
        let f = store_files(&d.path().join("store.sqlite3"));
        assert_eq!(f.len(), 2);
        assert!(f[0].is_absolute());
        assert!(f[1].to_string_lossy().ends_with("store.sqlite3-wal"));
    }

    /// Whether a descriptor has readahead off is not visible from user space, so this
    /// checks the effect the module exists for: after a sequential read through a
    /// descriptor `no_readahead` found by its path, a 2 KiB write dirties one 4 KiB page,
    /// not a large folio (`write_bytes` in `/proc/thread-self/io` counts per folio).
    /// On a kernel or filesystem without large folios it passes either way.
    #[test]
    fn an_advised_descriptor_reads_into_small_folios() {
        use std::os::unix::fs::FileExt;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("store.sqlite3");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.write_all_at(&vec![7u8; 4 << 20], 0).unwrap();
        f.sync_all().unwrap();
        // Out of the cache, so the read below brings it back in.
        let fd = std::os::unix::io::AsRawFd::as_raw_fd(&f);
        // SAFETY: plain integer arguments on a descriptor we own.
        unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
        no_readahead(&store_files(&path));
        let mut buf = vec![0u8; 2048];
        for off in (0..4u64 << 20).step_by(2048) {
            f.read_at(&mut buf, off).unwrap();
        }
        let Some(before) = write_bytes() else {
            eprintln!("skipped: no /proc/thread-self/io to count written bytes with");
            return;
        };
        f.write_all_at(&[9u8; 2048], 3 << 20).unwrap();
        f.sync_data().unwrap();
        let written = write_bytes().unwrap_or(before) - before;
        // Without the advice Linux 6.18 on ext4 counted 16 KiB–1 MiB for such a write
        // (1 MiB at this offset); with it, one page.
        assert!(written <= 8192, "{written} bytes for one 2 KiB write");
    }

    /// This thread's count (tests run in parallel threads of one process).
    fn write_bytes() -> Option<u64> {
        std::fs::read_to_string("/proc/thread-self/io")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("write_bytes: "))
            .and_then(|v| v.trim().parse().ok())
    }
}
