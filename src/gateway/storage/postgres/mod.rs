//! [`GatewayState`] in PostgreSQL (`store.engine = "postgres"`): the state every gateway
//! replica of a fleet shares. Tables, not a key-value tree (`schema.rs`); every write
//! is one transaction, committed before its future resolves `Ok` (PostgreSQL's commit is
//! the durability point, with the server's `synchronous_commit` and replication
//! settings the operator chose).
//!
//! How replicas agree:
//! - FIFO per node: an enqueue is one statement without a lock, so one that starts
//!   after another's commit gets a higher `seq` (what a sender queued one after the
//!   other is pulled in that order).
//! - A node has one pull at a time: each pull takes the next number of the node's row
//!   in `node_pulls`, which supersedes older pulls held at any replica (they answer
//!   empty). What is not acknowledged is handed out again by the next pull, as the
//!   protocol says; the node deduplicates by message id.
//! - What makes something new to pull, and every pull's start, is announced with
//!   `NOTIFY` right after its commit ([`listen`]), so a long-poll held at any replica
//!   wakes at once.
//! - Events are committed without ids (with the message they describe, or by the
//!   events writer) and given ids in commit order by a sequencer (`events_head`).
//! - Sweeps delete with `RETURNING`: each expired message is reported by exactly one
//!   replica.
//! - Acknowledged writes commit synchronously; bookkeeping (liveness, the replay
//!   window, a pull's delivery counter) commits without waiting for the WAL flush
//!   ([`pool::Conn::query_relaxed`]).

mod audit;
mod delivery;
mod enroll;
mod enroll_tokens;
mod events;
mod fleet;
mod group;
pub mod import;
mod inbox;
mod jobs;
mod listen;
mod live;
mod own_audit;
mod peers;
mod pool;
mod queue;
mod queued;
mod replicas;
mod rollouts;
mod rotation;
pub mod schema;
mod settle;
mod status;
mod tenants;
mod tls;
mod trust_copy;

use std::sync::{Arc, RwLock};

use tokio::sync::broadcast;
use tokio_postgres::error::SqlState;

use super::Notice;
use super::TrustUpdate;
use super::{
    AuditExtension, CommandKey, FiledResult, ForNode, Fut, GatewayState, InboxMessage, JobRecord,
    NewJob, NodeAck, PullBatch, Queued, QueuedMessage, RevocationList, Revoked, StateError, Take,
    Upload,
};
use crate::config::PostgresConfig;
use crate::envelope::TrustStore;
use crate::store::{ExpiredMessage, MessageStatus, QueueStat, StoreError};
use pool::Pool;

/// How long a pulled message shows as `delivering` (until acknowledged or pulled again).
pub const LEASE_MS: u64 = 30_000;

/// How long events are kept for dashboards that resume.
pub const EVENTS_KEEP_MS: u64 = 24 * 3600 * 1000;
/// How long a finished message's status (and its id, for duplicates) is kept.
pub const STATUS_KEEP_MS: u64 = 7 * 24 * 3600 * 1000;

