//! The event log's two tasks, the same on every engine: the writer commits what the
//! gateway publishes to the state's event table and has the events committed with writes
//! sequenced ([`write_events`]); the reader feeds subscribers from that table as it
//! announces more ([`read_events`]).

use std::sync::Arc;
use std::time::Duration;

use super::events::{GatewayEvent, ToWriter};
use super::state::Gateway;
use super::storage::{EventTable, StateError};
use super::sweeper::TICK;

/// At most one events sequencing run per replica in this time.
const SEQUENCE_EVERY: Duration = Duration::from_millis(20);

/// Feed subscribers from the state's event table: at start its newest events (for
/// subscribers that resume), then each time it announces more — at once, no polling —
/// and every [`TICK`] in case an announcement was lost.
pub async fn read_events(gw: Arc<Gateway>) {
    let table = gw.state.events();
    let mut announced = table.events_announced();
    loop {
        announced.mark_unchanged();
        gw.events.catch_up(table).await;
        tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            Ok(()) = announced.changed() => {}
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// Commit published events to the state's event table in batches (one transaction for
/// all that queued up meanwhile), retrying while the database is away, and have the
/// events committed with writes sequenced.
pub async fn write_events(gw: Arc<Gateway>) {
    let table = gw.state.events();
    let Some(mut rx) = gw
        .event_writer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    else {
        return;
    };
    let mut w = EventBatch {
        pending: Vec::new(),
        waiting: Vec::new(),
        sequence: true,
        last_sequenced: tokio::time::Instant::now(),
    };
    loop {
        let due = w.last_sequenced + SEQUENCE_EVERY;
        if w.pending.is_empty()
            && w.waiting.is_empty()
            && (!w.sequence || due > tokio::time::Instant::now())
        {
            // Idle: wait for events, or until a sequencing run is due (at the latest
            // every TICK, for events a replica that died left without ids).
            let wake_at = if w.sequence {
                due
            } else {
                w.last_sequenced + TICK
            };
            let first = tokio::select! {
                _ = gw.shutdown.cancelled() => None,
                _ = tokio::time::sleep_until(wake_at) => Some(ToWriter::Sequence),
                m = rx.recv() => m,
            };
            match first {
                Some(m) => w.take(m),
                None => return w.last_write(&mut rx, table).await,
            }
        }
        while w.pending.len() < 1000 {
            match rx.try_recv() {
                Ok(m) => w.take(m),
                Err(_) => break,
            }
        }
        let written = if w.pending.is_empty() {
            Ok(())
        } else {
            table.append_events(w.pending.clone()).await
        };
        let go_on = match written {
            Ok(()) => w.written(&gw, table).await,
            Err(e) => w.not_written(&gw, &e).await,
        };
        if !go_on {
            return;
        }
    }
}

/// [`write_events`]' books: what waits to be written, who waits for it, and whether a
/// sequencing run is due.
struct EventBatch {
    pending: Vec<(u64, String)>,
    waiting: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Events committed without ids (by us or, if it died before sequencing them, by
    /// another replica) wait for a sequencing run: after each write, on request, and
    /// once every TICK while idle.
    sequence: bool,
    last_sequenced: tokio::time::Instant,
}

impl EventBatch {
    /// One message from the gateway: an event to write, a flush to answer once what
    /// came before it is committed, or a request for a sequencing run.
    fn take(&mut self, m: ToWriter) {
        match m {
            ToWriter::Event(ts, ev) => self.pending.push(encode((ts, ev))),
            ToWriter::Flush(tx) => self.waiting.push(tx),
            ToWriter::Sequence => self.sequence = true,
        }
    }

    /// Shutdown: what is already queued still goes out, and is sequenced.
    async fn last_write(
        mut self,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<ToWriter>,
        table: &dyn EventTable,
    ) {
        while let Ok(m) = rx.try_recv() {
            self.take(m);
        }
        if !self.pending.is_empty() {
            let _ = table.append_events(std::mem::take(&mut self.pending)).await;
        }
        let _ = table.sequence_events().await;
    }

    /// The batch is committed (durable): whoever waits may answer now, and a sequencing
    /// run goes when due. `false` once shutdown interrupts the wait after a failed run.
    async fn written(&mut self, gw: &Gateway, table: &dyn EventTable) -> bool {
        self.sequence |= !self.pending.is_empty();
        self.pending.clear();
        for w in self.waiting.drain(..) {
            let _ = w.send(());
        }
        // Let the nudges of a busy moment gather: each run is a commit, and the
        // sequencers of all replicas take turns on one row. (Subscribers do not wait for
        // it where the engine gives ids at commit: they follow the table's announcements.)
        if self.sequence && self.last_sequenced.elapsed() >= SEQUENCE_EVERY {
            self.last_sequenced = tokio::time::Instant::now();
            match table.sequence_events().await {
                Ok(_) => self.sequence = false,
                Err(e) => {
                    tracing::warn!(event = "events_not_sequenced", error = %e);
                    tokio::select! {
                        _ = gw.shutdown.cancelled() => return false,
                        _ = tokio::time::sleep(TICK) => {}
                    }
                }
            }
        }
        true
    }

    /// The write failed (the database away): the batch is kept for the next try, its
    /// oldest dropped beyond 100,000, and the writer waits a TICK. `false` once shutdown
    /// interrupts the wait.
    async fn not_written(&mut self, gw: &Gateway, e: &StateError) -> bool {
        tracing::warn!(event = "events_not_written", queued = self.pending.len(), error = %e);
        if self.pending.len() > 100_000 {
            let drop = self.pending.len() - 100_000;
            self.pending.drain(..drop);
            tracing::warn!(event = "events_dropped", count = drop);
        }
        tokio::select! {
            _ = gw.shutdown.cancelled() => false,
            _ = tokio::time::sleep(TICK) => true,
        }
    }
}

fn encode((ts_ms, ev): (u64, GatewayEvent)) -> (u64, String) {
    (ts_ms, serde_json::to_string(&ev).unwrap_or_default())
}
