//! The node's main loop (the expiry sweeper, whose passes are the "progress" the
//! systemd watchdog is tied to) and the watchdog itself.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::core::NodeCore;
use crate::audit::{AuditEvent as Event, AuditOutcome as Outcome};
use crate::service::Notifier;
use crate::store::FLOOR_EVERY_MS;
use crate::telemetry::MessageEvent;

/// Longest the sweeper sleeps. It also wakes at the next known expiry, so a message is
/// swept at most this long after it expired (PROTOCOL §14: within 5 s), and each pass is the
/// watchdog's heartbeat. Idle, that is one wakeup every 4 s; no busy polling.
const SWEEP_MAX_SLEEP: Duration = Duration::from_secs(4);

pub async fn sweeper(core: Arc<NodeCore>, shutdown: CancellationToken) {
    let (base, recorder) = (core.base(), &core.recorder);
    let life = &base.life;
    let mut last_checkpoint_ms = 0u64;
    let mut idle = crate::service::memory::IdleTrim::default();
    loop {
        let now = base.now_ms();
        match base.store.sweep_expired(now).await {
            Ok(expired) => {
                for m in expired {
                    MessageEvent {
                        queue: &m.queue,
                        event: "expired",
                        peer: &m.peer,
                        message_id: &m.message_id,
                        reason: Some("timeout_in_queue"),
                    }
                    .emit(&base.metrics);
                    recorder
                        .audit_event(
                            Event::Expired,
                            Outcome::Expired,
                            &m.message_id,
                            Some(&m.peer),
                            Some("timeout_in_queue"),
                        )
                        .await;
                }
            }
            Err(e) => tracing::warn!(event = "sweep_failed", error = %e),
        }
        // Keep the persisted time floor from getting stale, coarsely: every commit
        // carries it anyway, so an idle node writes one small commit every
        // FLOOR_EVERY_MS (10 min) and nothing in between. While the store refuses
        // writes, try every pass to learn when it takes them again.
        if base.store.time_floor_lag_ms() >= FLOOR_EVERY_MS || !life.store_writable() {
            let ok = base.store.touch_time().await.is_ok();
            life.set_store_ok(ok);
        }
        // A signed checkpoint when the audit log grew (`audit.checkpoint_interval_s`).
        // Entries after the newest checkpoint are protected only by their index field,
        // so the interval is short.
        recorder.flush_refusal_summary(false).await;
        if now.saturating_sub(last_checkpoint_ms) >= base.cfg.audit_checkpoint_every_ms {
            recorder.checkpoint().await;
            last_checkpoint_ms = now;
        }
        // Quiet again after a burst: give caches and free heap back to the kernel.
        if idle.observe(life.served()) {
            base.store.release_memory();
            crate::service::memory::trim();
            tracing::debug!(event = "memory_trimmed");
        }
        life.mark_progress();
        let wait = match base.store.next_expiry_ms() {
            Ok(Some(t)) => {
                Duration::from_millis(t.saturating_sub(now).max(20)).min(SWEEP_MAX_SLEEP)
            }
            _ => SWEEP_MAX_SLEEP,
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

pub async fn watchdog(core: Arc<NodeCore>, shutdown: CancellationToken) {
    let interval = Notifier.watchdog_interval();
    let tick = interval.unwrap_or(Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        if interval.is_some() {
            // Ping only while the main loop really moves: a wedged sweeper (stuck
            // store, deadlock) lets systemd restart us.
            let stalled_ms = core.base().life.ms_since_progress();
            if core.base().store.sync_failed() {
                tracing::error!(
                    event = "store_sync_failed",
                    "an fsync of the store failed; withholding watchdog ping so systemd restarts outpost"
                );
            } else if stalled_ms <= 3 * SWEEP_MAX_SLEEP.as_millis() as u64 + tick.as_millis() as u64
            {
                Notifier.watchdog();
            } else {
                tracing::error!(
                    event = "main_loop_stalled",
                    stalled_ms,
                    "withholding watchdog ping"
                );
            }
        }
        Notifier.status(&core.status_line());
    }
}
