//! The data directory's lock: one process at a time may own a data directory for
//! writing (`outpost run`, `outpost gateway migrate`). An advisory `flock(2)` on
//! `<data_dir>/daemon.lock`, held for the owner's whole life and released by the kernel
//! however it ends (kill -9 and power cuts leave no stale lock behind). The file holds
//! the owner's pid, for the refusal line only.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "daemon.lock";

/// Held while alive; dropping it (or the process ending) releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process owns the directory.
    #[error("another outpost process{} owns {dir} (it holds {dir}/{LOCK_FILE}): stop it first, or give this one its own --data-dir", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Held { dir: PathBuf, pid: Option<u32> },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl DataDirLock {
    /// Take the lock on `data_dir` (created if missing) without waiting.
    pub fn acquire(data_dir: &Path) -> Result<Self, LockError> {
        let path = data_dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(data_dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Held {
                    dir: data_dir.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            return Err(io(err));
        }
        // The pid is a hint for the refusal line, not part of the lock: no fsync (it is
        // rewritten at every start).
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        // flock locks belong to the open file description: a second open in the same
        // process conflicts like another process would.
        match DataDirLock::acquire(dir.path()) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected Held, got {other:?}"),
        }
        drop(first);
        DataDirLock::acquire(dir.path()).expect("free again once dropped");
    }
}
