//! The node's main loop (the expiry sweeper, whose passes are the "progress" the
//! systemd watchdog is tied to), the watchdog itself, and the read-side views
//! (`/v1/status`, gauges, `STATUS=` line).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::core::NodeCore;
use super::error::NodeError;
use crate::audit::{AuditEvent as Event, AuditOutcome as Outcome};
use crate::service::Notifier;
use crate::telemetry::MessageEvent;

/// Longest the sweeper sleeps. It also wakes at the next known expiry, so a message is
/// swept at most this long after it expired (SPEC: within 5 s), and each pass is the
/// watchdog's heartbeat. Idle, that is one wakeup every 4 s; no busy polling.
const SWEEP_MAX_SLEEP: Duration = Duration::from_secs(4);

/// How often the sweeper advances the persisted time floor (one small fsync).
const TOUCH_EVERY_MS: u64 = 10_000;

pub async fn sweeper(core: Arc<NodeCore>, shutdown: CancellationToken) {
    let mut last_touch_ms = 0u64;
    let mut last_checkpoint_ms = 0u64;
    let mut idle = crate::service::memory::IdleTrim::default();
    loop {
        let now = core.now_ms();
        match core.store.sweep_expired(now).await {
            Ok(expired) => {
                for m in expired {
                    MessageEvent {
                        queue: &m.queue,
                        event: "expired",
                        peer: &m.peer,
                        message_id: &m.message_id,
                        reason: Some("timeout_in_queue"),
                    }
                    .emit(&core.metrics);
                    core.audit_event(
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
        // Keep the time floor moving (and learn whether the store is still writable).
        if now.saturating_sub(last_touch_ms) >= TOUCH_EVERY_MS || !core.store_writable() {
            let ok = core.store.touch_time().await.is_ok();
            core.store_ok
                .store(ok, std::sync::atomic::Ordering::Relaxed);
            last_touch_ms = now;
        }
        // A signed checkpoint when the audit log grew (`audit.checkpoint_interval_s`).
        // Entries after the newest checkpoint are protected only by their index field,
        // so the interval is short.
        core.flush_refusal_summary(false).await;
        if now.saturating_sub(last_checkpoint_ms) >= core.cfg.audit_checkpoint_every_ms {
            core.checkpoint_audit().await;
            last_checkpoint_ms = now;
        }
        // Quiet again after a burst: give caches and free heap back to the kernel.
        if idle.observe(core.served.load(std::sync::atomic::Ordering::Relaxed)) {
            core.store.release_memory();
            crate::service::memory::trim();
            tracing::debug!(event = "memory_trimmed");
        }
        core.mark_progress();
        let wait = match core.store.next_expiry_ms() {
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
            let stalled_ms = core.ms_since_progress();
            if core.store.sync_failed() {
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

impl NodeCore {
    /// Sign and store a checkpoint if the log grew since the last one (blocking work,
    /// off the runtime threads).
    pub async fn checkpoint_audit(self: &Arc<Self>) {
        let core = self.clone();
        let res = tokio::task::spawn_blocking(move || {
            let size = core.audit.size();
            let latest = core
                .audit
                .latest_checkpoint()
                .ok()
                .flatten()
                .map(|(s, _)| s);
            if size == 0 || latest == Some(size) {
                return Ok(());
            }
            core.audit
                .checkpoint(core.keys.signing_key(), &core.cfg.node_id)
                .map(|_| ())
        })
        .await;
        match res {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(event = "audit_checkpoint_failed", error = %e),
            Err(e) => tracing::warn!(event = "audit_checkpoint_failed", error = %e),
        }
    }

    pub fn mark_progress(&self) {
        let t = tokio::time::Instant::now();
        let ms = t.duration_since(self.boot_instant).as_millis() as u64;
        self.progress.store(ms, Ordering::Relaxed);
    }

    pub fn ms_since_progress(&self) -> u64 {
        let now = tokio::time::Instant::now()
            .duration_since(self.boot_instant)
            .as_millis() as u64;
        now.saturating_sub(self.progress.load(Ordering::Relaxed))
    }

    pub fn status_line(&self) -> String {
        let now = self.now_ms();
        let stats = self.store.queue_stats(now).unwrap_or_default();
        let mut parts: Vec<String> = stats
            .iter()
            .filter(|s| s.depth > 0)
            .map(|s| format!("{}/{}={}", s.queue, s.peer, s.depth))
            .collect();
        if parts.is_empty() {
            parts.push("all queues empty".into());
        }
        format!("queues: {}; audit {}", parts.join(" "), self.audit.size())
    }

    /// Mirror store state into gauges just before `/metrics` renders.
    pub fn refresh_gauges(&self) {
        let now = self.now_ms();
        if let Ok(stats) = self.store.queue_stats(now) {
            self.metrics.set_queue_stats(&stats);
        }
        let size = self.audit.size();
        self.metrics.audit_size.set(&[], size as f64);
        self.metrics
            .audit_unsynced_entries
            .set(&[], size.saturating_sub(self.audit_synced_size()) as f64);
        self.metrics
            .store_bytes
            .set(&[], self.store.bytes_used().unwrap_or(0) as f64);
    }

    pub fn audit_synced_size(&self) -> u64 {
        self.store
            .kv_get(super::core::KV_META, "audit_synced_size")
            .ok()
            .flatten()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    pub fn status_json(&self) -> Result<Value, NodeError> {
        let now = self.now_ms();
        let stats = self
            .store
            .queue_stats(now)
            .map_err(NodeCore::map_store_error)?;
        let queues: Vec<Value> = stats
            .iter()
            .map(|s| {
                json!({"queue": s.queue, "peer": s.peer, "depth": s.depth, "oldest_age_s": s.oldest_age_s})
            })
            .collect();
        let wall = self.clock.now_ms();
        Ok(json!({
            "node_id": self.cfg.node_id,
            "role": self.cfg.role.as_str(),
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_s": now.saturating_sub(self.started_ms) / 1000,
            "upstream": self.upstream_status(),
            "queues": queues,
            "audit": {"size": self.audit.size(), "synced_size": self.audit_synced_size()},
            "clock": {
                "now_ms": now,
                "wall_ms": wall,
                "behind_floor": wall < now,
                "max_skew_s": self.cfg.max_clock_skew_s,
            },
        }))
    }
}
