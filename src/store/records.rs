//! The stored records of messages and their ids: [`MsgRecord`] (a queued or dead
//! message), [`IdEntry`] (the id tree: a live message's key or a tombstone) and
//! [`StatusRecord`] (a tombstone's content) — part of the on-disk format.

use super::codec::{seal, unseal, DecodeError, R, W};
use super::types::{MessageState, MessageStatus, StoredMessage};

/// The body of a record: inline, or a content-addressed blob file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Inline(Vec<u8>),
    Blob { sha256: [u8; 32], len: u64 },
}

/// The trailing byte of a record in an expiry-ordered lane.
const IN_LANE: u8 = 1;

/// The stored form of a queued or dead message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgRecord {
    pub seq: u64,
    pub queue: String,
    pub peer: String,
    pub message_id: String,
    pub payload_type: String,
    pub priority: u8,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub attempts: u32,
    pub max_attempts: u32,
    pub next_attempt_at_ms: u64,
    pub state: MessageState,
    pub body: Body,
    /// In its recipient's expiry-ordered lane ([`Lane`]) and therefore without an entry
    /// in the expiry index. Stored as one trailing byte when set; records without it
    /// (all records before schema 3) are indexed.
    pub in_lane: bool,
}

impl MsgRecord {
    /// `encode().len()` without encoding (what the record was charged on enqueue:
    /// every field but the strings and the body is fixed width).
    pub fn encoded_len(&self) -> usize {
        let fixed = 5 + 8 + 1 + 8 + 8 + 4 + 4 + 8 + 1 + 4 * 4 + 1;
        let body = match &self.body {
            Body::Inline(b) => 4 + b.len(),
            Body::Blob { .. } => 4 + 32 + 8,
        };
        fixed
            + self.queue.len()
            + self.peer.len()
            + self.message_id.len()
            + self.payload_type.len()
            + body
            + usize::from(self.in_lane)
    }

    pub fn encode(&self) -> Vec<u8> {
        // One allocation of the final size (`encoded_len` counts the seal's header).
        let mut w = W(Vec::with_capacity(self.encoded_len()));
        w.u64(self.seq)
            .u8(self.priority)
            .u64(self.created_at_ms)
            .u64(self.expires_at_ms)
            .u32(self.attempts)
            .u32(self.max_attempts)
            .u64(self.next_attempt_at_ms)
            .u8(self.state.code())
            .str(&self.queue)
            .str(&self.peer)
            .str(&self.message_id)
            .str(&self.payload_type);
        match &self.body {
            Body::Inline(b) => {
                w.u8(0).bytes(b);
            }
            Body::Blob { sha256, len } => {
                w.u8(1).bytes(sha256).u64(*len);
            }
        }
        if self.in_lane {
            w.u8(IN_LANE);
        }
        seal(w)
    }

    pub fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        Self::decode_inner(v, true)
    }

    /// Everything but an inline body, which comes back empty (so `encoded_len` is not
    /// the stored length): for removals, which need the record's fields, not its bytes.
    pub fn decode_meta(v: &[u8]) -> Result<Self, DecodeError> {
        Self::decode_inner(v, false)
    }

    fn decode_inner(v: &[u8], with_body: bool) -> Result<Self, DecodeError> {
        let mut r = R(unseal(v)?);
        let seq = r.u64()?;
        let priority = r.u8()?;
        let created_at_ms = r.u64()?;
        let expires_at_ms = r.u64()?;
        let attempts = r.u32()?;
        let max_attempts = r.u32()?;
        let next_attempt_at_ms = r.u64()?;
        let state = MessageState::from_code(r.u8()?)?;
        let queue = r.string()?;
        let peer = r.string()?;
        let message_id = r.string()?;
        let payload_type = r.string()?;
        let body = match r.u8()? {
            0 => {
                let b = r.bytes()?;
                Body::Inline(if with_body { b.to_vec() } else { Vec::new() })
            }
            1 => {
                let h: [u8; 32] = r
                    .bytes()?
                    .try_into()
                    .map_err(|_| DecodeError("bad blob hash length".into()))?;
                Body::Blob {
                    sha256: h,
                    len: r.u64()?,
                }
            }
            k => return Err(DecodeError(format!("unknown body kind {k}"))),
        };
        let in_lane = match r.0 {
            [] => false,
            [IN_LANE] => true,
            _ => return Err(DecodeError("unknown trailing flags".into())),
        };
        Ok(Self {
            seq,
            queue,
            peer,
            message_id,
            payload_type,
            priority,
            created_at_ms,
            expires_at_ms,
            attempts,
            max_attempts,
            next_attempt_at_ms,
            state,
            body,
            in_lane,
        })
    }

    pub fn into_stored(self, body: Vec<u8>) -> StoredMessage {
        StoredMessage {
            seq: self.seq,
            queue: self.queue,
            peer: self.peer,
            message_id: self.message_id,
            payload_type: self.payload_type,
            priority: self.priority,
            created_at_ms: self.created_at_ms,
            expires_at_ms: self.expires_at_ms,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            next_attempt_at_ms: self.next_attempt_at_ms,
            state: self.state,
            body,
        }
    }
}

