//! The append-only audit log over a storage seam.
//!
//! [`AuditLog`] assigns indexes, builds canonical entries, keeps the Merkle
//! [`Frontier`] and signs checkpoints; [`AuditStorage`] is where the bytes live (the
//! store in production, [`MemoryAuditStorage`](super::MemoryAuditStorage) in tests).
//! The log never reads the clock: callers pass `now_ms`. Appends from many threads are
//! group-committed (see [`group`](super::group)).

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::{Condvar, Mutex};

use ed25519_dalek::SigningKey;

use super::checkpoint::{origin_for, sign_checkpoint};
use super::entry::AuditRecord;
use super::merkle::{leaf_hash, Frontier, Hash};
use super::upload::SyncBatch;

/// Errors a storage implementation reports; boxed so the store keeps its own types.
pub type StorageError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where audit entries and checkpoints are kept.
///
/// Contract:
/// - Entries are dense: indexes `0..len()` exist, nothing else. `append`/`append_batch`
///   are only called with `index == len()` and never concurrently with each other (the
///   log has at most one batch in flight); reads and checkpoints may run alongside.
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
    fn is_empty(&self) -> Result<bool, StorageError> {
        Ok(self.len()? == 0)
    }
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
pub(super) const PAGE: usize = 1024;

/// One caller's records waiting for the next group commit.
pub(super) struct Pending {
    pub(super) ticket: u64,
    pub(super) records: Vec<AuditRecord>,
    pub(super) now_ms: u64,
}

/// A batch handed to storage whose durability is not known yet.
pub(super) struct Unconfirmed {
    pub(super) first: u64,
    pub(super) hashes: Vec<Hash>,
    pub(super) durable: bool,
}

/// What [`AuditLog::append_submit`] returns: each entry's `(index, leaf hash)`, what
/// `submit` returned, and the batch's ticket.
pub type Submitted<R> = (Vec<(u64, Hash)>, R, Ticket);

/// Names a submitted batch for [`AuditLog::confirm`] / [`AuditLog::mark_failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    generation: u64,
    first: u64,
}

pub(super) struct State {
    /// Covers durable entries only: it advances once storage confirmed a batch (and every
    /// batch before it). Sizes, roots, checkpoints and sync batches are taken from it.
    pub(super) frontier: Frontier,
    /// `frontier` plus every batch submitted and not yet confirmed: the next index.
    pub(super) tip: Frontier,
    /// Submitted batches in index order, oldest first.
    pub(super) unconfirmed: VecDeque<Unconfirmed>,
    /// Bumped when the tip is rebuilt from storage after a failure; tickets of an older
    /// generation are ignored.
    pub(super) generation: u64,
    pub(super) poisoned: bool,
    /// A batch is being written (by the thread that took `queue`).
    pub(super) writing: bool,
    pub(super) next_ticket: u64,
    pub(super) queue: Vec<Pending>,
    /// Finished tickets → their `(index, leaf)` pairs or the failure message.
    pub(super) done: HashMap<u64, Result<Vec<(u64, Hash)>, String>>,
}

impl State {
    /// Registers a batch written at the tip.
    pub(super) fn begin(&mut self, first: u64, hashes: Vec<Hash>) -> Ticket {
        for h in &hashes {
            self.tip.push(*h);
        }
        self.unconfirmed.push_back(Unconfirmed {
            first,
            hashes,
            durable: false,
        });
        Ticket {
            generation: self.generation,
            first,
        }
    }

    pub(super) fn confirm(&mut self, ticket: Ticket) {
        if ticket.generation != self.generation {
            return;
        }
        if let Some(b) = self
            .unconfirmed
            .iter_mut()
            .find(|b| b.first == ticket.first)
        {
            b.durable = true;
        }
        while self.unconfirmed.front().is_some_and(|b| b.durable) {
            if let Some(b) = self.unconfirmed.pop_front() {
                for h in b.hashes {
                    self.frontier.push(h);
                }
            }
        }
    }
}

/// The node's tamper-evident log. Cheap to share behind an `Arc`.
pub struct AuditLog<S: AuditStorage> {
    pub(super) storage: S,
    pub(super) state: Mutex<State>,
    pub(super) wake: Condvar,
}

