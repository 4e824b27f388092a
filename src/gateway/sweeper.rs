//! The gateway's main background loop: expire messages within 5 s of their deadline
//! (PROTOCOL §14), notice nodes that went quiet, append the gateway's pending audit
//! entries, prune replay caches, and prove progress to the systemd watchdog; with
//! replicas, act on what the others commit ([`follow`]).

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

/// Act on what other replicas commit (a database-backed state): wake the long-polls of
/// a node whose queue changed, end the pulls another replica superseded; after a gap in
/// the notices, wake every long-poll so each looks again. (Events every replica
/// committed reach subscribers through the event table: `event_tasks::read_events`.)
/// Runs only with replicas.
pub async fn follow(gw: Arc<Gateway>, replicas: Arc<dyn SharedState>) {
    let mut rx = replicas.notices();
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    loop {
        let first = tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            n = rx.recv() => n,
        };
        // Take every notice already waiting before waking anyone: a lagging channel
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
    }
}

/// What a run of notices asks for.
#[derive(Default)]
struct Wake {
    nodes: std::collections::BTreeSet<String>,
    /// The newest pull that began, per node.
    pulls: std::collections::BTreeMap<String, u64>,
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
            Ok(Notice::Resync) | Err(RecvError::Lagged(_)) => {
                self.all = true;
                self.nodes.clear();
            }
            Err(RecvError::Closed) => return false,
        }
        true
    }
}

/// `WATCHDOG=1` only while the sweeper keeps completing passes; `STATUS=` with depth.
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
    fn a_run_of_notices_wakes_each_node_once() {
        let mut w = Wake::default();
        for n in ["a", "b", "a"] {
            assert!(w.add(Ok(Notice::Queued(n.into()))));
        }
        assert!(!w.all);
        assert_eq!(w.nodes.iter().collect::<Vec<_>>(), ["a", "b"]);
        w.add(Ok(Notice::Pulled("a".into(), 4)));
        w.add(Ok(Notice::Pulled("a".into(), 3)));
        assert_eq!(w.pulls.get("a"), Some(&4));
    }

    #[test]
    fn a_gap_wakes_everyone() {
        let mut w = Wake::default();
        w.add(Ok(Notice::Queued("a".into())));
        w.add(Err(RecvError::Lagged(3)));
        w.add(Ok(Notice::Queued("b".into())));
        assert!(w.all && w.nodes.is_empty());
        let mut r = Wake::default();
        w.add(Ok(Notice::Resync));
        assert!(r.add(Ok(Notice::Resync)) && r.all);
        assert!(!r.add(Err(RecvError::Closed)));
    }
}
