//! The fleet page's chart: messages queued, delivered and expired per 5-minute bucket
//! over the last hour, counted from the event log kept in memory (the last
//! [`REPLAY`] events since this process started: on a busy or freshly started gateway
//! they cover less than the hour, which the chart then says).

use std::sync::Arc;

use crate::gateway::events::{Event, GatewayEvent, REPLAY};

pub const BUCKET_MS: u64 = 5 * 60_000;
pub const BUCKETS: usize = 12;

/// Counts per bucket, oldest bucket first; the last bucket ends at `now`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chart {
    pub queued: [u64; BUCKETS],
    pub delivered: [u64; BUCKETS],
    pub expired: [u64; BUCKETS],
    /// The events in memory reach back only to `covered_from_ms`, inside the hour (the
    /// gateway started since, or older events left the ring).
    pub partial: bool,
    pub covered_from_ms: u64,
}

impl Chart {
    /// `covered_from_ms`: the events in memory are all there are from then on
    /// ([`covered_from`]).
    pub fn of(events: &[Arc<Event>], covered_from_ms: u64, now_ms: u64) -> Chart {
        let start = now_ms.saturating_sub(BUCKET_MS * BUCKETS as u64);
        let mut c = Chart {
            partial: covered_from_ms > start,
            covered_from_ms,
            ..Chart::default()
        };
        for e in events {
            if e.ts_ms < start || e.ts_ms > now_ms {
                continue;
            }
            let i = (((e.ts_ms - start) / BUCKET_MS) as usize).min(BUCKETS - 1);
            match e.event {
                GatewayEvent::Queued { .. } => c.queued[i] += 1,
                GatewayEvent::Delivered { .. } => c.delivered[i] += 1,
                GatewayEvent::Expired { .. } => c.expired[i] += 1,
                _ => {}
            }
        }
        c
    }

    /// The largest count in any series (the chart's scale).
    pub fn max(&self) -> u64 {
        self.queued
            .iter()
            .chain(&self.delivered)
            .chain(&self.expired)
            .copied()
            .max()
            .unwrap_or(0)
    }
}

/// Since when the events in memory are complete: this process's start, unless the
/// ring is full (older events were dropped), then its oldest event.
pub fn covered_from(events: &[Arc<Event>], started_ms: u64) -> u64 {
    match events.first() {
        Some(first) if events.len() >= REPLAY - 1 => first.ts_ms.max(started_ms),
        _ => started_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts_ms: u64, event: GatewayEvent) -> Arc<Event> {
        Arc::new(Event {
            id: ts_ms,
            ts_ms,
            event,
        })
    }

    fn queued(ts: u64) -> Arc<Event> {
        ev(
            ts,
            GatewayEvent::Queued {
                message_id: "m".into(),
                node_id: "node:a".into(),
                payload_type: "COMMAND".into(),
                expires_at_ms: 0,
            },
        )
    }

    #[test]
    fn counts_each_kind_in_its_five_minute_bucket_and_ignores_the_rest() {
        let now = 10 * 3_600_000;
        let start = now - 3_600_000;
        let events = vec![
            queued(start - 1), // before the hour
            queued(start),     // first bucket
            queued(start + BUCKET_MS - 1),
            queued(start + BUCKET_MS), // second
            ev(
                now - 1,
                GatewayEvent::Delivered {
                    message_id: "m".into(),
                    node_id: "node:a".into(),
                    was_stored: true,
                },
            ),
            ev(
                now,
                GatewayEvent::Expired {
                    message_id: "m".into(),
                    node_id: "node:a".into(),
                    reason: "timeout_in_queue".into(),
                },
            ),
            ev(
                now - 5,
                GatewayEvent::NodeOnline {
                    node_id: "node:a".into(),
                },
            ),
            queued(now + 1), // a clock step: not in the future of the chart
        ];
        let c = Chart::of(&events, 0, now);
        assert_eq!(c.queued[0], 2);
        assert_eq!(c.queued[1], 1);
        assert_eq!(c.queued.iter().sum::<u64>(), 3);
        assert_eq!(c.delivered[BUCKETS - 1], 1);
        assert_eq!(c.expired[BUCKETS - 1], 1);
        assert_eq!(c.max(), 2);
        assert!(!c.partial);
    }

    #[test]
    fn says_when_the_events_in_memory_do_not_cover_the_hour() {
        let now = 10 * 3_600_000;
        let recent = vec![queued(now - 60_000)];
        // Started ten minutes ago: the hour is only partly known.
        let from = covered_from(&recent, now - 600_000);
        assert_eq!(from, now - 600_000);
        assert!(Chart::of(&recent, from, now).partial);
        // Up for a day, nothing dropped: an hour with one event is the whole truth.
        let from = covered_from(&recent, now - 5 * 3_600_000);
        assert!(!Chart::of(&recent, from, now).partial);
        // A full ring: complete only from its oldest event on.
        let full: Vec<_> = (0..REPLAY as u64)
            .map(|i| queued(now - 1_000 + i / 10))
            .collect();
        let from = covered_from(&full, 0);
        assert_eq!(from, now - 1_000);
        let c = Chart::of(&full, from, now);
        assert!(c.partial);
        assert_eq!(c.queued[BUCKETS - 1], REPLAY as u64);
    }
}
