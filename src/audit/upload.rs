//! Audit sync, both ends (PROTOCOL §13.4).
//!
//! The node sends the entries after the gateway's last confirmed size plus a checkpoint
//! signed for exactly the extended tree ([`SyncBatch`], built by
//! [`AuditLog::sync_batch`](super::AuditLog::sync_batch)). The gateway holds only the
//! [`Frontier`] of what it already accepted and calls [`verify_extension`]: because the
//! new root is computed *on top of* the old frontier, a matching signed root proves the
//! new tree extends the old one — no consistency proof needs to travel. A gap, an entry
//! claiming the wrong index, a checkpoint for another size or root: refused, nothing
//! merged.

use ed25519_dalek::VerifyingKey;

use super::checkpoint::{origin_for, parse_and_verify_any, Checkpoint, CheckpointError};
use super::merkle::{leaf_hash, Frontier, Hash};

/// What the node uploads: entries `[from, size)` and a note signed for `size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncBatch {
    pub from: u64,
    pub size: u64,
    /// Canonical entry bytes, index `from + i` at position `i`.
    pub entries: Vec<Vec<u8>>,
    pub checkpoint: String,
}

/// The gateway's verdict on an accepted upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// The frontier to persist for the next upload.
    pub frontier: Frontier,
    pub checkpoint: Checkpoint,
    pub leaf_hashes: Vec<Hash>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtensionError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("entry at position {position} is not a JSON object with an integer index")]
    Unreadable { position: u64 },
    #[error("entry at position {position} claims index {claimed} (gap or reorder)")]
    IndexMismatch { position: u64, claimed: u64 },
    #[error("checkpoint is for size {checkpoint} but the entries extend the log to {computed}")]
    SizeMismatch { checkpoint: u64, computed: u64 },
    #[error("checkpoint root does not match the recomputed tree of size {size}")]
    RootMismatch { size: u64 },
}

/// Check that `entries` continue the tree summarised by `known` and that `note` is the
/// node's signature over the result, by one of `keys` (its key, and the one a rotation
/// retired while that key's grace lasts). Pure; the caller stores on `Ok` only.
pub fn verify_extension<B: AsRef<[u8]>>(
    known: &Frontier,
    entries: &[B],
    note: &str,
    keys: &[VerifyingKey],
    node_id: &str,
) -> Result<Extension, ExtensionError> {
    let checkpoint = parse_and_verify_any(note, keys, &origin_for(node_id))?;
    let mut frontier = known.clone();
    let mut leaf_hashes = Vec::with_capacity(entries.len());
    for e in entries {
        let bytes = e.as_ref();
        let position = frontier.size();
        match claimed_index(bytes) {
            Some(claimed) if claimed == position => {}
            Some(claimed) => return Err(ExtensionError::IndexMismatch { position, claimed }),
            None => return Err(ExtensionError::Unreadable { position }),
        }
        let h = leaf_hash(bytes);
        frontier.push(h);
        leaf_hashes.push(h);
    }
    if checkpoint.size != frontier.size() {
        return Err(ExtensionError::SizeMismatch {
            checkpoint: checkpoint.size,
            computed: frontier.size(),
        });
    }
    if checkpoint.root != frontier.root() {
        return Err(ExtensionError::RootMismatch {
            size: frontier.size(),
        });
    }
    Ok(Extension {
        frontier,
        checkpoint,
        leaf_hashes,
    })
}

/// The `index` an entry claims, read without knowing every event kind.
pub(crate) fn claimed_index(bytes: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    v.as_object()?.get("index")?.as_u64()
}
