//! The append-only audit log over a storage seam.
//!
//! [`AuditLog`] assigns indexes, builds canonical entries, keeps the Merkle
//! [`Frontier`] and signs checkpoints; [`AuditStorage`] is where the bytes live (the
//! store in production, [`MemoryAuditStorage`] in tests). The log never reads the clock:
//! callers pass `now_ms`.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;

use ed25519_dalek::{SigningKey, VerifyingKey};

use super::checkpoint::{origin_for, parse_and_verify, sign_checkpoint, CheckpointError};
use super::entry::{AuditEntry, AuditRecord};
use super::merkle::{leaf_hash, Frontier, Hash};

/// Errors a storage implementation reports; boxed so the store keeps its own types.
pub type StorageError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where audit entries and checkpoints are kept.
///
/// Contract:
/// - Entries are dense: indexes `0..len()` exist, nothing else. `append` is only called
///   with `index == len()` (the log serialises appends under its lock).
/// - `append` returns only once the entry is durable (fsync'd or part of a committed
///   group commit). An `Err` means "not stored"; the log then refuses further appends
///   until reopened, so a half-known state never turns into a gap.
/// - `append_batch` stores several consecutive entries with one durability wait; the
///   default calls `append` in a loop. Either all are durable on `Ok` or the log treats
///   the batch as failed.
/// - `read(from, limit)` returns up to `limit` entries with index ≥ `from`, ascending,
///   as `(index, bytes)` exactly as appended. Fewer than `limit` means the end.
/// - `put_checkpoint(size, note)` durably stores a signed note for tree size `size`
///   (replacing one stored for the same size); `checkpoints()` returns all of them in
///   ascending size.
/// - All methods are synchronous and may block on disk; call from blocking context when
///   that matters.
pub trait AuditStorage: Send + Sync {
    fn len(&self) -> Result<u64, StorageError>;
    fn append(&self, index: u64, entry: &[u8]) -> Result<(), StorageError>;
    fn append_batch(&self, first_index: u64, entries: &[Vec<u8>]) -> Result<(), StorageError> {
        for (i, e) in entries.iter().enumerate() {
            self.append(first_index + i as u64, e)?;
        }
        Ok(())
    }
    fn read(&self, from: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, StorageError>;
    fn put_checkpoint(&self, size: u64, note: &str) -> Result<(), StorageError>;
    fn checkpoints(&self) -> Result<Vec<(u64, String)>, StorageError>;
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit storage: {0}")]
    Storage(#[source] StorageError),
    #[error("audit log refuses appends after a failed write; reopen it")]
    Poisoned,
    #[error("audit storage is inconsistent: {0}")]
    Corrupt(String),
    #[error("audit export write failed: {0}")]
    Export(#[from] std::io::Error),
}

/// Entries are streamed in pages of this size so memory stays flat for any log length.
const PAGE: usize = 1024;

struct State {
    frontier: Frontier,
    poisoned: bool,
}

/// The node's tamper-evident log. Cheap to share behind an `Arc`.
pub struct AuditLog<S: AuditStorage> {
    storage: S,
    state: Mutex<State>,
}

/// Outcome of [`AuditLog::verify`]: empty `failures` means the log checks out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub entries: u64,
    pub root: Hash,
    pub checkpoints_checked: usize,
    pub failures: Vec<VerifyFailure>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.failures.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyFailure {
    #[error("entry stored at position {position} has storage key {key}")]
    Gap { position: u64, key: u64 },
    #[error("entry at position {position} is not a JSON object with an integer index")]
    Unreadable { position: u64 },
    #[error("entry at position {position} says it is index {claimed}")]
    IndexMismatch { position: u64, claimed: u64 },
    #[error("storage reports {reported} entries but {found} were read")]
    LengthMismatch { reported: u64, found: u64 },
    #[error("checkpoint at size {size}: {error}")]
    BadCheckpoint { size: u64, error: CheckpointError },
    #[error("checkpoint stored under size {stored} is for size {signed}")]
    CheckpointSizeMismatch { stored: u64, signed: u64 },
    #[error("checkpoint at size {size} does not match the recomputed root")]
    RootMismatch { size: u64 },
    #[error("checkpoint at size {size} is beyond the log's {entries} entries")]
    CheckpointBeyondLog { size: u64, entries: u64 },
}

/// Rebuild the frontier from storage (after a failed submission).
fn rebuild<S: AuditStorage>(storage: &S) -> Result<Frontier, AuditError> {
    let mut frontier = Frontier::new();
    stream(storage, 0, |key, bytes| {
        if key != frontier.size() {
            return Err(AuditError::Corrupt(format!(
                "expected entry {} but storage returned {key}",
                frontier.size()
            )));
        }
        frontier.push(leaf_hash(bytes));
        Ok(())
    })?;
    Ok(frontier)
}

/// Stream all entries from `from`, in pages, calling `f(position_key, bytes)`.
fn stream<S: AuditStorage>(
    storage: &S,
    from: u64,
    mut f: impl FnMut(u64, &[u8]) -> Result<(), AuditError>,
) -> Result<(), AuditError> {
    let mut next = from;
    loop {
        let page = storage.read(next, PAGE).map_err(AuditError::Storage)?;
        let n = page.len();
        for (key, bytes) in &page {
            f(*key, bytes)?;
            next = key.saturating_add(1);
        }
        if n < PAGE {
            return Ok(());
        }
    }
}

impl<S: AuditStorage> AuditLog<S> {
    /// Open the log, rebuilding the frontier by streaming every stored entry.
    ///
    /// This trusts the stored bytes (it only hashes them) but insists the indexes are
    /// dense, so a missing row is reported now rather than silently shifting every
    /// later index. Full checking is [`AuditLog::verify`].
    pub fn open(storage: S) -> Result<Self, AuditError> {
        let mut frontier = Frontier::new();
        stream(&storage, 0, |key, bytes| {
            if key != frontier.size() {
                return Err(AuditError::Corrupt(format!(
                    "expected entry {} but storage returned {key}",
                    frontier.size()
                )));
            }
            frontier.push(leaf_hash(bytes));
            Ok(())
        })?;
        let len = storage.len().map_err(AuditError::Storage)?;
        if len != frontier.size() {
            return Err(AuditError::Corrupt(format!(
                "storage reports {len} entries but {} were read",
                frontier.size()
            )));
        }
        Ok(Self {
            storage,
            state: Mutex::new(State {
                frontier,
                poisoned: false,
            }),
        })
    }

    pub fn storage(&self) -> &S {
        &self.storage
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the frontier half-updated (push is
        // the last step), so a poisoned mutex is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Number of entries (the current tree size).
    pub fn size(&self) -> u64 {
        self.lock().frontier.size()
    }

    /// Root hash of the current tree.
    pub fn root(&self) -> Hash {
        self.lock().frontier.root()
    }

    /// Append one entry; durable when this returns. Returns `(index, leaf_hash)` for the
    /// call's `evidence`.
    pub fn append(&self, record: AuditRecord, now_ms: u64) -> Result<(u64, Hash), AuditError> {
        let mut out = self.append_many(vec![record], now_ms)?;
        out.pop()
            .ok_or_else(|| AuditError::Corrupt("empty append result".into()))
    }

    /// Append several entries with one storage call (one durability wait when the
    /// storage implements `append_batch` as a group commit). Indexes are consecutive.
    pub fn append_many(
        &self,
        records: Vec<AuditRecord>,
        now_ms: u64,
    ) -> Result<Vec<(u64, Hash)>, AuditError> {
        let mut st = self.lock();
        if st.poisoned {
            return Err(AuditError::Poisoned);
        }
        let first = st.frontier.size();
        let bytes: Vec<Vec<u8>> = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| AuditEntry::from_record(first + i as u64, now_ms, r).canonical_bytes())
            .collect();
        if let Err(e) = self.storage.append_batch(first, &bytes) {
            // We do not know how much of the batch reached the disk; refuse to guess.
            st.poisoned = true;
            return Err(AuditError::Storage(e));
        }
        let mut out = Vec::with_capacity(bytes.len());
        for (i, b) in bytes.iter().enumerate() {
            let h = leaf_hash(b);
            st.frontier.push(h);
            out.push((first + i as u64, h));
        }
        Ok(out)
    }

    /// Group-commit append: under the lock, build the entries and hand their bytes to
    /// `submit`, which must queue them for durable, in-order storage *without waiting*
    /// (e.g. the store's writer channel), then advance the frontier. The caller waits
    /// for durability outside the lock — so concurrent callers share one fsync — and
    /// calls [`AuditLog::mark_failed`] if that wait fails.
    pub fn append_submit<R>(
        &self,
        records: Vec<AuditRecord>,
        now_ms: u64,
        submit: impl FnOnce(u64, Vec<Vec<u8>>) -> R,
    ) -> Result<(Vec<(u64, Hash)>, R), AuditError> {
        let mut st = self.lock();
        if st.poisoned {
            // A previous submission failed: storage is the truth, rebuild from it.
            st.frontier = rebuild(&self.storage)?;
            st.poisoned = false;
        }
        let first = st.frontier.size();
        let bytes: Vec<Vec<u8>> = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| AuditEntry::from_record(first + i as u64, now_ms, r).canonical_bytes())
            .collect();
        let hashes: Vec<Hash> = bytes.iter().map(|b| leaf_hash(b)).collect();
        let r = submit(first, bytes);
        let mut out = Vec::with_capacity(hashes.len());
        for (i, h) in hashes.into_iter().enumerate() {
            st.frontier.push(h);
            out.push((first + i as u64, h));
        }
        Ok((out, r))
    }

    /// A submitted append did not become durable: rebuild from storage before the next.
    pub fn mark_failed(&self) {
        self.lock().poisoned = true;
    }

    /// Sign and store a checkpoint of the current tree; returns the note.
    pub fn checkpoint(&self, key: &SigningKey, node_id: &str) -> Result<String, AuditError> {
        let st = self.lock();
        let size = st.frontier.size();
        let note = sign_checkpoint(key, &origin_for(node_id), size, &st.frontier.root());
        self.storage
            .put_checkpoint(size, &note)
            .map_err(AuditError::Storage)?;
        Ok(note)
    }

    /// The most recent stored checkpoint, if any.
    pub fn latest_checkpoint(&self) -> Result<Option<(u64, String)>, AuditError> {
        let cps = self.storage.checkpoints().map_err(AuditError::Storage)?;
        Ok(cps.into_iter().max_by_key(|(size, _)| *size))
    }

    /// Recompute the tree from every stored entry and check every stored checkpoint.
    ///
    /// Does not touch the in-memory frontier: it answers "do the stored bytes hold up",
    /// which is what `outpost audit verify` promises.
    pub fn verify(&self, key: &VerifyingKey, node_id: &str) -> Result<VerifyReport, AuditError> {
        let origin = origin_for(node_id);
        let mut failures = Vec::new();
        // size → expected root, from every checkpoint whose signature checks out.
        let mut expected: BTreeMap<u64, Hash> = BTreeMap::new();
        let checkpoints = self.storage.checkpoints().map_err(AuditError::Storage)?;
        let checkpoints_checked = checkpoints.len();
        for (size, note) in &checkpoints {
            match parse_and_verify(note, key, &origin) {
                Ok(cp) if cp.size != *size => {
                    failures.push(VerifyFailure::CheckpointSizeMismatch {
                        stored: *size,
                        signed: cp.size,
                    })
                }
                Ok(cp) => {
                    expected.insert(cp.size, cp.root);
                }
                Err(error) => failures.push(VerifyFailure::BadCheckpoint { size: *size, error }),
            }
        }

        let mut frontier = Frontier::new();
        let check_root = |f: &Frontier, failures: &mut Vec<VerifyFailure>| {
            if let Some(root) = expected.get(&f.size()) {
                if *root != f.root() {
                    failures.push(VerifyFailure::RootMismatch { size: f.size() });
                }
            }
        };
        check_root(&frontier, &mut failures);
        stream(&self.storage, 0, |key, bytes| {
            let position = frontier.size();
            if key != position {
                failures.push(VerifyFailure::Gap { position, key });
            }
            match claimed_index(bytes) {
                Some(claimed) if claimed == position => {}
                Some(claimed) => failures.push(VerifyFailure::IndexMismatch { position, claimed }),
                None => failures.push(VerifyFailure::Unreadable { position }),
            }
            frontier.push(leaf_hash(bytes));
            check_root(&frontier, &mut failures);
            Ok(())
        })?;
        let entries = frontier.size();
        for size in expected.keys().filter(|s| **s > entries) {
            failures.push(VerifyFailure::CheckpointBeyondLog {
                size: *size,
                entries,
            });
        }
        let reported = self.storage.len().map_err(AuditError::Storage)?;
        if reported != entries {
            failures.push(VerifyFailure::LengthMismatch {
                reported,
                found: entries,
            });
        }
        Ok(VerifyReport {
            entries,
            root: frontier.root(),
            checkpoints_checked,
            failures,
        })
    }

    /// Write entries with index ≥ `since` as JSON Lines (the canonical bytes, one per
    /// line). Returns how many were written.
    pub fn export_jsonl(&self, since: u64, out: &mut impl Write) -> Result<u64, AuditError> {
        let mut n = 0u64;
        stream(&self.storage, since, |_, bytes| {
            out.write_all(bytes)?;
            out.write_all(b"\n")?;
            n += 1;
            Ok(())
        })?;
        out.flush()?;
        Ok(n)
    }
}

fn claimed_index(bytes: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    v.as_object()?.get("index")?.as_u64()
}

/// In-memory [`AuditStorage`] for tests and `--dev` experiments. Not durable.
#[derive(Default)]
pub struct MemoryAuditStorage {
    inner: Mutex<MemoryInner>,
}

#[derive(Default)]
struct MemoryInner {
    entries: BTreeMap<u64, Vec<u8>>,
    checkpoints: BTreeMap<u64, String>,
    fail_appends: bool,
}

impl MemoryAuditStorage {
    pub fn new() -> Self {
        Self::default()
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Direct access to the stored rows, for tests that play the attacker.
    pub fn tamper(&self, f: impl FnOnce(&mut BTreeMap<u64, Vec<u8>>)) {
        f(&mut self.inner().entries)
    }

    /// Make every later append fail (disk-full tests).
    pub fn fail_appends(&self, fail: bool) {
        self.inner().fail_appends = fail;
    }
}

impl AuditStorage for MemoryAuditStorage {
    fn len(&self) -> Result<u64, StorageError> {
        Ok(self.inner().entries.len() as u64)
    }

    fn append(&self, index: u64, entry: &[u8]) -> Result<(), StorageError> {
        let mut g = self.inner();
        if g.fail_appends {
            return Err("injected append failure".into());
        }
        if g.entries.contains_key(&index) {
            return Err(format!("entry {index} already exists").into());
        }
        g.entries.insert(index, entry.to_vec());
        Ok(())
    }

    fn read(&self, from: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        Ok(self
            .inner()
            .entries
            .range(from..)
            .take(limit)
            .map(|(k, v)| (*k, v.clone()))
            .collect())
    }

    fn put_checkpoint(&self, size: u64, note: &str) -> Result<(), StorageError> {
        self.inner().checkpoints.insert(size, note.to_string());
        Ok(())
    }

    fn checkpoints(&self) -> Result<Vec<(u64, String)>, StorageError> {
        Ok(self
            .inner()
            .checkpoints
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect())
    }
}

impl<T: AuditStorage + ?Sized> AuditStorage for std::sync::Arc<T> {
    fn len(&self) -> Result<u64, StorageError> {
        (**self).len()
    }
    fn append(&self, index: u64, entry: &[u8]) -> Result<(), StorageError> {
        (**self).append(index, entry)
    }
    fn append_batch(&self, first_index: u64, entries: &[Vec<u8>]) -> Result<(), StorageError> {
        (**self).append_batch(first_index, entries)
    }
    fn read(&self, from: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        (**self).read(from, limit)
    }
    fn put_checkpoint(&self, size: u64, note: &str) -> Result<(), StorageError> {
        (**self).put_checkpoint(size, note)
    }
    fn checkpoints(&self) -> Result<Vec<(u64, String)>, StorageError> {
        (**self).checkpoints()
    }
}
