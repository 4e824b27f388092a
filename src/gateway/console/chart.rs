//! The fleet page's chart: messages queued, delivered and expired per 5-minute bucket
//! over the last hour, counted from the event log kept in memory (the last
//! [`crate::gateway::events::REPLAY`] events: on a busy gateway they may cover less
//! than the hour, which the chart then says).

use std::sync::Arc;

use crate::gateway::events::{Event, GatewayEvent};

pub const BUCKET_MS: u64 = 5 * 60_000;
pub const BUCKETS: usize = 12;

/// Counts per bucket, oldest bucket first; the last bucket ends at `now`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chart {
    pub queued: [u64; BUCKETS],
    pub delivered: [u64; BUCKETS],
    pub expired: [u64; BUCKETS],
    /// The events in memory do not reach back the whole hour (some were dropped).
    pub partial: bool,
}

impl Chart {
    /// `complete`: the events in memory are all this gateway has published since it
    /// started (nothing dropped from the ring).
    pub fn of(events: &[Arc<Event>], complete: bool, now_ms: u64) -> Chart {
        let start = now_ms.saturating_sub(BUCKET_MS * BUCKETS as u64);
        let mut c = Chart {
            partial: !complete && events.first().is_some_and(|e| e.ts_ms > start),
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
        let c = Chart::of(&events, true, now);
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
        assert!(Chart::of(&recent, false, now).partial);
        // Nothing dropped: an hour with one event is the whole truth.
        assert!(!Chart::of(&recent, true, now).partial);
        let old = vec![queued(now - 2 * 3_600_000), queued(now - 60_000)];
        assert!(!Chart::of(&old, false, now).partial);
    }
}
