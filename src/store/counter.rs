//! Per-recipient counters and the expiry-ordered lane they carry — part of the on-disk
//! format. How the sweeper reads a lane is in `lanes`.

use super::codec::{DecodeError, R, W};

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
/// index's pages on every commit (DECISIONS D3). A message that does not
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