/// The database-backed gateway state.
pub struct Postgres {
    pool: Pool,
    opts: Limits,
    clock: crate::clock::SharedClock,
    /// The revocation list, kept current by the listener (the token check asks
    /// synchronously, on every call).
    revoked: RwLock<peers::Revocations>,
    /// The trust store as last read (refreshed on `NOTIFY`, by the listener's tick and
    /// by [`Postgres::refresh_peer_now`]), with a version that moves on every change
    /// and the peers each version changed.
    trust: RwLock<Option<trust_copy::TrustCopy>>,
    /// Bounds [`Postgres::refresh_peer_now`].
    peer_lookups: tokio::sync::Semaphore,
    notices: broadcast::Sender<Notice>,
    /// The newest event id the sequencers announced (`NOTIFY`, through the listener).
    events_announced: tokio::sync::watch::Sender<u64>,
    /// Enqueues waiting for a group commit ([`group`]).
    enqueues: group::Enqueues,
    /// This state itself, for the tasks that commit groups of enqueues.
    me: std::sync::Weak<Postgres>,
    /// Notifications to send after a commit ([`listen::send_notifications`]).
    outbox: tokio::sync::mpsc::UnboundedSender<(&'static str, String)>,
    outbox_rx:
        std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<(&'static str, String)>>>,
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    max_per_recipient: u64,
    max_message_bytes: u64,
    queue_full_retry_after_s: u64,
}

/// Map a driver error: connection trouble and overload are "retry later" (503); a
/// full database is storage_full (507); anything else is the engine's error.
pub(crate) fn unavailable(e: tokio_postgres::Error) -> StateError {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        if *code == SqlState::DISK_FULL || *code == SqlState::OUT_OF_MEMORY {
            return StateError::Store(StoreError::StorageFull);
        }
        let class = &code.code()[..2];
        // 08 connection, 53 resources, 57 operator intervention (shutdown), 40 rollback.
        if matches!(class, "08" | "53" | "57" | "40") {
            return StateError::Unavailable(format!("{}: {}", code.code(), db.message()));
        }
        return StateError::Store(StoreError::Engine(format!(
            "postgres {}: {}",
            code.code(),
            db.message()
        )));
    }
    StateError::Unavailable(format!("postgres: {e}"))
}

/// How long `/readyz` waits for the database before it answers "not ready".
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Map a driver error from the statement that commits (a `COMMIT`, or a statement
/// run in its own transaction): the server's answer that it failed is definite, as in
/// [`unavailable`]; a lost connection, or the server going down (`08`, `57`: a crash,
/// a stop, a kill of the backend) may have come after the commit record was written,
/// so whether it is stored is unknown.
pub(crate) fn after_commit(e: tokio_postgres::Error) -> StateError {
    let class = e.as_db_error().map(|db| &db.code().code()[..2]);
    match class {
        None | Some("08" | "57") => StateError::OutcomeUnknown(format!("postgres: {e}")),
        Some(_) => unavailable(e),
    }
}

pub(crate) fn i(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}
pub(crate) fn u(v: i64) -> u64 {
    v.max(0) as u64
}

impl Postgres {
    /// A connection answers, and its server takes writes (a standby, or a primary that
    /// was made read-only, would refuse every one).
    async fn ready_now(&self) -> Result<(), StateError> {
        let conn = self.pool.get().await?;
        let row = conn
            .query_one(
                "SELECT current_setting('transaction_read_only') = 'on'",
                &[],
            )
            .await
            .map_err(unavailable)?;
        if row.get::<_, bool>(0) {
            return Err(StateError::Unavailable(
                "the database takes no writes (a standby, or default_transaction_read_only)".into(),
            ));
        }
        Ok(())
    }

    /// Connect, migrate the schema and load what is answered synchronously. Fails
    /// when the database cannot be reached: the caller (the daemon's start) says so.
    pub async fn open(
        cfg: &PostgresConfig,
        queue: &crate::config::QueueConfig,
        clock: crate::clock::SharedClock,
    ) -> Result<Arc<Self>, StateError> {
        let pg_cfg: tokio_postgres::Config = cfg
            .url
            .parse()
            .map_err(|e| StateError::Unavailable(format!("store.postgres_url: {e}")))?;
        let tls = tls::connector(cfg.ca_file.as_deref()).map_err(StateError::Unavailable)?;
        let pool = Pool::new(pg_cfg, tls, cfg.pool);
        {
            let mut c = pool.get().await?;
            schema::migrate(&mut c).await?;
        }
        let (notices, _) = broadcast::channel(4096);
        let (outbox, outbox_rx) = tokio::sync::mpsc::unbounded_channel();
        let me = Arc::new_cyclic(|me| Self {
            pool,
            opts: Limits {
                max_per_recipient: queue.max_messages_per_recipient,
                max_message_bytes: queue.max_message_bytes,
                queue_full_retry_after_s: 1,
            },
            clock,
            revoked: RwLock::new(peers::Revocations::default()),
            trust: RwLock::new(None),
            peer_lookups: tokio::sync::Semaphore::new(peers::PEER_LOOKUPS),
            notices,
            events_announced: tokio::sync::watch::Sender::new(0),
            enqueues: group::Enqueues::default(),
            me: me.clone(),
            outbox,
            outbox_rx: std::sync::Mutex::new(Some(outbox_rx)),
        });
        me.refresh_revocations().await?;
        me.refresh_trust().await?;
        Ok(me)
    }

    /// Start the listener (LISTEN/NOTIFY, reconnecting by itself) and the refresher of
    /// the revocation list and trust store. Ends with `shutdown`.
    pub fn spawn_listener(self: &Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        if let Some(rx) = self
            .outbox_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            listen::send_notifications(self.clone(), rx, shutdown.clone());
        }
        listen::spawn(self.clone(), shutdown);
    }

    /// Announce to every replica, after the commit that made it true (see
    /// [`listen::send_notifications`] for why not inside the transaction).
    pub(crate) fn notify(&self, channel: &'static str, payload: String) {
        let _ = self.outbox.send((channel, payload));
    }
}

impl GatewayState for Postgres {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn replicas(&self) -> Option<&dyn crate::gateway::storage::SharedState> {
        Some(self)
    }

