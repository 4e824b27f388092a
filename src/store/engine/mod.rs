//! The storage-engine seam: the only trait in the store.
//!
//! Everything above this seam (queues, dedup, results, audit rows) is written once and
//! runs unchanged on every engine; the conformance suite in `store::tests` runs the same
//! behaviours against each implementation.
//!
//! ## Contract
//!
//! An engine holds named *trees* (small integers, see [`Tree`]) of ordered byte keys →
//! byte values.
//!
//! - [`Reader::get`] and [`Reader::scan`] (every engine is a [`Reader`]) see every batch whose [`Engine::apply`] has
//!   returned `Ok`, and never a part of a batch.
//! - [`Reader::scan`] visits keys of one tree in ascending byte order from `start`
//!   (inclusive) to `end` (exclusive, `None` = end of tree) and streams: it hands each
//!   pair to the callback and never loads the whole range into memory. The callback
//!   returns `false` to stop early.
//! - [`Engine::apply`] is **atomic and durable when it returns `Ok`**: all puts and
//!   deletes of the batch, across trees, survive a power cut together (fsync, not
//!   `sync_file_range`), or none of them do. On `Err` nothing of the batch is visible.
//!   Only one thread calls `apply` at a time (the store's writer), but `get`/`scan` may
//!   run concurrently from any thread.
//! - [`Engine::write_group`] is how the store's writer commits: it reads through the
//!   [`Reader`] it is handed (committed state; on SQLite one snapshot held by the
//!   writer's own connection, so its page cache stays warm), builds the batch, and the
//!   engine applies it with the same guarantees as `apply`. An empty batch writes
//!   nothing and costs no fsync.
//! - [`Engine::commit_group`] and [`Engine::sync`] split `write_group` in two, so the
//!   writer can build the next group while the previous one's fsync is in flight.
//!   `commit_group` makes the batch atomic, visible and crash-consistent (a crash keeps
//!   or loses it whole, and never keeps a later batch without an earlier one). The batch
//!   is durable once a `sync` *called after `commit_group` returned* has returned `Ok`.
//!   `sync` may run on another thread, concurrently with `commit_group`. A failed `sync`
//!   is sticky: it and every later `commit_group` fail until the engine is reopened,
//!   because after a failed fsync the kernel may have dropped the pages, and nothing
//!   committed on top of them can be promised. Engines whose commit is durable anyway
//!   keep the defaults.
//! - Out-of-space conditions are reported as [`EngineError::Full`] so the store can
//!   answer `storage_full` instead of crashing.

use std::path::Path;

#[cfg(feature = "sled")]
pub mod sled_engine;
pub mod sqlite;

/// A tree id (defined with the tree map in the leaf `store::trees`).
pub use super::trees::Tree;

/// One operation of a write batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    Put {
        tree: Tree,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        tree: Tree,
        key: Vec<u8>,
    },
}

/// Errors an engine reports. Cloneable so one failed group commit can answer every caller.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// The disk (or quota) is full: ENOSPC, EDQUOT, SQLITE_FULL.
    #[error("storage full: {0}")]
    Full(String),
    /// The database is damaged beyond what a record-level quarantine can handle.
    #[error("storage corrupt: {0}")]
    Corrupt(String),
    #[error("storage engine error: {0}")]
    Other(String),
}

impl EngineError {
    /// Classifies an I/O error, so a full disk becomes [`EngineError::Full`].
    pub fn from_io(e: &std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(code) if code == libc::ENOSPC || code == libc::EDQUOT => {
                EngineError::Full(e.to_string())
            }
            _ if e.kind() == std::io::ErrorKind::StorageFull => EngineError::Full(e.to_string()),
            _ => EngineError::Other(e.to_string()),
        }
    }
}

/// Reads of committed state: every engine is one (see the contract for what `get` and
/// `scan` see), and so is the writer's view while it builds a group.
pub trait Reader {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError>;
    /// Streams `[start, end)` of `tree` in key order; `f` returns `false` to stop.
    fn scan(
        &self,
        tree: Tree,
        start: &[u8],
        end: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), EngineError>;
}

