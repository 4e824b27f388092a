//! An in-memory [`AuditStorage`]: for tests and for tools that verify an exported log.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::log::{AuditStorage, StorageError};

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
