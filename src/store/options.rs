//! The store's tunables.

use super::engine::EngineKind;

/// Tunables; `Default` gives the defaults of PROTOCOL §14.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreOptions {
    pub engine: EngineKind,
    /// Per `(queue, peer)` hard cap (PROTOCOL §14).
    pub max_messages_per_recipient: u64,
    /// Global budget for queued + dead messages (records and blobs).
    pub max_store_bytes: u64,
    pub max_message_bytes: u64,
    /// Budget for stored tool results (job-id idempotency), apart from the messages':
    /// a tool caller can never take room from queued messages.
    pub max_result_store_bytes: u64,
    /// Bodies larger than this go to blob files.
    pub blob_threshold_bytes: u64,
    /// Default `max_attempts` for messages that do not set one (0 = until expiry).
    pub max_attempts: u32,
    /// How long `delivered`/`expired`/`rejected` tombstones answer `status()`.
    pub status_retention_ms: u64,
    /// The `Retry-After` hint carried by [`StoreError::QueueFull`](super::StoreError::QueueFull).
    pub queue_full_retry_after_s: u64,
    /// Decode every record (and hash every blob) on open, quarantining damage before
    /// anything is delivered. Costs one read of the store at start; when off, damage is
    /// still quarantined when a read meets it, and `doctor` finds it.
    pub verify_on_open: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            engine: EngineKind::default(),
            max_messages_per_recipient: 10_000,
            max_store_bytes: 256 * 1024 * 1024,
            max_message_bytes: 1024 * 1024,
            max_result_store_bytes: 32 * 1024 * 1024,
            blob_threshold_bytes: 64 * 1024,
            max_attempts: 100,
            status_retention_ms: 7 * 24 * 3600 * 1000,
            queue_full_retry_after_s: 30,
            verify_on_open: true,
        }
    }
}
