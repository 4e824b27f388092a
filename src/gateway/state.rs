//! What every gateway handler and task shares: config, store, keys, trust, events,
//! per-node wake-ups and liveness.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::events::{EventLog, GatewayEvent};
use super::liveness::{classify, Liveness};
use super::storage::GatewayState;
use crate::audit::Frontier;
use crate::config::Config;
use crate::envelope::{IdentityDocument, KeyRing, Keys, SeenSignatures, TrustStore};
use crate::telemetry::Metrics;

/// Per-node runtime state (not persisted: after a restart every node is `offline` until
/// it calls in, which is the truth as far as this process knows).
#[derive(Debug, Default)]
pub struct NodeLive {
    pub last_seen_ms: Option<u64>,
    pub polling: u32,
    pub online: bool,
    /// Its last long-poll here ended with the connection closed (the node went away),
    /// and it has not called since: not between two polls.
    pub left: bool,
}

/// A node nobody has heard from: offline, never seen, not polling.
pub const NOT_SEEN: (Liveness, Option<u64>, bool) = (Liveness::Offline, None, false);

/// Shared state: a replica writes a node's "heard from" at most this often.
const HEARD_EVERY_MS: u64 = 1_000;
/// Shared state: a replica's "I hold a long-poll of it" lasts the poll's wait and this
/// much more (written once, when the poll starts: refreshing every held poll each
/// second was 1,000 row updates a second per replica in the fleet simulation).
const POLLING_GRACE_MS: u64 = 3_000;

pub struct Gateway {
    pub cfg: Arc<Config>,
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
    pub metrics: Arc<Metrics>,
    pub events: EventLog,
    /// Shared state: the writer's end of the event log, taken by its task at start.
    pub(super) event_writer:
        Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<super::events::ToWriter>>>,
    pub shutdown: CancellationToken,
    wake: Mutex<HashMap<String, Arc<NodeWake>>>,
    live: Mutex<HashMap<String, NodeLive>>,
    /// Messages enqueued while their node was connected: acked as `was_stored: false`.
    live_sent: Mutex<HashSet<String>>,
    /// Shared state: when this replica last wrote each node's liveness.
    heard_at: Mutex<HashMap<String, u64>>,
    pub(super) seen_sigs: Mutex<SeenSignatures>,
    /// Per-node audit frontier, loaded lazily from the KV rows; the lock also serialises
    /// audit uploads per gateway so two cannot interleave.
    pub(super) audit: tokio::sync::Mutex<HashMap<String, Frontier>>,
    pub(super) progress: AtomicU64,
    pub started_ms: u64,
    ready: AtomicBool,
    /// One lock per caller's job, so concurrent repeats queue one TASK_REQUEST.
    pub(super) job_locks: crate::keyed_lock::KeyedLocks,
    /// Memo of bearer-token signature checks: an operator's client sends the same
    /// token with every command (time window, audience, scope and revocation are still
    /// decided on each request).
    pub(super) verify_cache: crate::token::VerifyCache,
    /// Unauthenticated enrollment requests answered (rate limit).
    enroll_bucket: Mutex<super::enroll::Bucket>,
}