/// Stream stored entries from `from` up to (excluding) storage key `end`, in pages,
/// calling `f(storage_key, bytes)`.
pub(super) fn stream<S: AuditStorage>(
    storage: &S,
    from: u64,
    end: u64,
    mut f: impl FnMut(u64, &[u8]) -> Result<(), AuditError>,
) -> Result<(), AuditError> {
    let mut next = from;
    loop {
        let want = end.saturating_sub(next).min(PAGE as u64) as usize;
        if want == 0 {
            return Ok(());
        }
        let page = storage.read(next, want).map_err(AuditError::Storage)?;
        let n = page.len();
        for (key, bytes) in &page {
            if *key >= end {
                return Ok(());
            }
            f(*key, bytes)?;
            next = key.saturating_add(1);
        }
        if n < want {
            return Ok(());
        }
    }
}

/// Extend `frontier` with every stored entry after it, insisting the indexes are dense
/// and the storage's length agrees.
fn replay<S: AuditStorage>(storage: &S, mut frontier: Frontier) -> Result<Frontier, AuditError> {
    stream(storage, frontier.size(), u64::MAX, |key, bytes| {
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
            "storage reports {len} entries but the frontier covers {}",
            frontier.size()
        )));
    }
    Ok(frontier)
}

impl<S: AuditStorage> AuditLog<S> {
    /// Open the log, rebuilding the frontier by streaming every stored entry.
    ///
    /// This trusts the stored bytes (it only hashes them) but insists the indexes are
    /// dense, so a missing row is reported now rather than silently shifting every
    /// later index. Full checking is [`AuditLog::verify`].
    pub fn open(storage: S) -> Result<Self, AuditError> {
        Self::open_from(storage, Frontier::new())
    }

    /// Open from a frontier persisted earlier ([`AuditLog::frontier`]), hashing only the
    /// entries appended after it — so startup time does not grow with the log.
    ///
    /// A wrong snapshot cannot hide tampering: [`AuditLog::verify`] recomputes from the
    /// entries alone, and checkpoints signed from a wrong frontier fail it.
    pub fn open_from(storage: S, snapshot: Frontier) -> Result<Self, AuditError> {
        let frontier = replay(&storage, snapshot)?;
        Ok(Self {
            storage,
            state: Mutex::new(State {
                tip: frontier.clone(),
                unconfirmed: VecDeque::new(),
                generation: 0,
                frontier,
                poisoned: false,
                writing: false,
                next_ticket: 0,
                queue: Vec::new(),
                done: HashMap::new(),
            }),
            wake: Condvar::new(),
        })
    }

    /// A copy of the current frontier, to persist for a fast [`AuditLog::open_from`]
    /// (store `size()` and `subtree_hashes()`).
    pub fn frontier(&self) -> Frontier {
        self.lock().frontier.clone()
    }

