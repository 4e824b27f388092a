//! Gateway events (`GET /v1/events`): each event gets an id, increasing in the order
//! events happened, so a dashboard that reconnects — to this gateway or, with replicas
//! on a database, to another — sends `Last-Event-ID` and is replayed what it missed.
//! Also the in-process signal that a result arrived, so a `POST /v1/tool_call` that
//! waits needs no polling.
//!
//! One body for every engine: an event goes into the state's event table
//! ([`crate::gateway::storage::EventTable`]) — committed with the write it describes
//! ([`EventLog::stage`], then [`EventLog::committed`]), or by the writer task
//! ([`EventLog::publish`]) — where ids are given in commit order; subscribers are fed
//! from that table as it announces more ([`EventLog::catch_up`]), so with replicas on a
//! database each sees every replica's events, once, in one order. The newest [`REPLAY`]
//! read are kept in memory for resuming subscribers; further back is read from the
//! table ([`EventLog::missed`]).
//!
//! A slow subscriber that falls more than the channel capacity behind loses events
//! (it gets a `lagged` event saying how many, and may reconnect with its last id);
//! the gateway itself never blocks on one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc};

use super::storage::{EventRow, EventTable, StateError};

/// Capacity of the broadcast ring; see the module docs for what happens past it.
pub const CAPACITY: usize = 1024;
/// Events kept in memory for subscribers that resume with `Last-Event-ID`.
pub const REPLAY: usize = 4096;

use super::event_kinds::message_event;
pub use super::event_kinds::GatewayEvent;

/// An event with its id and time.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: u64,
    pub ts_ms: u64,
    pub event: GatewayEvent,
}

impl Event {
    pub fn sse_frame(&self) -> String {
        self.event.sse_frame(self.id, self.ts_ms)
    }
}

/// The gateway's events in this process: the hand-off of new ones to the writer, the
/// ring of those read back from the state's table, and the fan-out to subscribers.
pub struct EventLog {
    tx: broadcast::Sender<Arc<Event>>,
    ring: Mutex<Ring>,
    /// Events go to the writer task, which commits them to the state's table.
    writer: mpsc::UnboundedSender<ToWriter>,
    /// One reader of the table at a time ([`Self::catch_up`]): each row is read once.
    reading: tokio::sync::Mutex<()>,
    /// Message events this process committed, by tenant and event
    /// (`outpost_tenant_messages_total`).
    tenant_counts: Mutex<std::collections::BTreeMap<(String, &'static str), u64>>,
}

/// The events read from the table, newest last.
#[derive(Default)]
struct Ring {
    events: VecDeque<Arc<Event>>,
    /// Memory holds every event the table still had with an id in `(from, last]`;
    /// `None` until the table was first read.
    from: Option<u64>,
    /// The newest id read from the table (0 = none yet).
    last: u64,
}

/// The events of one write ([`EventLog::stage`]): each event's JSON under the key of
/// the row it describes, committed with the write (taken by it).
#[derive(Debug)]
pub struct Staged {
    ts_ms: u64,
    rows: Vec<(String, String)>,
    /// The message events among them, as `(tenant, event)`, counted once committed.
    counted: Vec<(String, &'static str)>,
}

impl Staged {
    /// What the write commits with itself: `(ts_ms, [(key, event as JSON)])`.
    pub fn take_rows(&mut self) -> (u64, Vec<(String, String)>) {
        (self.ts_ms, std::mem::take(&mut self.rows))
    }

