//! `Gateway`: what every gateway service shares (config, state, keys, trust, metrics,
//! events, per-node wake-ups and liveness, shutdown) and the state each service owns
//! (replay window, verify cache, audit frontiers, job locks, enrollment admission),
//! built once in [`Gateway::new`] for the engine; each service reaches its own through
//! its handle (`gw.node_auth()`, …).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::audit_sync::frontiers::Frontiers;
use super::enroll::admission::Admission;
use super::events::{EventLog, GatewayEvent};
use super::live::table::LiveTable;
use super::node_auth::replays::ReplayWindow;
use super::storage::{GatewayState, SharedState};
use crate::config::Config;
use crate::envelope::{IdentityDocument, KeyRing, Keys, TrustStore};
use crate::telemetry::Metrics;

pub struct Gateway {
    pub(super) cfg: Arc<Config>,
    /// Everything durable: queues, jobs, results, inbox, revocations, audit copies.
    pub(super) state: Arc<dyn GatewayState>,
    /// This gateway's keys; its own key rotation switches them while it runs.
    pub(super) keys: Arc<KeyRing>,
    /// The document nodes are given (stored identity with the current TLS pin).
    published: std::sync::RwLock<IdentityDocument>,
    /// This gateway's newest key rotation and the end of its grace (PROTOCOL §15.7):
    /// handed to nodes with their pulls until then.
    pub(super) rotation: std::sync::RwLock<Option<(crate::envelope::KeyRotation, u64)>>,
    trust: crate::daemon::trust::TrustCache,
    pub(super) metrics: Arc<Metrics>,
    pub(super) events: EventLog,
    /// The writer's end of the event log, taken by its task at start.
    pub(super) event_writer:
        Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<super::events::ToWriter>>>,
    pub(super) shutdown: CancellationToken,
    /// Liveness: who was heard from, who polls here, the long-polls' wake-ups, and —
    /// with replicas — the shared liveness rows.
    pub(super) live: LiveTable,
    pub(super) progress: AtomicU64,
    pub(super) started_ms: u64,
    ready: AtomicBool,
    /// The replicas' shared state, when there are replicas: handed to the tasks that
    /// follow other replicas ([`Self::replicas_to_follow`]) and used by the trust
    /// re-read; no flow reads it.
    replicas: Option<Arc<dyn SharedState>>,
    // What each service owns, built here once for the engine and handed to the
    // service's handle (`gw.node_auth()`, …), which alone uses it.
    /// Node authentication: the replay window (in memory, or the replicas' state).
    pub(super) replays: ReplayWindow,
    /// Client authentication: the memo of token signature checks.
    pub(super) token_gate: crate::token::Gate,
    /// Audit sync: each node's frontier.
    pub(super) frontiers: Frontiers,
    /// Commands and tool calls: one lock per caller's job.
    pub(super) job_locks: crate::keyed_lock::KeyedLocks,
    /// Enrollment: who gets an answer while strangers flood (budgets, decision slots).
    pub(super) admission: Admission,
    /// Commands, tool calls and forwards: the tenants' quotas on what they queue.
    pub(super) quota_gate: super::tenant_quota::QuotaGate,
}

/// The stored identity with the current TLS pin; a data dir without its stored
/// identity (an older layout) gives the keys' own document.
fn published_or_own(cfg: &Config, keys: &Keys) -> IdentityDocument {
    crate::daemon::files::published_identity(cfg, keys).unwrap_or_else(|_| {
        IdentityDocument::new(&cfg.node_id, "gateway", keys, "1970-01-01T00:00:00Z")
    })
}

/// Enrollment decisions in flight at once: a quarter of the database pool (the rest
/// stays for delivery, uploads and the console), four on the embedded store.
fn enroll_slots(cfg: &Config) -> usize {
    cfg.gateway_db
        .as_ref()
        .map_or(4, |db| (db.pool as usize / 4).max(1))
}