/// One entry of the id tree (`T_BYID`, schema 3), which knows every message id the store
/// has seen until its tombstone is pruned:
/// - a live (queued or delivering) message: its queue key, which never starts with a
///   zero byte (queue names are non-empty and NUL-free);
/// - a finished one (delivered, expired, dead, rejected): [`TOMBSTONE`] then the sealed
///   [`StatusRecord`].
///
/// One tree for both, instead of an id index plus a tombstone tree (schema 2): an ack
/// rewrites the id's entry in place instead of deleting from one tree and inserting into
/// another, and the duplicate check of an enqueue is one lookup.
#[derive(Debug)]
pub enum IdEntry {
    Live(Vec<u8>),
    Finished(Result<StatusRecord, DecodeError>),
}

/// First byte of a tombstone in the id tree (see [`IdEntry`]).
pub const TOMBSTONE: u8 = 0;

impl IdEntry {
    pub fn parse(v: Vec<u8>) -> Self {
        match v.split_first() {
            Some((&TOMBSTONE, rest)) => IdEntry::Finished(StatusRecord::decode(rest)),
            _ => IdEntry::Live(v),
        }
    }
}

/// The stored form of a terminal (or dead) status: a tombstone kept for `status()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusRecord {
    pub state: MessageState,
    pub queue: String,
    pub peer: String,
    pub attempts: u32,
    pub next_attempt_at_ms: u64,
    pub reason: String,
    /// When the tombstone may be pruned (`u64::MAX` = kept until purged).
    pub keep_until_ms: u64,
    /// For dead letters: the key of the record in the dead tree.
    pub dead_seq: u64,
}

impl StatusRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W::default();
        w.u8(self.state.code())
            .u32(self.attempts)
            .u64(self.next_attempt_at_ms)
            .u64(self.keep_until_ms)
            .u64(self.dead_seq)
            .str(&self.reason)
            .str(&self.queue)
            .str(&self.peer);
        seal(w)
    }

    /// The id tree's value for this status (see [`IdEntry`]).
    pub fn tombstone(&self) -> Vec<u8> {
        let sealed = self.encode();
        let mut v = Vec::with_capacity(sealed.len() + 1);
        v.push(TOMBSTONE);
        v.extend_from_slice(&sealed);
        v
    }

    pub fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let mut r = R(unseal(v)?);
        let state = MessageState::from_code(r.u8()?)?;
        let attempts = r.u32()?;
        let next_attempt_at_ms = r.u64()?;
        let keep_until_ms = r.u64()?;
        let dead_seq = r.u64()?;
        let reason = r.string()?;
        let queue = r.string()?;
        let peer = r.string()?;
        r.end()?;
        Ok(Self {
            state,
            queue,
            peer,
            attempts,
            next_attempt_at_ms,
            reason,
            keep_until_ms,
            dead_seq,
        })
    }

    pub fn to_status(&self) -> MessageStatus {
        MessageStatus {
            state: self.state,
            queue: self.queue.clone(),
            peer: self.peer.clone(),
            attempts: self.attempts,
            next_attempt_at_ms: self.next_attempt_at_ms,
            reason: if self.reason.is_empty() {
                None
            } else {
                Some(self.reason.clone())
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn id_entries_tell_live_keys_from_tombstones(
            queue in "[^\u{0}]{1,20}",
            peer in "[^\u{0}]{1,20}",
            prio in any::<u8>(),
            seq in any::<u64>(),
            reason in ".{0,30}",
            keep in any::<u64>(),
        ) {
            let key = crate::store::codec::msg_key(&queue, &peer, prio, seq);
            match IdEntry::parse(key.clone()) {
                IdEntry::Live(k) => prop_assert_eq!(k, key),
                other => prop_assert!(false, "live key read as {:?}", other),
            }
            let st = StatusRecord {
                state: MessageState::Delivered,
                queue,
                peer,
                attempts: 3,
                next_attempt_at_ms: 0,
                reason,
                keep_until_ms: keep,
                dead_seq: seq,
            };
            match IdEntry::parse(st.tombstone()) {
                IdEntry::Finished(Ok(back)) => prop_assert_eq!(back, st),
                other => prop_assert!(false, "tombstone read as {:?}", other),
            }
        }

        #[test]
        fn encoded_len_matches_encode(
            peer in "[a-z0-9-]{0,40}",
            id in "[A-Za-z0-9-]{1,64}",
            ty in "[A-Z_]{0,20}",
            body in proptest::collection::vec(any::<u8>(), 0..2048),
            blob in any::<bool>(),
            attempts in any::<u32>(),
            in_lane in any::<bool>(),
        ) {
            let rec = MsgRecord {
                seq: 7,
                queue: "outbox".into(),
                peer,
                message_id: id,
                payload_type: ty,
                priority: 3,
                created_at_ms: 1,
                expires_at_ms: 2,
                attempts,
                max_attempts: 9,
                next_attempt_at_ms: 4,
                state: MessageState::Delivering,
                body: if blob {
                    Body::Blob { sha256: [1; 32], len: body.len() as u64 }
                } else {
                    Body::Inline(body)
                },
                in_lane,
            };
            prop_assert_eq!(rec.encoded_len(), rec.encode().len());
            prop_assert_eq!(MsgRecord::decode(&rec.encode()).unwrap(), rec);
        }
    }
}