    /// [`Self::take_rows`] of a write that causes one event.
    pub fn take_row(&mut self) -> Option<(u64, String)> {
        let (ts, rows) = self.take_rows();
        rows.into_iter().next().map(|(_, json)| (ts, json))
    }
}

/// What the writer receives.
#[derive(Debug)]
pub enum ToWriter {
    Event(u64, GatewayEvent),
    /// Answer once everything sent before it is committed.
    Flush(tokio::sync::oneshot::Sender<()>),
    /// Events were committed with a write: give them their ids soon.
    Sequence,
}

/// Rows read from the table per query.
const PAGE: usize = 1000;

impl EventLog {
    /// A log whose [`Self::publish`] sends to the writer; returns the receiving end for
    /// the writer task. Subscribers are fed what the table holds ([`Self::catch_up`]).
    pub fn new() -> (Self, mpsc::UnboundedReceiver<ToWriter>) {
        let (tx, _) = broadcast::channel(CAPACITY);
        let (wtx, wrx) = mpsc::unbounded_channel();
        (
            Self {
                tx,
                ring: Mutex::new(Ring::default()),
                writer: wtx,
                reading: tokio::sync::Mutex::new(()),
                tenant_counts: Mutex::default(),
            },
            wrx,
        )
    }

    /// The events one write causes, each under the key of the row it describes (a
    /// message id), made before the write. The flow hands [`Staged::take_rows`] to the
    /// write and [`Self::committed`] the rest after it.
    pub fn stage(
        &self,
        ts_ms: u64,
        events: impl IntoIterator<Item = (String, GatewayEvent)>,
    ) -> Result<Staged, serde_json::Error> {
        let mut counted = Vec::new();
        let rows = events
            .into_iter()
            .map(|(key, e)| {
                counted.extend(message_event(&e));
                serde_json::to_string(&e).map(|json| (key, json))
            })
            .collect::<Result<_, _>>()?;
        Ok(Staged {
            ts_ms,
            rows,
            counted,
        })
    }