/// What a group's builder returns: the batch to apply (may be empty).
pub type GroupBuilder<'a> = dyn FnMut(&dyn Reader) -> Vec<BatchOp> + 'a;

/// The narrow seam between queue semantics and bytes on disk. See the module docs for
/// the contract every implementation must keep.
pub trait Engine: Reader + Send + Sync + 'static {
    /// Short name for logs and reports (`"sqlite"`, `"sled"`).
    fn name(&self) -> &'static str;
    /// Applies the whole batch atomically and durably (see contract).
    fn apply(&self, batch: &[BatchOp]) -> Result<(), EngineError>;
    /// One group commit (see contract): `build` reads through the given [`Reader`] and
    /// returns the batch, which is then applied atomically and durably.
    fn write_group(&self, build: &mut GroupBuilder<'_>) -> Result<(), EngineError>;
    /// One group commit whose durability waits for the next [`Engine::sync`] (see
    /// contract). The default commits durably at once.
    fn commit_group(&self, build: &mut GroupBuilder<'_>) -> Result<(), EngineError> {
        self.write_group(build)
    }
    /// Runs `f` on a view of committed state while holding the engine's write lock, so
    /// no writer — in this process or another one on the same files — is between two
    /// steps of a group meanwhile; writes nothing.
    fn with_write_lock(&self, f: &mut dyn FnMut(&dyn Reader)) -> Result<(), EngineError>;
    /// Makes every batch committed before this call durable (see contract).
    fn sync(&self) -> Result<(), EngineError> {
        Ok(())
    }
    /// Whether a sync has failed, so no write can be made durable until reopen.
    fn sync_failed(&self) -> bool {
        false
    }
    /// Engine-level integrity check; returns human-readable problems (empty = healthy).
    fn integrity_check(&self) -> Result<Vec<String>, EngineError>;
    /// Writes a consistent snapshot of the database into the directory `dest` while the
    /// store stays online.
    fn backup_to(&self, dest: &Path) -> Result<(), EngineError>;
    /// Bytes the engine occupies on disk (files, WAL, logs).
    fn disk_bytes(&self) -> u64;
    /// Gives space back to the filesystem where the engine can (best effort).
    fn compact(&self) -> Result<(), EngineError> {
        Ok(())
    }
    /// Housekeeping the writer runs after it has answered a group's callers, so it
    /// never delays an acknowledgement (SQLite: completing a background checkpoint).
    fn after_group(&self) {}
    /// Drops caches that can be rebuilt from disk (called when the daemon goes idle).
    fn release_memory(&self) {}
}

/// Which engine [`crate::store::Store::open`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineKind {
    /// SQLite in WAL mode, the WAL fdatasynced after every commit before anyone is
    /// answered (the default; see docs/DECISIONS.md D1, D2).
    #[default]
    Sqlite,
    /// sled 0.34, made durable by fsyncing its files after every flush.
    #[cfg(feature = "sled")]
    Sled,
}

impl EngineKind {
    /// Every engine compiled into this binary, for the conformance suite and benchmarks.
    pub fn all() -> Vec<EngineKind> {
        #[allow(unused_mut)]
        let mut v = vec![EngineKind::Sqlite];
        #[cfg(feature = "sled")]
        v.push(EngineKind::Sled);
        v
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Sqlite => "sqlite",
            #[cfg(feature = "sled")]
            EngineKind::Sled => "sled",
        }
    }
}

/// Opens the engine of `kind` with its files under `dir`.
pub fn open(kind: EngineKind, dir: &Path) -> Result<Box<dyn Engine>, EngineError> {
    match kind {
        EngineKind::Sqlite => Ok(Box::new(sqlite::SqliteEngine::open(dir)?)),
        #[cfg(feature = "sled")]
        EngineKind::Sled => Ok(Box::new(sled_engine::SledEngine::open(dir)?)),
    }
}
