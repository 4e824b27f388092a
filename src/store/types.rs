//! Public value types of the store API and their on-disk records.

use super::codec::{seal, unseal, DecodeError, R, W};

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
    fn code(self) -> u8 {
        self as u8
    }
    fn from_code(c: u8) -> Result<Self, DecodeError> {
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

/// The body of a record: inline, or a content-addressed blob file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Inline(Vec<u8>),
    Blob { sha256: [u8; 32], len: u64 },
}

impl Body {
    /// Body size in bytes, whether inline or in a blob file.
    pub fn size(&self) -> u64 {
        match self {
            Body::Inline(b) => b.len() as u64,
            Body::Blob { len, .. } => *len,
        }
    }
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

/// Per-recipient counters, persisted so depth and bytes need no scan, and the
/// recipient's expiry-ordered lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    pub depth: u64,
    pub bytes: u64,
    pub lane: Lane,
}

/// A recipient with nothing queued. Its lane is closed: only an enqueue into the empty
/// queue opens one (`Lane::admit`), so every lane with members was started by its first
/// member, whose seq names it (`Lane::start_seq`).
impl Default for Counter {
    fn default() -> Self {
        Counter {
            depth: 0,
            bytes: 0,
            lane: Lane::closed(),
        }
    }
}

/// A recipient's expiry-ordered lane (schema 3): the messages of one priority that
/// arrived in expiry order, give or take [`LANE_SLACK_MS`], need no entry in the expiry
/// index, because the sweeper finds the expired ones by reading the lane from its head.
/// With one TTL per payload type that is nearly every message, and it saves the
/// index's pages on every commit (docs/BENCHMARKS-store.md). A message that does not
/// fit (another priority, or an expiry earlier than the lane's tail) is indexed as
/// before. Those of the lane's priority sit between members as *strays*; after
/// [`LANE_STRAYS_MAX`] of them the lane closes to later arrivals, so a sweeper's read
/// never steps over a long run of indexed messages. The lane starts afresh when the
/// recipient's queue is empty.
///
/// The invariant the sweeper relies on: within the lane's priority, in queue (seq)
/// order, each lane message expires no earlier than every lane message before it, minus
/// `LANE_SLACK_MS`. So once the sweeper meets a lane message that expires more than the
/// slack after now, no later lane message has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    /// Priority of the lane's messages (set by the first message of an empty queue).
    pub prio: u8,
    /// The latest expiry of a message that joined the lane.
    pub tail_ms: u64,
    /// Lane messages still queued (a quarantined record is not subtracted, so this may
    /// overcount; it only decides whether the sweeper reads the lane at all).
    pub members: u64,
    /// Messages with this seq or later never join (`u64::MAX` = open). The sweeper stops
    /// reading here.
    pub closed_at_seq: u64,
    /// While the lane has members: no member, present or still to join, expires before
    /// this (joiners expire no earlier than `tail_ms` minus the slack), so the sweeper
    /// leaves the lane alone until then. Also the lane's key in the due tree.
    pub due_ms: u64,
    /// Seq of the message that started this lane (0: none did): tells this lane from an
    /// earlier one of the same recipient.
    pub start_seq: u64,
    /// Indexed messages of the lane's priority queued between its members (arrived out
    /// of order, or requeued into the lane's range): what a sweep may have to step over,
    /// at most [`LANE_STRAYS_MAX`] before the lane closes.
    pub strays: u64,
}

/// How far out of expiry order a message may arrive and still join a lane: producers
/// racing to the writer, or two senders' clocks a little apart.
pub const LANE_SLACK_MS: u64 = 2_000;

/// How many out-of-order messages a lane tolerates among its members before it closes:
/// one message with a shorter TTL (a command among telemetry) must not end a lane, and a
/// sweep's read of a lane never steps over more than about this many strays (plus dead
/// letters requeued into it).
pub const LANE_STRAYS_MAX: u64 = 256;

impl Default for Lane {
    fn default() -> Self {
        Lane {
            prio: 0,
            tail_ms: 0,
            members: 0,
            closed_at_seq: u64::MAX,
            due_ms: 0,
            start_seq: 0,
            strays: 0,
        }
    }
}

impl Lane {
    /// Whether a new message (seq, priority, expiry) joins the lane of a recipient whose
    /// queue currently holds `depth` messages; updates the lane either way. A first
    /// member sets `due_ms` (the caller adds the lane to the due tree).
    pub fn admit(&mut self, depth: u64, seq: u64, prio: u8, expires_at_ms: u64) -> bool {
        if depth == 0 {
            *self = Lane {
                prio,
                start_seq: seq,
                ..Lane::default()
            };
        }
        if prio != self.prio || seq >= self.closed_at_seq {
            return false;
        }
        if expires_at_ms.saturating_add(LANE_SLACK_MS) < self.tail_ms {
            // Out of order: indexed, and a stray among the members the sweeper may have
            // to step over. Past the budget, the lane takes nobody from here on.
            if self.strays < LANE_STRAYS_MAX {
                self.strays += 1;
            } else {
                self.closed_at_seq = seq;
            }
            return false;
        }
        self.tail_ms = self.tail_ms.max(expires_at_ms);
        if self.members == 0 {
            // <= tail - slack, which bounds every later joiner too.
            self.due_ms = expires_at_ms.saturating_sub(LANE_SLACK_MS);
        }
        self.members += 1;
        true
    }

