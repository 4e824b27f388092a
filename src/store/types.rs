//! Public value types of the store API (the stored records are in `records` and
//! `counter`).

use super::codec::DecodeError;

/// A message to enqueue. `queue` names the role's mailbox (`"outbox"`, `"inbox"`,
/// `"node"`, …) and `peer` the recipient inside it; FIFO holds per `(queue, peer)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    pub queue: String,
    pub peer: String,
    pub message_id: String,
    pub payload_type: String,
    /// Higher is delivered first; equal priorities go by arrival.
    pub priority: u8,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub body: Vec<u8>,
    /// `None` = the store default; `Some(0)` = retry until expiry.
    pub max_attempts: Option<u32>,
    /// When set, the id is also remembered in the dedup window of scope `queue` until
    /// this time, in the same transaction (replay protection for received messages).
    pub dedup_until_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// Durable (fsynced) under this global sequence number.
    Queued { seq: u64 },
    /// The `message_id` is already queued, delivered, or in the dedup window; nothing
    /// was written.
    Duplicate,
}

/// Lifecycle state reported by [`super::Store::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageState {
    Queued,
    Delivering,
    Delivered,
    Expired,
    Dead,
    Rejected,
}

impl MessageState {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Queued => "queued",
            MessageState::Delivering => "delivering",
            MessageState::Delivered => "delivered",
            MessageState::Expired => "expired",
            MessageState::Dead => "dead",
            MessageState::Rejected => "rejected",
        }
    }
    pub(super) fn code(self) -> u8 {
        self as u8
    }
    pub(super) fn from_code(c: u8) -> Result<Self, DecodeError> {
        Ok(match c {
            0 => MessageState::Queued,
            1 => MessageState::Delivering,
            2 => MessageState::Delivered,
            3 => MessageState::Expired,
            4 => MessageState::Dead,
            5 => MessageState::Rejected,
            _ => return Err(DecodeError(format!("unknown state {c}"))),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageStatus {
    pub state: MessageState,
    pub queue: String,
    pub peer: String,
    pub attempts: u32,
    pub next_attempt_at_ms: u64,
    /// Why it reached a terminal state (`timeout_in_queue`, `max_attempts`, …).
    pub reason: Option<String>,
}

/// A queued (or dead-lettered) message as read back, body included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub seq: u64,
    pub queue: String,
    pub peer: String,
    pub message_id: String,
    pub payload_type: String,
    pub priority: u8,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub attempts: u32,
    /// 0 = until expiry.
    pub max_attempts: u32,
    pub next_attempt_at_ms: u64,
    pub state: MessageState,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckOutcome {
    pub message_id: String,
    /// True when this ack removed the message from the queue (it had waited there);
    /// false when it was unknown or already acknowledged.
    pub was_stored: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredMessage {
    pub message_id: String,
    pub queue: String,
    pub peer: String,
    pub payload_type: String,
    pub expires_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStat {
    pub queue: String,
    pub peer: String,
    pub depth: u64,
    /// Age of the message at the head of the queue (next to deliver).
    pub oldest_age_s: u64,
    /// Record bytes (keys + values + blob sizes) this recipient occupies.
    pub bytes: u64,
}

/// One page of a listing; pass `next` back as `after` to continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// What `outpost doctor` prints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoctorReport {
    pub engine: String,
    /// Engine-level problems (`PRAGMA integrity_check` lines for SQLite).
    pub integrity: Vec<String>,
    /// Records that fail to decode (version, CRC, layout): `tree/key: reason`.
    pub undecodable: Vec<String>,
    /// Message records whose blob file is missing.
    pub missing_blobs: Vec<String>,
    /// Blob files whose content no longer matches their hash.
    pub corrupt_blobs: Vec<String>,
    /// Records already moved aside: `tree/key: reason`.
    pub quarantined: Vec<String>,
    /// Live messages seen by the scan, and what the counters claim.
    pub messages: u64,
    pub counted: u64,
}

impl DoctorReport {
    pub fn healthy(&self) -> bool {
        self.integrity.is_empty()
            && self.undecodable.is_empty()
            && self.missing_blobs.is_empty()
            && self.corrupt_blobs.is_empty()
            && self.messages == self.counted
    }
}
