//! `outpost audit verify`: recompute the tree from the stored entries alone and check
//! every stored checkpoint against it.

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;

use super::checkpoint::{origin_for, parse_and_verify_any, CheckpointError};
use super::log::{stream, AuditError, AuditLog, AuditStorage};
use super::merkle::{leaf_hash, Frontier, Hash};
use super::upload::claimed_index;

/// Outcome of [`AuditLog::verify`]: empty `failures` means the log checks out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub entries: u64,
    pub root: Hash,
    pub checkpoints_checked: usize,
    /// Entries `0..covered` are committed to by a checkpoint whose signature and root
    /// both verified; the rest are not yet covered by any signed checkpoint.
    pub covered: u64,
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

impl<S: AuditStorage> AuditLog<S> {
    /// Recompute the tree from every stored entry and check every stored checkpoint.
    ///
    /// Does not touch the in-memory frontier: it answers "do the stored bytes hold up",
    /// which is what `outpost audit verify` promises.
    ///
    /// `keys` is every signing key the log's owner has had (oldest first): a checkpoint
    /// verifies with any of them.
    pub fn verify(&self, keys: &[VerifyingKey], node_id: &str) -> Result<VerifyReport, AuditError> {
        let origin = origin_for(node_id);
        let mut failures = Vec::new();
        // size → expected root, from every checkpoint whose signature checks out.
        let mut expected: BTreeMap<u64, Hash> = BTreeMap::new();
        let checkpoints = self.storage.checkpoints().map_err(AuditError::Storage)?;
        let checkpoints_checked = checkpoints.len();
        for (size, note) in &checkpoints {
            match parse_and_verify_any(note, keys, &origin) {
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
        let mut covered = 0;
        let check_root = |f: &Frontier, failures: &mut Vec<VerifyFailure>, covered: &mut u64| {
            if let Some(root) = expected.get(&f.size()) {
                if *root != f.root() {
                    failures.push(VerifyFailure::RootMismatch { size: f.size() });
                } else {
                    *covered = f.size();
                }
            }
        };
        check_root(&frontier, &mut failures, &mut covered);
        stream(&self.storage, 0, u64::MAX, |key, bytes| {
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
            check_root(&frontier, &mut failures, &mut covered);
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
            covered,
            failures,
        })
    }
}