impl Gateway {
    pub(super) fn new(
        cfg: Config,
        state: Arc<dyn GatewayState>,
        shared: Option<Arc<dyn SharedState>>,
        keys: Keys,
        trust: crate::daemon::trust::TrustCache,
        shutdown: CancellationToken,
    ) -> Self {
        let skew_ms = cfg.max_clock_skew_s * 1000;
        let slots = enroll_slots(&cfg);
        let published = published_or_own(&cfg, &keys);
        let started_ms = state.now_ms();
        let (events, event_writer) = EventLog::new();
        Self {
            cfg: Arc::new(cfg),
            state,
            keys: Arc::new(KeyRing::from(keys)),
            published: std::sync::RwLock::new(published),
            rotation: std::sync::RwLock::new(None),
            trust,
            metrics: Arc::new(Metrics::gateway()),
            events,
            event_writer: Mutex::new(Some(event_writer)),
            shutdown,
            live: LiveTable::new(shared.clone()),
            replicas: shared.clone(),
            progress: AtomicU64::new(0),
            started_ms,
            ready: AtomicBool::new(false),
            frontiers: Frontiers::new(shared.is_some()),
            replays: ReplayWindow::new(shared, skew_ms),
            job_locks: crate::keyed_lock::KeyedLocks::new(),
            token_gate: crate::token::Gate::new(1024),
            admission: Admission::new(slots, started_ms),
            quota_gate: Default::default(),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.state.now_ms()
    }

    pub fn cfg(&self) -> &Config {
        &self.cfg
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// What happens, for dashboards and the console (SSE).
    pub fn events(&self) -> &EventLog {
        &self.events
    }

    /// Fires when the gateway begins to shut down (long-polls and streams end on it).
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// This gateway's identity document as nodes are given it.
    pub(super) fn identity(&self) -> IdentityDocument {
        self.published
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// After this gateway's key rotation: the document of the new keys.
    pub(super) fn set_identity(&self, keys: &Keys) {
        *self.published.write().unwrap_or_else(|p| p.into_inner()) =
            published_or_own(&self.cfg, keys);
    }

    /// The trust cache (this gateway's own entry changes with its key rotation).
    pub(super) fn trust_cache(&self) -> &crate::daemon::trust::TrustCache {
        &self.trust
    }

    /// The key rotation handed to nodes with their pulls, while its grace lasts.
    pub fn rotation_for_nodes(&self) -> Option<crate::envelope::KeyRotation> {
        let now = self.now_ms();
        self.rotation
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(_, until)| now < *until)
            .map(|(r, _)| r.clone())
    }

    /// Flush and close the state (at the end of a drain).
    pub async fn close_state(&self) -> Result<(), super::storage::StateError> {
        self.state.close().await
    }

    /// Whether the state can take writes now (a gateway whose database is away answers
    /// every write 503: it is not ready either).
    pub async fn writable(&self) -> Result<(), super::storage::StateError> {
        self.state.ready().await
    }

    /// What waits in each queue (`/v1/status`).
    pub async fn queue_stats(
        &self,
    ) -> Result<Vec<crate::store::QueueStat>, super::storage::StateError> {
        self.state.queue_stats().await
    }

    /// Mirror the state's queue statistics into the gauges, just before `/metrics`
    /// renders (one state query per scrape).
    pub async fn refresh_gauges(&self) {
        if let Ok(stats) = self.state.queue_stats().await {
            self.metrics.set_queue_stats(&stats);
            self.metrics
                .store_bytes
                .set(&[], stats.iter().map(|s| s.bytes as f64).sum());
        }
    }

    pub(super) fn skew_ms(&self) -> u64 {
        self.cfg.max_clock_skew_s * 1000
    }

    pub fn set_ready(&self, r: bool) {
        self.ready.store(r, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && !self.shutdown.is_cancelled()
    }

    pub fn publish(&self, ev: GatewayEvent) {
        self.events.publish(self.now_ms(), ev);
    }

    /// Peers plus the gateway itself as an issuer, so tokens it minted (or an operator
    /// issued with `outpost token issue` on the gateway) verify here.
    /// Wait until the events published so far are committed to the state's event
    /// table. Handlers call it before answering, so a replica killed right after its
    /// answer has not lost the events of what it answered for.
    pub(super) async fn events_committed(&self) {
        if let Some(rx) = self.events.flushed() {
            if tokio::time::timeout(std::time::Duration::from_secs(5), rx)
                .await
                .is_err()
            {
                tracing::warn!(event = "events_not_committed_in_time");
            }
        }
    }

    pub(super) fn trust(&self) -> Arc<TrustStore> {
        self.trust.get(self.now_ms())
    }

    /// A lookup of `node_id` missed (unknown, or known with other keys): `outpost trust
    /// add` may have written the peers since they were read (in another process, or
    /// through another replica). Read them again before refusing.
    pub(super) async fn recheck_trust(&self, node_id: &str) {
        if let Err(e) = self.reload_peer(node_id).await {
            tracing::warn!(event = "trust_reload_failed", node = %node_id, error = %e);
        }
    }

    /// [`Self::recheck_trust`] for a caller that refuses on a miss: `Err` when the state
    /// could not be asked, so the miss is not taken for "no such node".
    pub(super) async fn reload_peer(
        &self,
        node_id: &str,
    ) -> Result<(), super::storage::StateError> {
        // The replicas' copy of that peer first (other processes write the database);
        // one process's store is read again by the recheck itself.
        let refreshed = match &self.replicas {
            Some(replicas) => replicas.refresh_peer(node_id).await,
            None => Ok(()),
        };
        self.trust.recheck(self.now_ms());
        refreshed
    }

    /// The shared state the replica-following task (`sweeper::follow`) runs on; `None`
    /// for a gateway alone on its store, which does not start it.
    pub fn replicas_to_follow(&self) -> Option<Arc<dyn SharedState>> {
        self.replicas.clone()
    }

    /// A token's issuer was unknown: read the peers again (this replica's copy; a
    /// database-backed gateway's copy follows the database's `NOTIFY`).
    pub(super) fn recheck_issuers(&self) {
        self.trust.recheck(self.now_ms());
    }

    /// An enrolled node: in the trust store with role `node`. A miss is asked of the
    /// state again; `Err` when it cannot answer (never "not enrolled" for that).
    pub(super) async fn enrolled(
        &self,
        node_id: &str,
    ) -> Result<Option<IdentityDocument>, super::storage::StateError> {
        let find = |t: &TrustStore| {
            t.get(node_id)
                .filter(|p| p.doc.role == "node")
                .map(|p| p.doc.clone())
        };
        if let Some(doc) = find(&self.trust()) {
            return Ok(Some(doc));
        }
        self.reload_peer(node_id).await?;
        Ok(find(&self.trust()))
    }
}
