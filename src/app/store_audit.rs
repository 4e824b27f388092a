//! The audit log's storage seam, implemented on the store's audit rows.

use crate::audit::{AuditStorage, StorageError};
use crate::store::{Store, StoreError, Submitted};

#[derive(Clone)]
pub struct StoreAudit {
    store: Store,
}

impl StoreAudit {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

/// Wait for a submitted write from sync code, also when called on a tokio worker
/// (the audit seam is synchronous by contract).
pub fn wait_blocking<T>(s: Submitted<T>) -> Result<T, StoreError> {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| s.wait())
        }
        _ => s.wait(),
    }
}

impl AuditStorage for StoreAudit {
    fn len(&self) -> Result<u64, StorageError> {
        Ok(self.store.audit_len()?)
    }
    fn append(&self, index: u64, entry: &[u8]) -> Result<(), StorageError> {
        Ok(wait_blocking(
            self.store.audit_append(index, entry.to_vec()),
        )?)
    }
    fn read(&self, from: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        Ok(self.store.audit_read(from, limit)?)
    }
    fn put_checkpoint(&self, size: u64, note: &str) -> Result<(), StorageError> {
        Ok(wait_blocking(
            self.store.checkpoint_put(size, note.to_string()),
        )?)
    }
    fn checkpoints(&self) -> Result<Vec<(u64, String)>, StorageError> {
        Ok(self.store.checkpoints()?)
    }
}
