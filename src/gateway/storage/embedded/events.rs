//! The events dashboards follow ([`EventTable`]) on the embedded store: one process
//! writes them, so they live in its memory — the newest [`KEPT`], each given its id as it
//! is committed (ids start at the store's clock at open, in microseconds, so they keep
//! growing across restarts while the clock does) and announced at once. The rows a
//! queued message or an ack carries are appended after the store's commit, for what it
//! wrote.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use super::Embedded;
use crate::gateway::storage::{EventRow, EventTable, ForNode, Fut, Queued, StateError};
use crate::store::Batch;

/// Events kept for readers that resume (as many as the gateway's replay ring).
pub const KEPT: usize = 4096;

/// The newest [`KEPT`] events and the next id.
pub(super) struct EventRows {
    rows: Mutex<Rows>,
    announced: tokio::sync::watch::Sender<u64>,
}

struct Rows {
    kept: VecDeque<EventRow>,
    next_id: u64,
}

impl EventRows {
    /// The first event gets `first_id` (at least 1).
    pub(super) fn new(first_id: u64) -> Self {
        let first_id = first_id.max(1);
        Self {
            rows: Mutex::new(Rows {
                kept: VecDeque::new(),
                next_id: first_id,
            }),
            announced: tokio::sync::watch::Sender::new(first_id - 1),
        }
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Give `events` the next ids, in order, keep them, and announce them.
    fn append(&self, events: impl IntoIterator<Item = (u64, String)>) {
        let newest = {
            let mut rows = self.rows();
            let before = rows.next_id;
            for (ts_ms, json) in events {
                let id = rows.next_id;
                rows.next_id += 1;
                rows.kept.push_back((id, ts_ms, json));
            }
            if rows.next_id == before {
                return;
            }
            let over = rows.kept.len().saturating_sub(KEPT);
            rows.kept.drain(..over);
            rows.next_id - 1
        };
        self.announced.send_replace(newest);
    }

    fn after(&self, after: u64, limit: usize) -> Vec<EventRow> {
        let rows = self.rows();
        // Ids follow each other: the first after `after` is found by subtraction.
        let first = rows.kept.front().map_or(0, |r| r.0);
        let skip = after.saturating_add(1).saturating_sub(first);
        rows.kept
            .iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .take(limit)
            .cloned()
            .collect()
    }
}

impl EventTable for EventRows {
    fn append_events(&self, events: Vec<(u64, String)>) -> Fut<'_, ()> {
        self.append(events);
        Box::pin(async { Ok(()) })
    }

    fn sequence_events(&self) -> Fut<'_, u64> {
        // Every event got its id as it was committed.
        Box::pin(async { Ok(0) })
    }

    fn events_after(&self, after: u64, limit: usize) -> Fut<'_, Vec<EventRow>> {
        let rows = self.after(after, limit);
        Box::pin(async move { Ok(rows) })
    }

    fn newest_event(&self) -> Fut<'_, u64> {
        let newest = self.rows().next_id - 1;
        Box::pin(async move { Ok(newest) })
    }

    fn events_announced(&self) -> tokio::sync::watch::Receiver<u64> {
        self.announced.subscribe()
    }
}

impl Embedded {
    /// Queue `msg` after the changes of `before`, in one transaction; its event is
    /// appended once that committed, unless nothing was written (a duplicate).
    pub(super) async fn enqueue_for_node(
        &self,
        mut msg: ForNode,
        before: Batch,
    ) -> Result<Queued, StateError> {
        let event = msg.event.take();
        let queued = self.enqueue(self.new_message(msg), before).await?;
        if queued == Queued::Queued {
            self.events.append(event);
        }
        Ok(queued)
    }

    /// After an ack's commit: the events (`(ts_ms, [(message id, JSON)])`) of the ids
    /// it removed, in the order given.
    pub(super) fn acked_events<'a>(
        &self,
        removed: impl IntoIterator<Item = &'a str>,
        (ts_ms, events): (u64, Vec<(String, String)>),
    ) {
        if events.is_empty() {
            return;
        }
        let removed: HashSet<&str> = removed.into_iter().collect();
        self.events.append(
            events
                .into_iter()
                .filter(|(id, _)| removed.contains(id.as_str()))
                .map(|(_, json)| (ts_ms, json)),
        );
    }
}