/// The stored identity with the current TLS pin; a data dir without its stored
/// identity (an older layout) gives the keys' own document.
fn published_or_own(cfg: &Config, keys: &Keys) -> IdentityDocument {
    crate::daemon::files::published_identity(cfg, keys).unwrap_or_else(|_| {
        IdentityDocument::new(&cfg.node_id, "gateway", keys, "1970-01-01T00:00:00Z")
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a node's long-polls held here wait on.
#[derive(Default)]
pub struct NodeWake {
    /// Something was queued for the node (or notices were missed): look at the queue.
    pub queued: Notify,
    /// A newer pull of the node began: older ones compare with `newest_pull`.
    pub pulled: Notify,
    /// The newest pull number of the node this replica knows of.
    pub newest_pull: AtomicU64,
}

impl Gateway {
    pub fn new(
        cfg: Config,
        state: Arc<dyn GatewayState>,
        keys: Keys,
        trust: crate::daemon::trust::TrustCache,
        shutdown: CancellationToken,
    ) -> Self {
        let skew_ms = cfg.max_clock_skew_s * 1000;
        let published = published_or_own(&cfg, &keys);
        let started_ms = state.now_ms();
        let (events, event_writer) = if state.replicas().is_some() {
            let (log, rx) = EventLog::shared();
            (log, Some(rx))
        } else {
            // Ids from the start time in microseconds: they keep growing across restarts.
            (EventLog::local(started_ms.saturating_mul(1000)), None)
        };
        Self {
            cfg: Arc::new(cfg),
            state,
            keys: Arc::new(KeyRing::from(keys)),
            published: std::sync::RwLock::new(published),
            rotation: std::sync::RwLock::new(None),
            trust,
            metrics: Arc::new(Metrics::gateway()),
            events,
            event_writer: Mutex::new(event_writer),
            shutdown,
            wake: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            live_sent: Mutex::new(HashSet::new()),
            heard_at: Mutex::new(HashMap::new()),
            seen_sigs: Mutex::new(SeenSignatures::new(skew_ms, 1_000_000)),
            audit: tokio::sync::Mutex::new(HashMap::new()),
            progress: AtomicU64::new(0),
            started_ms,
            ready: AtomicBool::new(false),
            job_locks: crate::keyed_lock::KeyedLocks::new(),
            verify_cache: crate::token::VerifyCache::new(1024),
            enroll_bucket: Mutex::new(super::enroll::Bucket::default()),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.state.now_ms()
    }

    /// May one more unauthenticated enrollment request be answered now?
    pub fn enroll_attempt_allowed(&self) -> bool {
        lock(&self.enroll_bucket).take(self.now_ms())
    }

    /// This gateway's identity document as nodes are given it.
    pub fn identity(&self) -> IdentityDocument {
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

    pub fn skew_ms(&self) -> u64 {
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
    /// Wait until the events published so far are committed (a database-backed state;
    /// at once otherwise). Handlers call it before answering, so a replica killed right
    /// after its answer has not lost the events of what it answered for.
    pub async fn events_committed(&self) {
        if let Some(rx) = self.events.flushed() {
            if tokio::time::timeout(std::time::Duration::from_secs(5), rx)
                .await
                .is_err()
            {
                tracing::warn!(event = "events_not_committed_in_time");
            }
        }
    }

    pub fn trust(&self) -> Arc<TrustStore> {
        self.trust.get(self.now_ms())
    }

    /// A lookup of `node_id` missed (unknown, or known with other keys): `outpost trust
    /// add` may have written the peers since they were read (in another process, or
    /// through another replica). Read them again before refusing.
    pub async fn recheck_trust(&self, node_id: &str) {
        if let Some(replicas) = self.state.replicas() {
            if let Err(e) = replicas.refresh_peer(node_id).await {
                tracing::warn!(event = "trust_reload_failed", node = %node_id, error = %e);
            }
        }
        self.trust.recheck(self.now_ms());
    }

    /// A token's issuer was unknown: read the peers again (this replica's copy; a
    /// database-backed gateway's copy follows the database's `NOTIFY`).
    pub fn recheck_issuers(&self) {
        self.trust.recheck(self.now_ms());
    }

    /// An enrolled node: in the trust store with role `node`.
    pub async fn enrolled(&self, node_id: &str) -> Option<IdentityDocument> {
        let find = |t: &TrustStore| {
            t.get(node_id)
                .filter(|p| p.doc.role == "node")
                .map(|p| p.doc.clone())
        };
        if let Some(doc) = find(&self.trust()) {
            return Some(doc);
        }
        self.recheck_trust(node_id).await;
        find(&self.trust())
    }

    pub fn waker(&self, node_id: &str) -> Arc<NodeWake> {
        lock(&self.wake)
            .entry(node_id.to_string())
            .or_default()
            .clone()
    }

    /// Wake every long-poll (after notices may have been missed): each looks again.
    pub fn wake_all(&self) {
        for w in lock(&self.wake).values() {
            w.queued.notify_waiters();
        }
    }

    /// Wake a node's long-polls: something was queued for it.
    pub fn wake_node(&self, node_id: &str) {
        self.waker(node_id).queued.notify_waiters();
    }

    /// Pull number `pull` of `node_id` began (here or at another replica): the node's
    /// older long-polls held here answer empty without asking the store.
    pub fn pull_begun(&self, node_id: &str, pull: u64) {
        let w = self.waker(node_id);
        if w.newest_pull.fetch_max(pull, Ordering::AcqRel) < pull {
            w.pulled.notify_waiters();
        }
    }

    /// A signed request from `node_id` arrived: update liveness, emit `node_online` on
    /// the transition.
    pub async fn seen(&self, node_id: &str) {
        let now = self.now_ms();
        let became_online = {
            let mut g = lock(&self.live);
            let e = g.entry(node_id.to_string()).or_default();
            e.last_seen_ms = Some(now);
            e.left = false;
            let was = e.online;
            e.online = true;
            !was
        };
        if let Some(replicas) = self.state.replicas() {
            // Every replica's view is the database's: written at most once a second per
            // node and replica; the transition is reported by the one replica that made it.
            let due = {
                let mut g = lock(&self.heard_at);
                let due = g
                    .get(node_id)
                    .is_none_or(|t| now.saturating_sub(*t) >= HEARD_EVERY_MS);
                if due {
                    g.insert(node_id.to_string(), now);
                }
                due
            };
            if due {
                match replicas.node_heard(node_id, now).await {
                    Ok(true) => {
                        tracing::info!(event = "node_online", node_id);
                        self.publish(GatewayEvent::NodeOnline {
                            node_id: node_id.to_string(),
                        });
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(event = "liveness_not_written", error = %e),
                }
            }
            return;
        }
        if became_online {
            tracing::info!(event = "node_online", node_id);
            self.publish(GatewayEvent::NodeOnline {
                node_id: node_id.to_string(),
            });
        }
    }

    /// Shared state: tell the other replicas that this one holds a long-poll of `node`
    /// for up to `wait_ms` (at the pull's start). Returns the claim written, for
    /// [`Gateway::poll_abandoned`].
    pub async fn share_polling(&self, node: &str, wait_ms: u64) -> Option<u64> {
        let replicas = self.state.replicas()?;
        let now = self.now_ms();
        let until = now + wait_ms + POLLING_GRACE_MS;
        match replicas
            .nodes_polling(vec![node.to_string()], now, until)
            .await
        {
            Ok(()) => Some(until),
            Err(e) => {
                tracing::warn!(event = "liveness_not_written", error = %e);
                None
            }
        }
    }

    /// Liveness, last heard and "holding a long-poll" of each node, as every replica
    /// sees them (this one's memory, merged with the shared state's view).
    pub async fn liveness_of(
        &self,
        nodes: &[String],
    ) -> HashMap<String, (Liveness, Option<u64>, bool)> {
        let now = self.now_ms();
        let shared = if let Some(replicas) = self.state.replicas() {
            replicas.nodes_seen(nodes).await.unwrap_or_else(|e| {
                tracing::warn!(event = "liveness_unreadable", error = %e);
                HashMap::new()
            })
        } else {
            HashMap::new()
        };
        let g = lock(&self.live);
        nodes
            .iter()
            .map(|id| {
                let local = g.get(id);
                let db = shared.get(id).copied().unwrap_or_default();
                let last = local.and_then(|e| e.last_seen_ms).max(db.last_seen_ms);
                let polling = local.is_some_and(|e| e.polling > 0) || db.polling_until_ms > now;
                (id.clone(), (classify(last, polling, now), last, polling))
            })
            .collect()
    }

    /// Can `node` be handed a message this moment (polling at any replica, or between
    /// two polls)?
    pub async fn reachable(&self, node_id: &str) -> bool {
        let now = self.now_ms();
        let ids = [node_id.to_string()];
        let (_, last, polling) = self
            .liveness_of(&ids)
            .await
            .get(node_id)
            .copied()
            .unwrap_or(NOT_SEEN);
        let left = lock(&self.live).get(node_id).is_some_and(|e| e.left);
        super::liveness::reachable_now(last, polling, left, now)
    }

    /// Is `node` online at any replica?
    pub async fn online(&self, node_id: &str) -> bool {
        let ids = [node_id.to_string()];
        self.liveness_of(&ids)
            .await
            .get(node_id)
            .is_some_and(|l| l.0 == Liveness::Online)
    }

    pub fn poll_started(&self, node_id: &str) {
        let mut g = lock(&self.live);
        let e = g.entry(node_id.to_string()).or_default();
        e.polling += 1;
        e.left = false;
    }

    /// A long-poll was answered: the node is between two polls.
    pub fn poll_ended(&self, node_id: &str) {
        let now = self.now_ms();
        let mut g = lock(&self.live);
        let e = g.entry(node_id.to_string()).or_default();
        e.polling = e.polling.saturating_sub(1);
        e.last_seen_ms = Some(now);
    }

    /// A long-poll ended unanswered because its connection closed (the node went away,
    /// or gave up on it): not polling, and not between two polls either. A shared
    /// state's claim `claimed_until_ms` (from [`Gateway::share_polling`]) is withdrawn
    /// unless a newer poll replaced it.
    pub fn poll_abandoned(self: &Arc<Self>, node_id: &str, claimed_until_ms: Option<u64>) {
        {
            let mut g = lock(&self.live);
            let e = g.entry(node_id.to_string()).or_default();
            e.polling = e.polling.saturating_sub(1);
            e.left = e.polling == 0;
        }
        let (Some(until), Ok(rt)) = (claimed_until_ms, tokio::runtime::Handle::try_current())
        else {
            return;
        };
        // Called from a drop, so the one small write runs on its own; it is bookkeeping
        // (a lost one leaves the claim to run out, as before).
        let (gw, node) = (self.clone(), node_id.to_string());
        rt.spawn(async move {
            let now = gw.now_ms();
            let Some(replicas) = gw.state.replicas() else {
                return;
            };
            if let Err(e) = replicas.poll_abandoned(&node, until, now).await {
                tracing::warn!(event = "liveness_not_written", error = %e);
            }
        });
    }

    /// Holding a long-poll right now: a message queued now goes out at once.
    pub fn polling(&self, node_id: &str) -> bool {
        lock(&self.live).get(node_id).is_some_and(|e| e.polling > 0)
    }

    /// Emit `node_offline` for nodes that stopped being online (called by the sweeper).
    pub async fn check_offline(&self) {
        let now = self.now_ms();
        if let Some(replicas) = self.state.replicas() {
            let silent_since = now.saturating_sub(super::liveness::ONLINE_MS);
            match replicas.sweep_offline(silent_since, now).await {
                Ok(gone) => {
                    for node_id in gone {
                        tracing::warn!(event = "node_offline", node_id = %node_id);
                        self.publish(GatewayEvent::NodeOffline { node_id });
                    }
                }
                Err(e) => tracing::warn!(event = "liveness_sweep_failed", error = %e),
            }
            return;
        }
        let gone: Vec<String> = {
            let mut g = lock(&self.live);
            g.iter_mut()
                .filter(|(_, e)| {
                    e.online && classify(e.last_seen_ms, e.polling > 0, now) != Liveness::Online
                })
                .map(|(id, e)| {
                    e.online = false;
                    id.clone()
                })
                .collect()
        };
        for node_id in gone {
            tracing::warn!(event = "node_offline", node_id = %node_id);
            self.publish(GatewayEvent::NodeOffline { node_id });
        }
    }

    pub fn mark_live_sent(&self, message_id: &str) {
        let mut g = lock(&self.live_sent);
        if g.len() > 100_000 {
            g.clear();
        }
        g.insert(message_id.to_string());
    }

    /// `was_stored` for an acked message: false only if the node was holding a
    /// long-poll when it was enqueued (it went straight out); true if it waited.
    pub fn take_was_stored(&self, message_id: &str) -> bool {
        !lock(&self.live_sent).remove(message_id)
    }
}
