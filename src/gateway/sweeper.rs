//! The gateway's main background loop: expire messages within 5 s of their deadline
//! (PROTOCOL §14), notice nodes that went quiet, append the gateway's pending audit
//! entries, prune replay caches, and prove progress to the systemd watchdog.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::events::GatewayEvent;
use super::state::Gateway;
use super::storage::SharedState;
use crate::service::Notifier;
use crate::telemetry::MessageEvent;

/// Sweep at least this often; expiry is therefore never later than this + one sweep.
pub const TICK: Duration = Duration::from_secs(1);
/// At most one events sequencing run per replica in this time (shared state).
const SEQUENCE_EVERY: Duration = Duration::from_millis(20);

pub async fn run(gw: Arc<Gateway>) {
    loop {
        let now = gw.now_ms();
        match gw.state.sweep_expired().await {
            Ok(expired) => {
                for m in expired {
                    let reason = crate::store::REASON_TIMEOUT;
                    MessageEvent {
                        queue: &m.queue,
                        event: "expired",
                        peer: &m.peer,
                        message_id: &m.message_id,
                        reason: Some(reason),
                    }
                    .emit(&gw.metrics);
                    gw.publish(GatewayEvent::Expired {
                        message_id: m.message_id,
                        node_id: m.peer,
                        reason: reason.to_string(),
                    });
                }
            }
            Err(e) => tracing::warn!(event = "sweep_failed", error = %e),
        }
        gw.check_offline().await;
        // Audit entries a crash, or a failed append, left pending (any replica's).
        super::own_audit::append_pending(&gw).await;
        gw.node_auth().prune_replays(now);
        gw.progress.fetch_add(1, Ordering::Relaxed);
        tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// `WATCHDOG=1` only while the sweeper keeps completing passes; `STATUS=` with depth.
/// Act on what other replicas commit (a database-backed state): wake the long-polls of
/// a node whose queue changed, feed subscribers the events every replica committed;
/// after a gap in the notices, wake every long-poll so each looks again. Also looks for
/// new events every [`TICK`] in case a notice was lost. Runs only with replicas.
pub async fn follow(gw: Arc<Gateway>, replicas: Arc<dyn SharedState>) {
    let replicas = &*replicas;
    let mut rx = replicas.notices();
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    // Start with the newest REPLAY events in memory, for subscribers that resume.
    let mut after = loop {
        match replicas.append_events(Vec::new()).await {
            Ok(newest) => break newest.saturating_sub(super::events::REPLAY as u64),
            Err(e) => tracing::warn!(event = "events_unreadable", error = %e),
        }
        tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            _ = tokio::time::sleep(TICK) => {}
        }
    };
    let mut read = true;
    loop {
        if read {
            after = read_events(&gw, replicas, after).await;
        }
        let first = tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            _ = tokio::time::sleep(TICK) => {
                read = true;
                continue;
            }
            n = rx.recv() => n,
        };
        // Take every notice already waiting before touching the database again: one
        // events read per notice would fall behind a busy fleet, and a lagging channel
        // means waking every long-poll (each then asks the database for its queue).
        let mut wake = Wake::default();
        if !wake.add(first) {
            return;
        }
        loop {
            match rx.try_recv() {
                Ok(n) => {
                    wake.add(Ok(n));
                }
                Err(TryRecvError::Lagged(n)) => {
                    wake.add(Err(RecvError::Lagged(n)));
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
        for (node, pull) in &wake.pulls {
            gw.pull_begun(node, *pull);
        }
        if wake.all {
            gw.wake_all();
        } else {
            for node in &wake.nodes {
                gw.wake_node(node);
            }
        }
        // Only long-polls to wake: no events to read until the next notice says so.
        read = wake.all || wake.events;
    }
}

/// What a run of notices asks for.
#[derive(Default)]
struct Wake {
    nodes: std::collections::BTreeSet<String>,
    /// The newest pull that began, per node.
    pulls: std::collections::BTreeMap<String, u64>,
    events: bool,
    /// Notices were missed (lag, reconnect): every long-poll looks again.
    all: bool,
}

impl Wake {
    /// Record one notice; false when the channel is closed.
    fn add(
        &mut self,
        n: Result<super::storage::Notice, tokio::sync::broadcast::error::RecvError>,
    ) -> bool {
        use super::storage::Notice;
        use tokio::sync::broadcast::error::RecvError;
        match n {
            Ok(Notice::Queued(node)) => {
                if !self.all {
                    self.nodes.insert(node);
                }
            }
            Ok(Notice::Pulled(node, n)) => {
                let newest = self.pulls.entry(node).or_default();
                *newest = (*newest).max(n);
            }
            Ok(Notice::Events(_)) => self.events = true,
            Ok(Notice::Resync) | Err(RecvError::Lagged(_)) => {
                self.all = true;
                self.events = true;
                self.nodes.clear();
            }
            Err(RecvError::Closed) => return false,
        }
        true
    }
}

/// Deliver committed events after `after` to subscribers; returns the newest id read.
async fn read_events(gw: &Gateway, replicas: &dyn SharedState, mut after: u64) -> u64 {
    use super::events::{Event, GatewayEvent};
    loop {
        let rows = match replicas.events_after(after, 1000).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(event = "events_unreadable", error = %e);
                return after;
            }
        };
        let n = rows.len();
        let mut events = Vec::with_capacity(n);
        for (id, ts_ms, json) in rows {
            after = after.max(id);
            match serde_json::from_str::<GatewayEvent>(&json) {
                Ok(event) => events.push(Event { id, ts_ms, event }),
                Err(e) => tracing::warn!(event = "stored_event_unreadable", id, error = %e),
            }
        }
        gw.events.deliver(events);
        if n < 1000 {
            return after;
        }
    }
}

/// Commit published events to the shared state in batches (one transaction for all
/// that queued up meanwhile), retrying while the database is away. Runs only with
/// replicas.
pub async fn write_events(gw: Arc<Gateway>, replicas: Arc<dyn SharedState>) {
    let replicas = &*replicas;
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
                _ = tokio::time::sleep_until(wake_at) => Some(super::events::ToWriter::Sequence),
                m = rx.recv() => m,
            };
            match first {
                Some(m) => w.take(m),
                None => return w.last_write(&mut rx, replicas).await,
            }
        }
        while w.pending.len() < 1000 {
            match rx.try_recv() {
                Ok(m) => w.take(m),
                Err(_) => break,
            }
        }
        let written = if w.pending.is_empty() {
            Ok(0)
        } else {
            replicas.append_events(w.pending.clone()).await
        };
        let go_on = match written {
            Ok(_) => w.written(&gw, replicas).await,
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
    fn take(&mut self, m: super::events::ToWriter) {
        use super::events::ToWriter;
        match m {
            ToWriter::Event(ts, ev) => self.pending.push(encode((ts, ev))),
            ToWriter::Flush(tx) => self.waiting.push(tx),
            ToWriter::Sequence => self.sequence = true,
        }
    }

    /// Shutdown: what is already queued still goes out, and is sequenced.
    async fn last_write(
        mut self,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<super::events::ToWriter>,
        replicas: &dyn SharedState,
    ) {
        while let Ok(m) = rx.try_recv() {
            self.take(m);
        }
        if !self.pending.is_empty() {
            let _ = replicas
                .append_events(std::mem::take(&mut self.pending))
                .await;
        }
        let _ = replicas.sequence_events().await;
    }

    /// The batch is committed (durable): whoever waits may answer now, and a sequencing
    /// run goes when due. `false` once shutdown interrupts the wait after a failed run.
    async fn written(&mut self, gw: &Gateway, replicas: &dyn SharedState) -> bool {
        self.sequence |= !self.pending.is_empty();
        self.pending.clear();
        for w in self.waiting.drain(..) {
            let _ = w.send(());
        }
        // Let the nudges of a busy moment gather: each run is a commit, and the
        // sequencers of all replicas take turns on one row.
        if self.sequence && self.last_sequenced.elapsed() >= SEQUENCE_EVERY {
            self.last_sequenced = tokio::time::Instant::now();
            match replicas.sequence_events().await {
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
    async fn not_written(&mut self, gw: &Gateway, e: &super::storage::StateError) -> bool {
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

fn encode((ts_ms, ev): (u64, super::events::GatewayEvent)) -> (u64, String) {
    (ts_ms, serde_json::to_string(&ev).unwrap_or_default())
}

pub async fn watchdog(gw: Arc<Gateway>) {
    let Some(every) = Notifier.watchdog_interval() else {
        return;
    };
    let mut last = u64::MAX;
    loop {
        let p = gw.progress.load(Ordering::Relaxed);
        if !gw.state.durable() {
            // No write can be made durable any more: let systemd restart us.
            tracing::error!(
                event = "store_sync_failed",
                "an fsync of the store failed; withholding watchdog ping so systemd restarts outpost"
            );
        } else if p != last {
            Notifier.watchdog();
            last = p;
            if let Ok(stats) = gw.state.queue_stats().await {
                let depth: u64 = stats.iter().map(|s| s.depth).sum();
                Notifier.status(&format!("gateway: {depth} messages queued"));
            }
        }
        tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Wake;
    use crate::gateway::storage::Notice;
    use tokio::sync::broadcast::error::RecvError;

    #[test]
    fn a_run_of_notices_wakes_each_node_once_and_reads_events_once() {
        let mut w = Wake::default();
        for n in ["a", "b", "a"] {
            assert!(w.add(Ok(Notice::Queued(n.into()))));
        }
        assert!(!w.events && !w.all);
        assert_eq!(w.nodes.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(w.add(Ok(Notice::Events(7))));
        assert!(w.events && !w.all);
        w.add(Ok(Notice::Pulled("a".into(), 4)));
        w.add(Ok(Notice::Pulled("a".into(), 3)));
        assert_eq!(w.pulls.get("a"), Some(&4));
    }

    #[test]
    fn a_gap_wakes_everyone_and_rereads() {
        let mut w = Wake::default();
        w.add(Ok(Notice::Queued("a".into())));
        w.add(Err(RecvError::Lagged(3)));
        w.add(Ok(Notice::Queued("b".into())));
        assert!(w.all && w.events && w.nodes.is_empty());
        let mut r = Wake::default();
        w.add(Ok(Notice::Resync));
        assert!(r.add(Ok(Notice::Resync)) && r.all);
        assert!(!r.add(Err(RecvError::Closed)));
    }
}