    pub fn storage(&self) -> &S {
        &self.storage
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
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

    /// Group-commit append: under the lock, build the entries and hand their bytes to
    /// `submit`, which must queue them for durable, in-order storage *without waiting*
    /// (e.g. the store's writer channel, which refuses an entry whose index is not the
    /// stored length, so a failed batch fails every batch queued behind it). The caller
    /// waits for durability outside the lock — so concurrent callers share one fsync —
    /// and then reports the outcome with [`AuditLog::confirm`] or
    /// [`AuditLog::mark_failed`], whether or not anyone still waits for the answer.
    ///
    /// Until confirmed, the entries only move the tip (the next index): `size`, `root`,
    /// `checkpoint` and `sync_batch` never cover an entry that is not durable.
    pub fn append_submit<R>(
        &self,
        records: Vec<AuditRecord>,
        now_ms: u64,
        submit: impl FnOnce(u64, Vec<Vec<u8>>) -> R,
    ) -> Result<Submitted<R>, AuditError> {
        let mut st = self.lock();
        if st.poisoned {
            // A submission failed: storage is the truth. Every batch before the failed
            // one was processed (storage writes in order) and every batch after it is
            // refused, so the stored log extends the durable frontier exactly.
            let durable = replay(&self.storage, st.frontier.clone())?;
            st.frontier = durable.clone();
            st.tip = durable;
            st.unconfirmed.clear();
            st.generation += 1;
            st.poisoned = false;
        }
        let first = st.tip.size();
        let bytes: Vec<Vec<u8>> = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                super::AuditEntry::from_record(first + i as u64, now_ms, r).canonical_bytes()
            })
            .collect();
        let hashes: Vec<Hash> = bytes.iter().map(|b| leaf_hash(b)).collect();
        let r = submit(first, bytes);
        let ticket = st.begin(first, hashes.clone());
        let out = hashes
            .into_iter()
            .enumerate()
            .map(|(i, h)| (first + i as u64, h))
            .collect();
        Ok((out, r, ticket))
    }

    /// The batch of `ticket` is durable: the durable frontier advances over it and over
    /// every later batch already confirmed, in index order.
    pub fn confirm(&self, ticket: Ticket) {
        self.lock().confirm(ticket);
    }

    /// The batch of `ticket` did not become durable: the next append rebuilds the tip
    /// from storage (entries are dense, so nothing after it was stored either).
    pub fn mark_failed(&self, ticket: Ticket) {
        let mut st = self.lock();
        if st.generation == ticket.generation {
            st.poisoned = true;
        }
    }

    /// Entries submitted but not yet confirmed durable (for tests and status).
    pub fn unconfirmed(&self) -> u64 {
        let st = self.lock();
        st.tip.size() - st.frontier.size()
    }

    /// Sign and store a checkpoint of the current tree; returns the note.
    pub fn checkpoint(&self, key: &SigningKey, node_id: &str) -> Result<String, AuditError> {
        // Snapshot under the lock, sign and store outside it: appends need not wait for
        // the signature or the checkpoint write.
        let (size, root) = {
            let st = self.lock();
            (st.frontier.size(), st.frontier.root())
        };
        let note = sign_checkpoint(key, &origin_for(node_id), size, &root);
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

    /// Up to `limit` stored entries from index `from` (canonical bytes).
    pub fn read_entries(&self, from: u64, limit: usize) -> Result<Vec<Vec<u8>>, AuditError> {
        let rows = self
            .storage
            .read(from, limit)
            .map_err(AuditError::Storage)?;
        Ok(rows.into_iter().map(|(_, b)| b).collect())
    }

    /// The next upload for a gateway that confirmed `confirmed_size` entries: at most
    /// `max_entries` entries and a checkpoint (signed and stored) for exactly the tree
    /// they extend to.
    ///
    /// When everything fits, the checkpoint is for the current tree. When the backlog is
    /// longer than `max_entries`, the root at the batch's end is recomputed by streaming
    /// the log from the start (O(size) reads, only while catching up). Entries below the
    /// snapshot size never change, so the lock is held only to take the snapshot.
    pub fn sync_batch(
        &self,
        confirmed_size: u64,
        max_entries: usize,
        key: &SigningKey,
        node_id: &str,
    ) -> Result<SyncBatch, AuditError> {
        let (current, current_root) = {
            let st = self.lock();
            (st.frontier.size(), st.frontier.root())
        };
        if confirmed_size > current {
            return Err(AuditError::Corrupt(format!(
                "gateway confirmed {confirmed_size} entries but the log has {current}"
            )));
        }
        let size = current.min(confirmed_size.saturating_add(max_entries as u64));
        let root = if size == current {
            current_root
        } else {
            self.root_at(size)?
        };
        let entries = self.read_entries(confirmed_size, (size - confirmed_size) as usize)?;
        if entries.len() as u64 != size - confirmed_size {
            return Err(AuditError::Corrupt(
                "entries missing below the tree size".into(),
            ));
        }
        let checkpoint = sign_checkpoint(key, &origin_for(node_id), size, &root);
        self.storage
            .put_checkpoint(size, &checkpoint)
            .map_err(AuditError::Storage)?;
        Ok(SyncBatch {
            from: confirmed_size,
            size,
            entries,
            checkpoint,
        })
    }

    /// Root of the first `size` stored entries, by streaming them.
    pub fn root_at(&self, size: u64) -> Result<Hash, AuditError> {
        let mut f = Frontier::new();
        stream(&self.storage, 0, size, |_, bytes| {
            f.push(leaf_hash(bytes));
            Ok(())
        })?;
        if f.size() != size {
            return Err(AuditError::Corrupt(format!(
                "log has fewer than {size} entries"
            )));
        }
        Ok(f.root())
    }

    /// Write entries with index ≥ `since` as JSON Lines (the canonical bytes, one per
    /// line). Returns how many were written.
    pub fn export_jsonl(&self, since: u64, out: &mut impl Write) -> Result<u64, AuditError> {
        let mut n = 0u64;
        stream(&self.storage, since, u64::MAX, |_, bytes| {
            out.write_all(bytes)?;
            out.write_all(b"\n")?;
            n += 1;
            Ok(())
        })?;
        out.flush()?;
        Ok(n)
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
