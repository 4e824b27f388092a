//! The gateway's main background loop: expire messages within 5 s of their deadline
//! (SPEC §4.5), notice nodes that went quiet, prune replay caches, and prove progress to
//! the systemd watchdog.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::events::GatewayEvent;
use super::state::Gateway;
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
        gw.check_offline();
        gw.seen_sigs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .prune(now);
        gw.progress.fetch_add(1, Ordering::Relaxed);
        tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// `WATCHDOG=1` only while the sweeper keeps completing passes; `STATUS=` with depth.
/// Act on what other replicas commit (a database-backed state): wake the long-polls of
/// a node whose queue changed; after a gap in the notices, wake every long-poll so each
/// looks again. Returns at once for a state only this process writes.
pub async fn follow(gw: Arc<Gateway>) {
    let Some(mut rx) = gw.state.notices() else {
        return;
    };
    use super::storage::Notice;
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let notice = tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            n = rx.recv() => n,
        };
        match notice {
            Ok(Notice::Queued(node)) => gw.wake_node(&node),
            Ok(Notice::Events(_)) => {}
            Ok(Notice::Resync) | Err(RecvError::Lagged(_)) => gw.wake_all(),
            Err(RecvError::Closed) => return,
        }
    }
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