    fn count(&self, events: impl IntoIterator<Item = (String, &'static str)>) {
        let mut c = self.tenant_counts.lock().unwrap_or_else(|p| p.into_inner());
        for k in events {
            *c.entry(k).or_default() += 1;
        }
    }

    /// How many message events of each `(tenant, event)` this process committed.
    pub fn tenant_counts(&self) -> Vec<((String, &'static str), u64)> {
        let c = self.tenant_counts.lock().unwrap_or_else(|p| p.into_inner());
        c.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// After the write of `staged`: it committed the events of the rows it wrote with
    /// itself; the writer gives them their ids (where the engine had none to give at
    /// the commit) and subscribers get them as the table announces them.
    pub fn committed(&self, staged: Staged) {
        self.count(staged.counted);
        self.sequence_soon();
    }

    /// An event no write carries: the writer commits it to the table.
    pub fn publish(&self, ts_ms: u64, ev: GatewayEvent) {
        tracing::debug!(event = "gateway_event", kind = ev.name());
        self.count(message_event(&ev));
        let _ = self.writer.send(ToWriter::Event(ts_ms, ev));
    }

    /// Resolves once every event published before is committed (so an answer that
    /// follows it never outruns its events); `None` once the writer is gone.
    pub fn flushed(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.writer.send(ToWriter::Flush(tx)).ok()?;
        Some(rx)
    }

    /// Events were committed with a write (without ids, on some engines): have the
    /// writer sequence them.
    pub fn sequence_soon(&self) {
        let _ = self.writer.send(ToWriter::Sequence);
    }

    /// Feed subscribers what `table` holds past what memory has read, oldest first. The
    /// first read starts at the newest [`REPLAY`] events, for subscribers that resume.
    pub async fn catch_up(&self, table: &dyn EventTable) {
        let _one = self.reading.lock().await;
        let primed = self.ring().from.is_some();
        let read = if primed {
            self.read_from(table, self.last_id()).await.map(|_| ())
        } else {
            self.prime(table).await
        };
        if let Err(e) = read {
            tracing::warn!(event = "events_unreadable", error = %e);
        }
    }

    /// The first read: the newest [`REPLAY`] events the table still has.
    async fn prime(&self, table: &dyn EventTable) -> Result<(), StateError> {
        let newest = table.newest_event().await?;
        let first = self
            .read_from(table, newest.saturating_sub(REPLAY as u64))
            .await?;
        let mut ring = self.ring();
        // Ids follow each other: what came before the first row read is gone.
        ring.from = Some(first.map_or(newest, |id| id - 1));
        ring.last = ring.last.max(newest);
        Ok(())
    }

    /// Deliver the table's events after `after`; returns the first id read.
    async fn read_from(
        &self,
        table: &dyn EventTable,
        mut after: u64,
    ) -> Result<Option<u64>, StateError> {
        let mut first = None;
        loop {
            let rows = table.events_after(after, PAGE).await?;
            let n = rows.len();
            first = first.or(rows.first().map(|r| r.0));
            let events = parse(rows, &mut after);
            self.deliver(events);
            if n < PAGE {
                return Ok(first);
            }
        }
    }

    /// The events after `after` a resuming subscriber missed: from memory, and from
    /// `table` when memory does not reach back that far.
    pub async fn missed(&self, table: &dyn EventTable, after: u64) -> Missed {
        let (mut kept, covered) = self.replay(after);
        if covered {
            return Missed {
                lagged: false,
                events: kept,
            };
        }
        let rows = match table.events_after(after, REPLAY).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(event = "events_replay_failed", error = %e);
                return Missed {
                    lagged: true,
                    events: kept,
                };
            }
        };
        let first = rows.first().map(|r| r.0).or(kept.first().map(|e| e.id));
        let mut last = after;
        let mut events: Vec<Arc<Event>> =
            parse(rows, &mut last).into_iter().map(Arc::new).collect();
        kept.retain(|e| e.id > last);
        events.extend(kept);
        // Ids follow each other: a first id past `after + 1`, or none where newer ones
        // were read, means some are gone.
        let lagged = match first {
            Some(id) => id > after.saturating_add(1),
            None => after < self.last_id(),
        };
        Missed { lagged, events }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Events read back from the table, in id order; those not yet delivered go to
    /// subscribers.
    pub fn deliver(&self, events: Vec<Event>) {
        for e in events {
            let e = Arc::new(e);
            {
                let mut ring = self.ring();
                if ring.last >= e.id {
                    continue;
                }
                ring.last = e.id;
                ring.events.push_back(e.clone());
                while ring.events.len() > REPLAY {
                    if let Some(gone) = ring.events.pop_front() {
                        ring.from = Some(gone.id);
                    }
                }
            }
            let _ = self.tx.send(e);
        }
    }

    /// The newest id read from the table (0 = none yet).
    pub fn last_id(&self) -> u64 {
        self.ring().last
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Events after `after` still in memory, oldest first, and whether the memory
    /// reaches back that far (false: some were dropped from the ring, or the table was
    /// not read yet).
    pub fn replay(&self, after: u64) -> (Vec<Arc<Event>>, bool) {
        let ring = self.ring();
        let covered = ring.from.is_some_and(|f| after >= f);
        let start = ring.events.partition_point(|e| e.id <= after);
        (ring.events.range(start..).cloned().collect(), covered)
    }
}

/// Rows of the table as events (one unreadable is skipped, and logged); `after` moves
/// to the newest id read.
fn parse(rows: Vec<EventRow>, after: &mut u64) -> Vec<Event> {
    let mut events = Vec::with_capacity(rows.len());
    for (id, ts_ms, json) in rows {
        *after = (*after).max(id);
        match serde_json::from_str::<GatewayEvent>(&json) {
            Ok(event) => events.push(Event { id, ts_ms, event }),
            Err(e) => tracing::warn!(event = "stored_event_unreadable", id, error = %e),
        }
    }
    events
}

/// What a subscriber resuming after an event id missed ([`EventLog::missed`]).
pub struct Missed {
    /// Some events are gone for good (older than the table keeps, or the table could
    /// not be read): the subscriber must be told it lagged.
    pub lagged: bool,
    /// The events it can still get, oldest first.
    pub events: Vec<Arc<Event>>,
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
