//! `[queue]`: caps, TTLs and what may wait for an offline node.

use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub max_messages_per_recipient: u64,
    pub max_store_bytes: u64,
    pub max_message_bytes: u64,
    /// Largest tool result the node keeps for `job_id` idempotency; a larger one fails
    /// the call with `result_too_large`.
    pub max_result_bytes: u64,
    /// Budget for all stored tool results, apart from `max_store_bytes`.
    pub max_result_store_bytes: u64,
    /// Free space on the data directory's filesystem below which tool calls are refused
    /// before they run (507), so callers cannot take the last of it from inbound
    /// envelopes and the audit log.
    pub reserve_free_bytes: u64,
    pub default_ttl_s: u64,
    pub max_ttl_s: u64,
    pub max_attempts: u32,
    pub flush_batch: u32,
    pub not_queueable: Vec<String>,
    pub ttl_s: BTreeMap<String, u64>,
}

impl QueueConfig {
    /// TTL for a payload or command type: the per-type value, else the default, capped
    /// at `max_ttl_s`; a caller's own `ttl_s` may shorten it but never lengthen past the cap.
    pub fn ttl_for(&self, kind: &str, requested_s: Option<u64>) -> u64 {
        let base = self
            .ttl_s
            .get(&kind.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.default_ttl_s);
        requested_s.unwrap_or(base).min(self.max_ttl_s)
    }

    /// The TTL for a message of `kind` with the caller's `requested_s`: refused when it
    /// is 0 or above `max_ttl_s` (never silently clamped), the per-kind default when absent.
    pub fn checked_ttl(&self, kind: &str, requested_s: Option<u64>) -> Result<u64, TtlError> {
        match requested_s {
            Some(0) => Err(TtlError::Zero),
            Some(r) if r > self.max_ttl_s => Err(TtlError::TooLong {
                requested: r,
                max: self.max_ttl_s,
            }),
            r => Ok(self.ttl_for(kind, r)),
        }
    }

    pub fn is_queueable(&self, command_type: &str) -> bool {
        !self.not_queueable.iter().any(|c| c == command_type)
    }
}

/// A caller's `ttl_s` that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TtlError {
    #[error("ttl_s must be > 0")]
    Zero,
    #[error("ttl_s {requested} is above queue.max_ttl_s ({max}); ask for at most {max}")]
    TooLong { requested: u64, max: u64 },
}