    fn events(&self) -> &dyn crate::gateway::storage::EventTable {
        self
    }

    fn queue_command(&self, msg: ForNode, job: Option<NewJob>) -> Fut<'_, Queued> {
        Box::pin(async move {
            let plain = job.is_none();
            let once = || async {
                match (&job, self.me.upgrade()) {
                    (None, Some(me)) => group::enqueue(&me, msg.clone()).await,
                    _ => queue::queue_command(self, msg.clone(), job.clone()).await,
                }
            };
            settle::settle(once, plain).await
        })
    }

    fn queue_keyed_command(&self, msg: ForNode, key: CommandKey) -> Fut<'_, Queued> {
        Box::pin(async move {
            settle::settle(|| queue::queue_keyed_command(self, &msg, &key), false).await
        })
    }

    fn command_key<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<CommandKey>> {
        Box::pin(jobs::command_key(self, message_id))
    }

    fn forward(&self, msg: ForNode) -> Fut<'_, Queued> {
        self.queue_command(msg, None)
    }

    fn job<'a>(&'a self, key: &'a str) -> Fut<'a, Option<JobRecord>> {
        Box::pin(jobs::job(self, key))
    }

    fn request_node<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<String>> {
        Box::pin(jobs::request_node(self, request_id))
    }

    fn result<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<Vec<u8>>> {
        Box::pin(jobs::result(self, request_id))
    }

    fn file_result(&self, r: FiledResult) -> Fut<'_, ()> {
        Box::pin(async move {
            queue::receive_uploads(self, vec![Upload::Result(r)]).await?;
            Ok(())
        })
    }

    fn receive_uploads(&self, items: Vec<Upload>) -> Fut<'_, Vec<Queued>> {
        Box::pin(async move { queue::receive_uploads(self, items).await })
    }

    fn upload_seen<'a>(&'a self, message_id: &'a str) -> Fut<'a, bool> {
        Box::pin(jobs::upload_seen(self, message_id))
    }

    fn uploads_seen<'a>(
        &'a self,
        message_ids: &'a [String],
    ) -> Fut<'a, std::collections::HashSet<String>> {
        Box::pin(jobs::uploads_seen(self, message_ids))
    }

    fn begin_pull<'a>(&'a self, node: &'a str) -> Fut<'a, u64> {
        Box::pin(async move { delivery::begin_pull(self, node).await })
    }

    fn take_batch<'a>(&'a self, node: &'a str, take: Take<'a>) -> Fut<'a, PullBatch> {
        Box::pin(async move { delivery::take_batch(self, node, take).await })
    }

    fn ack<'a>(&'a self, node: &'a str, ack: NodeAck) -> Fut<'a, Vec<String>> {
        Box::pin(async move { delivery::ack(self, node, ack).await })
    }

    fn inbox_put(&self, m: InboxMessage) -> Fut<'_, Queued> {
        Box::pin(async move {
            let out = queue::receive_uploads(self, vec![Upload::Inbox(m)]).await?;
            Ok(out.into_iter().next().unwrap_or(Queued::Queued))
        })
    }

    fn inbox_list<'a>(&'a self, from: Option<&'a str>, limit: usize) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(async move { inbox::list(self, from, limit).await })
    }

    fn inbox_ack<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<bool>> {
        Box::pin(async move { inbox::ack(self, message_id).await })
    }

    fn message_status<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<MessageStatus>> {
        Box::pin(async move { status::status(self, message_id).await })
    }

    fn queued_for<'a>(&'a self, node: &'a str, limit: usize) -> Fut<'a, Vec<QueuedMessage>> {
        Box::pin(queued::list(self, node, limit))
    }

    fn queue_stats(&self) -> Fut<'_, Vec<QueueStat>> {
        Box::pin(async move { status::stats(self).await })
    }

    fn sweep_expired(&self) -> Fut<'_, Vec<ExpiredMessage>> {
        Box::pin(async move { status::sweep(self).await })
    }

    fn revoke<'a>(
        &'a self,
        jti: &'a str,
        audit: &'a crate::audit::AuditRecord,
    ) -> Fut<'a, Revoked> {
        Box::pin(peers::revoke(self, jti, audit))
    }

    fn revocations(&self, since: u64) -> Fut<'_, RevocationList> {
        Box::pin(peers::revocations(self, since))
    }

    fn is_revoked(&self, jti: &str) -> Result<bool, StateError> {
        self.is_revoked_now(jti)
    }

    fn audit_entries<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(audit::entries(self, node))
    }

    fn audit_entry<'a>(&'a self, node: &'a str, index: u64) -> Fut<'a, Option<Vec<u8>>> {
        Box::pin(audit::entry(self, node, index))
    }

    fn audit_size<'a>(&'a self, node: &'a str) -> Fut<'a, u64> {
        Box::pin(audit::size(self, node))
    }

    fn audit_sizes<'a>(
        &'a self,
        nodes: &'a [String],
    ) -> Fut<'a, std::collections::HashMap<String, u64>> {
        Box::pin(audit::sizes(self, nodes))
    }

    fn audit_checkpoints<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<(u64, String)>> {
        Box::pin(audit::checkpoints(self, node))
    }

    fn audit_extend<'a>(&'a self, node: &'a str, ext: AuditExtension) -> Fut<'a, ()> {
        Box::pin(audit::extend(self, node, ext))
    }

    fn load_trust(&self) -> Result<TrustStore, StateError> {
        self.trust
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|c| c.peers().clone())
            .ok_or_else(|| StateError::Unavailable("trust store not loaded yet".into()))
    }

    fn load_trust_since(
        &self,
        known: Option<u64>,
    ) -> Result<Option<(u64, TrustUpdate)>, StateError> {
        match &*self.trust.read().unwrap_or_else(|p| p.into_inner()) {
            Some(copy) => Ok(copy.since(known)),
            None => Err(StateError::Unavailable("trust store not loaded yet".into())),
        }
    }

    fn durable(&self) -> bool {
        // Durability is the database's: a replica that cannot reach it answers 503 and
        // reconnects by itself; restarting it would not help.
        true
    }

    fn ready(&self) -> Fut<'_, ()> {
        Box::pin(async move {
            tokio::time::timeout(READY_TIMEOUT, self.ready_now())
                .await
                .map_err(|_| {
                    StateError::Unavailable(format!(
                        "PostgreSQL did not answer within {} ms",
                        READY_TIMEOUT.as_millis()
                    ))
                })?
        })
    }

    fn save_trust<'a>(
        &'a self,
        edit: &'a crate::gateway::storage::TrustEdit,
        audit: &'a [crate::audit::AuditRecord],
    ) -> Fut<'a, ()> {
        Box::pin(async move { self.save_trust_now(edit, audit).await })
    }

    fn close(&self) -> Fut<'_, ()> {
        Box::pin(async move { Ok(()) })
    }
}
