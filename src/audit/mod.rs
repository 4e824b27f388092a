//! The node's tamper-evident audit log (PROTOCOL §13).
//!
//! - [`merkle`]: RFC 6962 hashing, the incremental [`Frontier`], consistency proofs (pure).
//! - [`entry`]: [`AuditEntry`] and its canonical JSON bytes (pure).
//! - [`checkpoint`]: C2SP signed-note checkpoints, Ed25519 (pure).
//! - [`log`]: [`AuditLog`] over the [`AuditStorage`] seam; [`group`]: group commit;
//!   [`verify`]: `audit verify`.
//! - [`upload`]: node → gateway sync batches and the gateway's pure extension check.
//! - [`memory`]: an in-memory [`AuditStorage`] for tests.
//!
//! Nothing here reads the clock or touches the network; storage I/O happens only through
//! the [`AuditStorage`] trait the store implements.

pub mod checkpoint;
pub mod entry;
pub mod group;
pub mod log;
pub mod memory;
pub mod merkle;
pub mod upload;
pub mod verify;

#[cfg(test)]
mod tests;

pub use checkpoint::{
    origin_for, parse_and_verify, parse_and_verify_any, sign_checkpoint, sign_note, verify_note,
    Checkpoint, CheckpointError,
};
pub use entry::{
    json_sha256_hex, sha256_hex, to_hex, AuditEntry, AuditEvent, AuditOutcome, AuditRecord,
};
pub use log::{AuditError, AuditLog, AuditStorage, StorageError, Ticket};
pub use memory::MemoryAuditStorage;
pub use merkle::{
    consistency_proof, consistency_proof_from_leaves, empty_root, leaf_hash, node_hash, root,
    verify_consistency, Frontier, Hash,
};
pub use upload::{verify_extension, Extension, ExtensionError, SyncBatch};
pub use verify::{VerifyFailure, VerifyReport};