    /// Whether a removed (or requeued) message that is not a member counts among the
    /// lane's strays: the lane's priority, inside the lane's seq range.
    pub fn is_stray(&self, in_lane: bool, prio: u8, seq: u64) -> bool {
        !in_lane
            && self.start_seq > 0
            && prio == self.prio
            && seq >= self.start_seq
            && seq < self.closed_at_seq
    }

    /// A lane closed to every new message until the queue is empty: what a counter from
    /// before schema 3 (whose messages are all indexed) reads as.
    pub fn closed() -> Self {
        Lane {
            closed_at_seq: 0,
            ..Lane::default()
        }
    }
}

impl Counter {
    /// Adds (or with negative deltas, removes) messages and bytes, never below zero.
    pub fn adjust(&mut self, depth: i64, bytes: i64) {
        self.depth = self.depth.saturating_add_signed(depth);
        self.bytes = self.bytes.saturating_add_signed(bytes);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(65));
        w.u64(self.depth)
            .u64(self.bytes)
            .u8(self.lane.prio)
            .u64(self.lane.tail_ms)
            .u64(self.lane.members)
            .u64(self.lane.closed_at_seq)
            .u64(self.lane.due_ms)
            .u64(self.lane.start_seq)
            .u64(self.lane.strays);
        w.0
    }
    pub fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let mut r = R(v);
        let depth = r.u64()?;
        let bytes = r.u64()?;
        let lane = if r.0.is_empty() {
            Lane::closed()
        } else {
            Lane {
                prio: r.u8()?,
                tail_ms: r.u64()?,
                members: r.u64()?,
                closed_at_seq: r.u64()?,
                due_ms: r.u64()?,
                start_seq: r.u64()?,
                strays: r.u64()?,
            }
        };
        r.end()?;
        Ok(Counter { depth, bytes, lane })
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

        /// What the sweeper relies on (see `Lane`): in queue order, every admitted message
        /// of the lane's priority expires no earlier than each admitted one before it,
        /// minus the slack; out-of-order ones are strays, and past the stray budget
        /// nothing more is admitted.
        #[test]
        fn a_lane_admits_only_messages_in_expiry_order(
            arrivals in proptest::collection::vec((0u8..2, 0u64..20_000), 1..600),
        ) {
            let mut lane = Lane::default();
            let mut admitted: Vec<u64> = Vec::new();
            let mut strays = 0u64;
            let first_prio = arrivals[0].0;
            for (seq, &(prio, expires)) in arrivals.iter().enumerate() {
                let seq = seq as u64 + 1;
                let depth = seq - 1; // nothing leaves the queue here
                let tail_before = lane.tail_ms;
                let closed_before = lane.closed_at_seq != u64::MAX;
                if lane.admit(depth, seq, prio, expires) {
                    prop_assert!(!closed_before, "admitted after the lane closed");
                    prop_assert_eq!(prio, first_prio);
                    if let Some(max) = admitted.iter().max() {
                        prop_assert!(expires + LANE_SLACK_MS >= *max);
                    }
                    admitted.push(expires);
                } else if prio == first_prio && !closed_before {
                    prop_assert!(expires + LANE_SLACK_MS < tail_before);
                    if lane.closed_at_seq == u64::MAX {
                        strays += 1;
                        prop_assert!(lane.is_stray(false, prio, seq));
                    } else {
                        prop_assert_eq!(strays, LANE_STRAYS_MAX, "closes only past the budget");
                        prop_assert!(!lane.is_stray(false, prio, seq));
                    }
                }
            }
            prop_assert_eq!(lane.members, admitted.len() as u64);
            prop_assert_eq!(lane.strays, strays);
        }
    }

    #[test]
    fn an_empty_queue_starts_a_fresh_lane() {
        let mut lane = Lane::default();
        assert!(lane.admit(0, 1, 5, 10_000));
        assert!(!lane.admit(1, 2, 5, 1_000), "out of order: indexed");
        assert_eq!(lane.strays, 1);
        assert!(lane.admit(2, 3, 5, 20_000), "a stray does not end the lane");
        assert!(!lane.admit(3, 4, 0, 20_000), "another priority");
        lane.strays = LANE_STRAYS_MAX;
        assert!(!lane.admit(4, 5, 5, 1_000), "one stray too many");
        assert!(!lane.admit(5, 6, 5, 30_000), "closed until empty");
        assert!(lane.admit(0, 7, 0, 1_000), "empty again: a new lane");
        assert_eq!(
            (lane.prio, lane.members, lane.tail_ms, lane.strays),
            (0, 1, 1_000, 0)
        );
    }

    #[test]
    fn counters_round_trip_and_old_counters_read_as_closed_lanes() {
        let c = Counter {
            depth: 3,
            bytes: 2_000,
            lane: Lane {
                prio: 4,
                tail_ms: 99,
                members: 2,
                closed_at_seq: 17,
                due_ms: 5,
                start_seq: 11,
                strays: 3,
            },
        };
        assert_eq!(Counter::decode(&c.encode()).unwrap(), c);
        let mut old = 3u64.to_le_bytes().to_vec();
        old.extend_from_slice(&2_000u64.to_le_bytes());
        let read = Counter::decode(&old).unwrap();
        assert_eq!(
            (read.depth, read.bytes, read.lane),
            (3, 2_000, Lane::closed())
        );
        let mut lane = read.lane;
        assert!(
            !lane.admit(3, 9, 0, u64::MAX),
            "nothing joins until the queue is empty"
        );
    }
}
