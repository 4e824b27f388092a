//! What every node service shares: the resolved config, the store, keys, trust,
//! metrics, the clock, and the lifecycle switches (accepting work, ready, progress).
//! Each flow (`calls`, `inbound`, `outbox`, `inbox`, `recorder`) holds an `Arc<Base>`
//! and keeps its own state private.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::envelope::{KeyRing, Keys, TrustStore};
use crate::store::Store;
use crate::telemetry::Metrics;

pub use crate::store::names::{KV_META, KV_REVOKED};

pub struct Base {
    pub(super) cfg: Arc<Config>,
    pub(super) store: Store,
    /// Switched whole by a key rotation (`identity rotate`) while the node runs.
    pub(super) keys: Arc<KeyRing>,
    pub(super) trust: crate::daemon::trust::TrustCache,
    pub(super) metrics: Arc<Metrics>,
    pub(super) clock: SharedClock,
    pub(super) life: Lifecycle,
}

impl Base {
    pub(super) fn new(
        cfg: Config,
        store: Store,
        keys: Keys,
        trust: crate::daemon::trust::TrustCache,
        clock: SharedClock,
    ) -> Self {
        let started_ms = store.now_ms();
        Self {
            cfg: Arc::new(cfg),
            store,
            keys: Arc::new(KeyRing::from(keys)),
            trust,
            metrics: Arc::new(Metrics::new()),
            clock,
            life: Lifecycle::new(started_ms),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.store.now_ms()
    }

    pub fn trust(&self) -> Arc<TrustStore> {
        self.trust.get(self.now_ms())
    }

    /// An unknown peer (or one known with other keys): read the trust store again
    /// before refusing (`outpost trust add` may have written it since).
    pub fn recheck_trust(&self) {
        self.trust.recheck(self.now_ms());
    }

    pub fn is_revoked(&self, jti: &str) -> bool {
        matches!(self.store.kv_get(KV_REVOKED, jti), Ok(Some(_)))
    }

    pub fn skew_ms(&self) -> u64 {
        self.cfg.max_clock_skew_s * 1000
    }
}

/// Is the node open for work, ready, making progress, serving?
pub struct Lifecycle {
    accepting: AtomicBool,
    ready: AtomicBool,
    pub(super) started_ms: u64,
    /// Bumped by the main loop (sweeper) each time it completes a pass; the watchdog
    /// only pings systemd when this moved.
    progress: AtomicU64,
    boot_instant: tokio::time::Instant,
    /// The last periodic time-floor write succeeded (the store is writable).
    store_ok: AtomicBool,
    /// HTTP requests answered (the sweeper trims memory once this stops moving).
    served: AtomicU64,
}

impl Lifecycle {
    fn new(started_ms: u64) -> Self {
        Self {
            accepting: AtomicBool::new(true),
            ready: AtomicBool::new(false),
            started_ms,
            progress: AtomicU64::new(0),
            boot_instant: tokio::time::Instant::now(),
            store_ok: AtomicBool::new(true),
            served: AtomicU64::new(0),
        }
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && self.accepting.load(Ordering::SeqCst)
    }
    /// Shutdown begins: new work is refused (`not_ready`), work in flight finishes.
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::SeqCst);
    }
    pub fn accepting(&self) -> bool {
        self.accepting.load(Ordering::SeqCst)
    }

    /// One more HTTP request answered.
    pub fn note_served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    pub fn set_store_ok(&self, ok: bool) {
        self.store_ok.store(ok, Ordering::Relaxed);
    }
    pub fn store_writable(&self) -> bool {
        self.store_ok.load(Ordering::Relaxed)
    }

    /// The main loop completed a pass.
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
}
