//! `[queue]`: caps, TTLs and what may wait for an offline node.

use std::collections::BTreeMap;

use super::raw::RawQueue;
use super::HARD_MAX_TTL_S;

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

/// `[queue]` checked, with its defaults; every problem goes to `errs`.
pub(super) fn resolve(q: RawQueue, errs: &mut Vec<String>) -> QueueConfig {
    let max_ttl_s = q.max_ttl_s.unwrap_or(HARD_MAX_TTL_S);
    if max_ttl_s == 0 || max_ttl_s > HARD_MAX_TTL_S {
        errs.push(format!("queue.max_ttl_s must be 1..={HARD_MAX_TTL_S}"));
    }
    let default_ttl_s = q.default_ttl_s.unwrap_or(86_400);
    if default_ttl_s == 0 || default_ttl_s > max_ttl_s {
        errs.push("queue.default_ttl_s must be 1..=queue.max_ttl_s".into());
    }
    let mut ttl_s: BTreeMap<String, u64> = [
        ("setpoint", 60),
        ("manual_override", 60),
        ("config", 86_400),
        ("schedule", 86_400),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in q.ttl_s.unwrap_or_default() {
        if v == 0 || v > max_ttl_s {
            errs.push(format!("queue.ttl_s.{k} must be 1..=queue.max_ttl_s"));
        }
        ttl_s.insert(k.to_ascii_lowercase(), v);
    }
    let max_messages_per_recipient = q.max_messages_per_recipient.unwrap_or(10_000);
    if max_messages_per_recipient == 0 {
        errs.push("queue.max_messages_per_recipient must be > 0".into());
    }
    let max_store_bytes = q.max_store_bytes.unwrap_or(256 * 1024 * 1024);
    if max_store_bytes < 1024 * 1024 {
        errs.push("queue.max_store_bytes must be at least 1 MiB".into());
    }
    let max_message_bytes = q.max_message_bytes.unwrap_or(1024 * 1024);
    if max_message_bytes == 0 || max_message_bytes > max_store_bytes {
        errs.push("queue.max_message_bytes must be 1..=queue.max_store_bytes".into());
    }
    let max_result_store_bytes = q.max_result_store_bytes.unwrap_or(max_store_bytes / 8);
    // The default never exceeds the results' budget: a small store (max_store_bytes of
    // 1 MiB) stays a valid config.
    let max_result_bytes = q
        .max_result_bytes
        .unwrap_or((256 * 1024).min(max_result_store_bytes));
    if max_result_bytes == 0 || max_result_bytes > max_result_store_bytes {
        errs.push("queue.max_result_bytes must be 1..=queue.max_result_store_bytes".into());
    }
    let reserve_free_bytes = q
        .reserve_free_bytes
        .unwrap_or(2 * max_message_bytes.max(max_result_bytes));
    let flush_batch = q.flush_batch.unwrap_or(500);
    if flush_batch == 0 || flush_batch > 1000 {
        errs.push("queue.flush_batch must be 1..=1000".into());
    }
    QueueConfig {
        max_messages_per_recipient,
        max_store_bytes,
        max_message_bytes,
        max_result_bytes,
        max_result_store_bytes,
        reserve_free_bytes,
        default_ttl_s,
        max_ttl_s,
        max_attempts: q.max_attempts.unwrap_or(100),
        flush_batch,
        not_queueable: q.not_queueable.unwrap_or_else(|| vec!["system".into()]),
        ttl_s,
    }
}
