//! `NodeCore`: everything the node's API handlers and workers share, and the flows that
//! cross components (tool call = token check → idempotency → run → audit + result in one
//! durable batch; inbound envelope = pipeline → durable inbox; outbox = seal → enqueue).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::audit::AuditLog;
use crate::clock::{self, SharedClock};
use crate::config::Config;
use crate::envelope::{Keys, TrustStore};
use crate::store::Store;
use crate::telemetry::Metrics;
use crate::tools::Registry;
use tokio::sync::Notify;

use super::keyfile;
use super::store_audit::StoreAudit;

/// KV namespaces this role keeps in the store.
pub const KV_META: &str = "meta";
pub const KV_REVOKED: &str = "revoked";

/// Distinct tokens whose verification is remembered (a few hundred bytes each).
const VERIFY_CACHE_TOKENS: usize = 256;

pub struct NodeCore {
    pub(super) cfg: Arc<Config>,
    pub(super) store: Store,
    pub(super) keys: Arc<Keys>,
    pub(super) trust: crate::daemon::trust::TrustCache,
    pub(super) audit: Arc<AuditLog<StoreAudit>>,
    pub(super) tools: Registry,
    pub(super) metrics: Arc<Metrics>,
    pub(super) clock: SharedClock,
    accepting: AtomicBool,
    ready: AtomicBool,
    pub(super) started_ms: u64,
    /// Bumped by the main loop (sweeper) each time it completes a pass; the watchdog
    /// only pings systemd when this moved.
    pub(super) progress: AtomicU64,
    pub(super) boot_instant: tokio::time::Instant,
    /// The last periodic time-floor write succeeded (the store is writable).
    pub(super) store_ok: AtomicBool,
    /// Woken when a `TASK_REQUEST` lands in the tasks queue.
    pub(super) tasks_waiting: Notify,
    /// One lock per caller's job, so concurrent repeats run the tool once.
    pub(super) job_locks: crate::keyed_lock::KeyedLocks,
    upstream: Mutex<Option<Arc<dyn Upstream>>>,
    /// Memo of token signature checks (a field device sees the same few tokens over
    /// and over; the Ed25519 verification was a third of a tool call's CPU).
    pub(super) verify_cache: crate::token::VerifyCache,
    /// HTTP requests answered (the sweeper trims memory once this stops moving).
    pub(super) served: AtomicU64,
    /// What refused requests may cost in audit entries.
    pub(super) refusals: Mutex<super::refusals::RefusalBudget>,
    /// Audit appends failed since the last one that succeeded (one log line an episode).
    pub(super) append_failures: Mutex<u64>,
}

/// What the node's upstream link (the sync loop) shows to the rest of the node.
pub trait Upstream: Send + Sync {
    /// `{"state": …}` for `/v1/status`.
    fn status_json(&self) -> Value;
    /// New outbox work: flush soon.
    fn wake(&self);
}

impl NodeCore {
    pub fn open(cfg: Config) -> anyhow::Result<Self> {
        let clock = clock::system();
        let keys = Keys::load(&keyfile::keys_path(&cfg.data_dir))?;
        let identity = keyfile::read_identity(&cfg.data_dir)?;
        if identity.node_id != cfg.node_id
            || identity.sign_pk_b64() != crate::envelope::b64_encode(keys.sign_pk().as_bytes())
        {
            anyhow::bail!(
                "identity.json in {} does not match node_id {} and keys.json",
                cfg.data_dir.display(),
                cfg.node_id
            );
        }
        let store = super::open_store(&cfg, clock.clone())?;
        let trust = crate::daemon::trust::TrustCache::load(&store, &identity)?;
        let audit = Arc::new(AuditLog::open(StoreAudit::new(store.clone()))?);
        let tools = super::build_registry(&cfg)?;
        let started_ms = store.now_ms();
        Ok(Self {
            cfg: Arc::new(cfg),
            store,
            keys: Arc::new(keys),
            trust,
            audit,
            tools,
            metrics: Arc::new(Metrics::new()),
            clock,
            accepting: AtomicBool::new(true),
            ready: AtomicBool::new(false),
            started_ms,
            progress: AtomicU64::new(0),
            boot_instant: tokio::time::Instant::now(),
            store_ok: AtomicBool::new(true),
            tasks_waiting: Notify::new(),
            job_locks: crate::keyed_lock::KeyedLocks::new(),
            upstream: Mutex::new(None),
            verify_cache: crate::token::VerifyCache::new(VERIFY_CACHE_TOKENS),
            served: AtomicU64::new(0),
            refusals: Mutex::new(super::refusals::RefusalBudget::new(started_ms)),
            append_failures: Mutex::new(0),
        })
    }

    /// The resolved configuration.
    pub fn cfg(&self) -> &Config {
        &self.cfg
    }

    /// The metrics registry (rendered by `GET /metrics`).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The tools this node runs.
    pub fn tools(&self) -> &Registry {
        &self.tools
    }

    /// One more HTTP request answered (the sweeper trims memory once this stops moving).
    pub fn note_served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    pub fn now_ms(&self) -> u64 {
        self.store.now_ms()
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && self.accepting.load(Ordering::SeqCst)
    }
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::SeqCst);
    }
    pub fn accepting(&self) -> bool {
        self.accepting.load(Ordering::SeqCst)
    }

    pub fn close(&self) {
        self.store.close();
    }

    pub fn trust(&self) -> Arc<TrustStore> {
        self.trust.get()
    }

    /// An unknown peer: re-read the trust store (at most once a second) before refusing.
    pub fn reload_trust_if_stale(&self) {
        self.trust.reload_if_stale(self.now_ms());
    }

    pub fn is_revoked(&self, jti: &str) -> bool {
        matches!(self.store.kv_get(KV_REVOKED, jti), Ok(Some(_)))
    }

    pub fn set_upstream(&self, h: Arc<dyn Upstream>) {
        *self.upstream.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
    }

    pub fn upstream(&self) -> Option<Arc<dyn Upstream>> {
        self.upstream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn upstream_status(&self) -> Value {
        match self.upstream().as_ref() {
            Some(h) => h.status_json(),
            None => {
                json!({"state": "none", "detail": "no [upstream] configured: fully offline node"})
            }
        }
    }

    pub fn map_store_error(e: crate::store::StoreError) -> super::error::NodeError {
        super::error::NodeError::Store(e)
    }
}
