//! The background checkpointer: a thread with its own connection that copies the WAL
//! into the database file.
//!
//! Checkpoints run on their own thread and connection (`PASSIVE`, every
//! [`CHECKPOINT_EVERY`] commits) instead of inside whichever commit crosses SQLite's
//! auto-checkpoint threshold: that commit used to pay for copying ~1,000 pages and
//! fsyncing the database file, which set the tail latency of every write. SQLite only
//! restarts the WAL from its start when a write begins with *every* frame copied, which
//! a background checkpoint racing a busy writer rarely achieves; so once the background
//! pass is done, the writer finishes the job itself after its next group has been
//! answered (a `PASSIVE` pass over the few frames added meanwhile, see
//! [`Checkpointer::take_passed`]), and the WAL stays bounded under sustained load.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use rusqlite::OpenFlags;

use super::conn::open_conn;

/// Commits between two background checkpoints (~ SQLite's 1,000-page default at a
/// handful of pages per commit).
pub(super) const CHECKPOINT_EVERY: u64 = 128;

/// The background checkpoint thread: woken (coalescing) by the writer, stopped and
/// joined when the engine is dropped ([`Checkpointer::stop`]).
pub(super) struct Checkpointer {
    wake: mpsc::SyncSender<()>,
    /// Set by the thread after each pass; the writer then completes it (see module docs).
    passed: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Commits since the engine was opened.
    commits: AtomicU64,
}

impl Checkpointer {
    pub(super) fn start(path: &Path) -> Option<Checkpointer> {
        let conn = match open_conn(path, OpenFlags::default()) {
            Ok(c) => c,
            Err(e) => {
                // Without it the WAL is still checkpointed when the store closes and by
                // `compact`; log and go on rather than refuse to open.
                tracing::warn!(error = %e, "no background checkpointer");
                return None;
            }
        };
        let (wake, rx) = mpsc::sync_channel::<()>(1);
        let passed = Arc::new(AtomicBool::new(false));
        let flag = passed.clone();
        let thread = std::thread::Builder::new()
            .name("outpost-store-ckpt".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    // PASSIVE: copies what it can without blocking the writer or readers.
                    match conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);") {
                        Ok(()) => flag.store(true, Ordering::Release),
                        Err(e) => tracing::warn!(error = %e, "background checkpoint failed"),
                    }
                }
            })
            .ok()?;
        Some(Checkpointer {
            wake,
            passed,
            thread: Some(thread),
            commits: AtomicU64::new(0),
        })
    }

    /// After each commit: counts it and wakes the thread every [`CHECKPOINT_EVERY`]
    /// commits.
    pub(super) fn committed(&self) {
        let n = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        if n % CHECKPOINT_EVERY == 0 {
            // Full channel = a pass is already pending: coalesce.
            let _ = self.wake.try_send(());
        }
    }

    /// Whether a background pass has finished since the last call; the writer then
    /// copies what was added meanwhile (see module docs).
    pub(super) fn take_passed(&self) -> bool {
        self.passed.swap(false, Ordering::Acquire)
    }

    /// Stops the thread (it ends when its channel closes) and waits for it.
    pub(super) fn stop(self) {
        let Checkpointer { wake, thread, .. } = self;
        drop(wake);
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}
