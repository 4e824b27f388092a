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

pub mod import;
mod listen;
mod live;
mod pool;
mod queue;
pub mod schema;
mod tls;

use std::sync::{Arc, RwLock};

use tokio::sync::broadcast;
use tokio_postgres::error::SqlState;

use super::Notice;
use super::{
    AuditExtension, FiledResult, ForNode, Fut, GatewayState, InboxMessage, JobRecord, NewJob,
    NodeAck, PullBatch, Queued, RevocationList, Revoked, StateError, Upload,
};
use crate::config::PostgresConfig;
use crate::envelope::{IdentityDocument, Rights, TrustStore};
use crate::store::{ExpiredMessage, MessageStatus, QueueStat, StoreError};
use pool::Pool;

/// How long a pulled message shows as `delivering` (until acknowledged or pulled again).
pub const LEASE_MS: u64 = 30_000;
/// Give staged events their ids, oldest staged first, in one statement: the
/// `events_head` row is locked `FOR UPDATE` until the commit (a second sequencer, at any
/// replica, waits and then reads the advanced head), so ids increase in commit order;
/// rows another sequencer moved meanwhile are skipped by the `DELETE`. Returns how many
/// were moved, and announces the newest id.
const SEQUENCE_EVENTS: &str = "
WITH head AS (
    SELECT next_id FROM events_head
    WHERE one AND EXISTS (SELECT 1 FROM events_staged) FOR UPDATE),
moved AS (
    DELETE FROM events_staged
    WHERE seq IN (SELECT seq FROM events_staged ORDER BY seq LIMIT $1)
    RETURNING seq, ts_ms, event),
numbered AS (
    SELECT (SELECT next_id FROM head) + row_number() OVER (ORDER BY seq) - 1 AS id, ts_ms, event
    FROM moved),
ins AS (
    INSERT INTO events (id, ts_ms, event) SELECT id, ts_ms, event FROM numbered RETURNING id),
advanced AS (
    UPDATE events_head SET next_id = (SELECT next_id FROM head) + (SELECT count(*) FROM moved)
    WHERE one AND EXISTS (SELECT 1 FROM moved) RETURNING next_id),
announced AS (
    SELECT pg_notify($2, (next_id - 1)::text) FROM advanced)
SELECT (SELECT count(*) FROM ins) + 0 * (SELECT count(*) FROM announced)";

/// The most events one sequencing statement moves.
const SEQUENCE_BATCH: i64 = 5_000;

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
    revoked: RwLock<Revocations>,
    /// The trust store as last read (refreshed on `NOTIFY` and by the listener's tick).
    trust: RwLock<Option<TrustStore>>,
    notices: broadcast::Sender<Notice>,
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

#[derive(Default)]
struct Revocations {
    version: u64,
    jtis: std::collections::HashSet<String>,
    /// When the list was last read successfully (0 = never).
    fresh_at_ms: u64,
}

/// A revocation list older than this is not trusted: tokens are refused (503) until
/// the database answers again, rather than honouring one revoked meanwhile.
const REVOCATIONS_STALE_MS: u64 = 15_000;

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

pub(crate) fn i(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}
pub(crate) fn u(v: i64) -> u64 {
    v.max(0) as u64
}

impl Postgres {
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
        let me = Arc::new(Self {
            pool,
            opts: Limits {
                max_per_recipient: queue.max_messages_per_recipient,
                max_message_bytes: queue.max_message_bytes,
                queue_full_retry_after_s: 1,
            },
            clock,
            revoked: RwLock::new(Revocations::default()),
            trust: RwLock::new(None),
            notices,
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

    async fn refresh_revocations(&self) -> Result<(), StateError> {
        let since = self.read_revocations().version;
        let list = self.revocations(since).await?;
        let now = self.now_ms();
        let mut r = self.revoked.write().unwrap_or_else(|p| p.into_inner());
        r.jtis.extend(list.revoked);
        r.version = r.version.max(list.version);
        r.fresh_at_ms = now;
        Ok(())
    }

    fn read_revocations(&self) -> std::sync::RwLockReadGuard<'_, Revocations> {
        self.revoked.read().unwrap_or_else(|p| p.into_inner())
    }

    async fn refresh_trust(&self) -> Result<(), StateError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "SELECT document, may_send, may_issue FROM peers ORDER BY node_id",
                &[],
            )
            .await
            .map_err(unavailable)?;
        let mut t = TrustStore::new();
        for r in rows {
            let doc: IdentityDocument = serde_json::from_str(r.get::<_, &str>(0))
                .map_err(|e| StateError::Corrupt(format!("peers.document: {e}")))?;
            let rights = Rights {
                send: r.get(1),
                issue: r.get(2),
            };
            t.add(doc, rights)
                .map_err(|e| StateError::Corrupt(format!("peers: {e}")))?;
        }
        *self.trust.write().unwrap_or_else(|p| p.into_inner()) = Some(t);
        Ok(())
    }

    /// Replace the enrolled peers with `t` (what `outpost trust add/remove` edits), and
    /// tell every replica.
    async fn save_trust_now(&self, t: &TrustStore) -> Result<(), StateError> {
        let (mut ids, mut roles, mut docs, mut send, mut issue) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for p in t.list() {
            ids.push(p.doc.node_id.clone());
            roles.push(p.doc.role.clone());
            docs.push(
                serde_json::to_string(&p.doc)
                    .map_err(|e| StateError::Corrupt(format!("identity document: {e}")))?,
            );
            send.push(p.rights.send);
            issue.push(p.rights.issue);
        }
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        // Only what changed is written: one `trust add` to a fleet of thousands touches
        // one row.
        tx.execute("DELETE FROM peers WHERE node_id <> ALL($1)", &[&ids])
            .await
            .map_err(unavailable)?;
        tx.execute(
            "INSERT INTO peers (node_id, role, document, may_send, may_issue, added_at_ms)
             SELECT n, r, d, s, i, $6
             FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::bool[]) AS x(n, r, d, s, i)
             ON CONFLICT (node_id) DO UPDATE
                 SET role = excluded.role, document = excluded.document,
                     may_send = excluded.may_send, may_issue = excluded.may_issue
                 WHERE (peers.role, peers.document, peers.may_send, peers.may_issue)
                       IS DISTINCT FROM
                       (excluded.role, excluded.document, excluded.may_send, excluded.may_issue)",
            &[&ids, &roles, &docs, &send, &issue, &i(self.now_ms())],
        )
        .await
        .map_err(unavailable)?;
        tx.execute("SELECT pg_notify($1, '')", &[&listen::CH_TRUST])
            .await
            .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        self.refresh_trust().await
    }

    /// Record a node request's signature; false when any replica saw it before.
    async fn first_use_now(
        &self,
        signature: &[u8; 64],
        keep_until_ms: u64,
    ) -> Result<bool, StateError> {
        let mut c = self.pool.get().await?;
        let sig: String = signature.iter().map(|b| format!("{b:02x}")).collect();
        // Relaxed commit: a replay window that loses its last moments only if
        // PostgreSQL itself crashes (each replica also keeps its own in memory).
        let st = c
            .prep(
                "INSERT INTO seen_signatures (signature, keep_until_ms) VALUES ($1, $2)
                 ON CONFLICT DO NOTHING RETURNING 1",
            )
            .await?;
        let rows = c.query_relaxed(&st, &[&sig, &i(keep_until_ms)]).await?;
        Ok(rows.len() == 1)
    }
}

impl GatewayState for Postgres {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn queue_command(&self, msg: ForNode, job: Option<NewJob>) -> Fut<'_, Queued> {
        Box::pin(async move { queue::queue_command(self, msg, job).await })
    }

    fn forward(&self, msg: ForNode) -> Fut<'_, Queued> {
        Box::pin(async move { queue::queue_command(self, msg, None).await })
    }

    fn job<'a>(&'a self, key: &'a str) -> Fut<'a, Option<JobRecord>> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            let row = c
                .query_opt(
                    "SELECT message_id, tool_name, args_sha256 FROM jobs WHERE job_key = $1",
                    &[&key],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.map(|r| JobRecord {
                message_id: r.get(0),
                tool_name: r.get(1),
                args_sha256: r.get(2),
            }))
        })
    }

    fn request_node<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<String>> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            let row = c
                .query_opt(
                    "SELECT node_id FROM task_requests WHERE request_id = $1",
                    &[&request_id],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn result<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            let row = c
                .query_opt(
                    "SELECT result FROM task_results WHERE request_id = $1",
                    &[&request_id],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.map(|r| r.get(0)))
        })
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
        Box::pin(async move {
            let c = self.pool.get().await?;
            let row = c
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM remembered_ids
                                    WHERE scope = ANY($1) AND id = $2)",
                    &[&vec![queue::SCOPE_RESULTS, queue::Q_INBOX], &message_id],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.get(0))
        })
    }

    fn uploads_seen<'a>(
        &'a self,
        message_ids: &'a [String],
    ) -> Fut<'a, std::collections::HashSet<String>> {
        Box::pin(async move {
            let mut c = self.pool.get().await?;
            let st = c
                .prep("SELECT id FROM remembered_ids WHERE scope = ANY($1) AND id = ANY($2)")
                .await?;
            let rows = c
                .query(
                    &st,
                    &[&vec![queue::SCOPE_RESULTS, queue::Q_INBOX], &message_ids],
                )
                .await
                .map_err(unavailable)?;
            Ok(rows.into_iter().map(|r| r.get(0)).collect())
        })
    }

    fn begin_pull<'a>(&'a self, node: &'a str) -> Fut<'a, u64> {
        Box::pin(async move { queue::begin_pull(self, node).await })
    }

    fn take_batch<'a>(
        &'a self,
        node: &'a str,
        pull: u64,
        max: usize,
        max_bytes: usize,
    ) -> Fut<'a, PullBatch> {
        Box::pin(async move { queue::take_batch(self, node, pull, max, max_bytes).await })
    }

    fn ack<'a>(&'a self, node: &'a str, ack: NodeAck) -> Fut<'a, Vec<String>> {
        Box::pin(async move { queue::ack(self, node, ack).await })
    }

    fn inbox_put(&self, m: InboxMessage) -> Fut<'_, Queued> {
        Box::pin(async move {
            let out = queue::receive_uploads(self, vec![Upload::Inbox(m)]).await?;
            Ok(out.into_iter().next().unwrap_or(Queued::Queued))
        })
    }

    fn inbox_list<'a>(&'a self, from: Option<&'a str>, limit: usize) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(async move { queue::inbox_list(self, from, limit).await })
    }

    fn inbox_ack<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<bool>> {
        Box::pin(async move { queue::inbox_ack(self, message_id).await })
    }

    fn message_status<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<MessageStatus>> {
        Box::pin(async move { queue::status(self, message_id).await })
    }

    fn queue_stats(&self) -> Fut<'_, Vec<QueueStat>> {
        Box::pin(async move { queue::stats(self).await })
    }

    fn sweep_expired(&self) -> Fut<'_, Vec<ExpiredMessage>> {
        Box::pin(async move { queue::sweep(self).await })
    }

    fn revoke<'a>(&'a self, jti: &'a str) -> Fut<'a, Revoked> {
        Box::pin(async move {
            let mut c = self.pool.get().await?;
            let tx = c.transaction().await.map_err(unavailable)?;
            // Versions are assigned one at a time, across replicas.
            tx.execute("LOCK TABLE revocations IN EXCLUSIVE MODE", &[])
                .await
                .map_err(unavailable)?;
            if tx
                .query_opt("SELECT 1 FROM revocations WHERE jti = $1", &[&jti])
                .await
                .map_err(unavailable)?
                .is_some()
            {
                return Ok(Revoked::Duplicate);
            }
            let version: i64 = tx
                .query_one(
                    "INSERT INTO revocations (version, jti, revoked_at_ms)
                     SELECT coalesce(max(version), 0) + 1, $1, $2 FROM revocations
                     RETURNING version",
                    &[&jti, &i(self.now_ms())],
                )
                .await
                .map_err(unavailable)?
                .get(0);
            tx.execute("SELECT pg_notify($1, $2)", &[&listen::CH_REVOKED, &jti])
                .await
                .map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)?;
            let mut r = self.revoked.write().unwrap_or_else(|p| p.into_inner());
            r.jtis.insert(jti.to_string());
            Ok(Revoked::Added {
                version: u(version),
            })
        })
    }

    fn revocations(&self, since: u64) -> Fut<'_, RevocationList> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            let rows = c
                .query(
                    "SELECT version, jti FROM revocations WHERE version > $1 ORDER BY version",
                    &[&i(since)],
                )
                .await
                .map_err(unavailable)?;
            let newest: i64 = c
                .query_one("SELECT coalesce(max(version), 0) FROM revocations", &[])
                .await
                .map_err(unavailable)?
                .get(0);
            Ok(RevocationList {
                revoked: rows.iter().map(|r| r.get(1)).collect(),
                version: u(newest),
            })
        })
    }

    fn is_revoked(&self, jti: &str) -> Result<bool, StateError> {
        let r = self.read_revocations();
        if r.jtis.contains(jti) {
            return Ok(true);
        }
        if self.now_ms().saturating_sub(r.fresh_at_ms) > REVOCATIONS_STALE_MS {
            return Err(StateError::Unavailable(
                "the revocation list could not be refreshed from the database".into(),
            ));
        }
        Ok(false)
    }

    fn audit_entries<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            let rows = c
                .query(
                    "SELECT entry FROM audit_entries WHERE node_id = $1 ORDER BY idx",
                    &[&node],
                )
                .await
                .map_err(unavailable)?;
            Ok(rows.into_iter().map(|r| r.get(0)).collect())
        })
    }

    fn audit_entry<'a>(&'a self, node: &'a str, index: u64) -> Fut<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            let row = c
                .query_opt(
                    "SELECT entry FROM audit_entries WHERE node_id = $1 AND idx = $2",
                    &[&node, &i(index)],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn audit_size<'a>(&'a self, node: &'a str) -> Fut<'a, u64> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            let n: i64 = c
                .query_one(
                    "SELECT coalesce(max(idx) + 1, 0) FROM audit_entries WHERE node_id = $1",
                    &[&node],
                )
                .await
                .map_err(unavailable)?
                .get(0);
            Ok(u(n))
        })
    }

    fn audit_sizes<'a>(
        &'a self,
        nodes: &'a [String],
    ) -> Fut<'a, std::collections::HashMap<String, u64>> {
        Box::pin(async move {
            let mut c = self.pool.get().await?;
            // Each node's newest entry by the primary key, backwards: one index probe
            // per node, whatever the length of the logs.
            let st = c
                .prep(
                    "SELECT n, coalesce((SELECT idx + 1 FROM audit_entries WHERE node_id = n
                                         ORDER BY idx DESC LIMIT 1), 0)
                     FROM unnest($1::text[]) AS n",
                )
                .await?;
            let rows = c.query(&st, &[&nodes]).await.map_err(unavailable)?;
            Ok(rows.into_iter().map(|r| (r.get(0), u(r.get(1)))).collect())
        })
    }

    fn audit_extend<'a>(&'a self, node: &'a str, ext: AuditExtension) -> Fut<'a, ()> {
        Box::pin(async move {
            let mut c = self.pool.get().await?;
            let tx = c.transaction().await.map_err(unavailable)?;
            // One extension of a node's copy at a time, across replicas; it must start
            // exactly at the copy's end (a replica with a stale view is refused).
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('audit/' || $1, 0))",
                &[&node],
            )
            .await
            .map_err(unavailable)?;
            let size: i64 = tx
                .query_one(
                    "SELECT coalesce(max(idx) + 1, 0) FROM audit_entries WHERE node_id = $1",
                    &[&node],
                )
                .await
                .map_err(unavailable)?
                .get(0);
            if u(size) != ext.start {
                return Err(StateError::Store(StoreError::AuditIndex {
                    expected: u(size),
                    got: ext.start,
                }));
            }
            let idx: Vec<i64> = (0..ext.entries.len())
                .map(|k| i(ext.start + k as u64))
                .collect();
            tx.execute(
                "INSERT INTO audit_entries (node_id, idx, entry)
                 SELECT $1, * FROM unnest($2::bigint[], $3::bytea[])",
                &[&node, &idx, &ext.entries],
            )
            .await
            .map_err(unavailable)?;
            tx.execute(
                "INSERT INTO audit_checkpoints (node_id, size, note) VALUES ($1, $2, $3)
                 ON CONFLICT (node_id, size) DO UPDATE SET note = excluded.note",
                &[&node, &i(ext.checkpoint_size), &ext.checkpoint],
            )
            .await
            .map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)?;
            Ok(())
        })
    }

    fn load_trust(&self) -> Result<TrustStore, StateError> {
        self.trust
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| StateError::Unavailable("trust store not loaded yet".into()))
    }

    fn durable(&self) -> bool {
        // Durability is the database's: a replica that cannot reach it answers 503 and
        // reconnects by itself; restarting it would not help.
        true
    }

    fn save_trust<'a>(&'a self, t: &'a TrustStore) -> Fut<'a, ()> {
        Box::pin(async move { self.save_trust_now(t).await })
    }

    fn first_use<'a>(&'a self, signature: &'a [u8; 64], keep_until_ms: u64) -> Fut<'a, bool> {
        Box::pin(async move { self.first_use_now(signature, keep_until_ms).await })
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn node_heard<'a>(&'a self, node: &'a str, now_ms: u64) -> Fut<'a, bool> {
        Box::pin(async move { live::heard(self, node, now_ms).await })
    }

    fn nodes_polling(&self, nodes: Vec<String>, now_ms: u64, until_ms: u64) -> Fut<'_, ()> {
        Box::pin(async move { live::polling(self, nodes, now_ms, until_ms).await })
    }

    fn sweep_offline(&self, silent_since_ms: u64, now_ms: u64) -> Fut<'_, Vec<String>> {
        Box::pin(async move { live::sweep_offline(self, silent_since_ms, now_ms).await })
    }

    fn nodes_seen<'a>(
        &'a self,
        nodes: &'a [String],
    ) -> Fut<'a, std::collections::HashMap<String, super::NodeSeen>> {
        Box::pin(async move { live::seen(self, nodes).await })
    }

    fn append_events(&self, events: Vec<(u64, String)>) -> Fut<'_, u64> {
        Box::pin(async move {
            let mut c = self.pool.get().await?;
            if events.is_empty() {
                let newest: i64 = c
                    .query_one("SELECT next_id - 1 FROM events_head", &[])
                    .await
                    .map_err(unavailable)?
                    .get(0);
                return Ok(u(newest));
            }
            // Staged (durable, no lock); [`Self::sequence_events`] gives them ids.
            let st = c
                .prep(
                    "INSERT INTO events_staged (ts_ms, event)
                     SELECT t, e FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS x(t, e, n)
                     ORDER BY n",
                )
                .await?;
            let ts: Vec<i64> = events.iter().map(|(t, _)| i(*t)).collect();
            let json: Vec<&str> = events.iter().map(|(_, j)| j.as_str()).collect();
            c.execute(&st, &[&ts, &json]).await.map_err(unavailable)?;
            Ok(0)
        })
    }

    fn sequence_events(&self) -> Fut<'_, u64> {
        Box::pin(async move {
            let mut c = self.pool.get().await?;
            let st = c.prep(SEQUENCE_EVENTS).await?;
            let mut moved = 0u64;
            loop {
                let n: i64 = c
                    .query_one(&st, &[&SEQUENCE_BATCH, &listen::CH_EVENTS])
                    .await
                    .map_err(unavailable)?
                    .get(0);
                moved += u(n);
                if n < SEQUENCE_BATCH {
                    return Ok(moved);
                }
            }
        })
    }

    fn events_after(&self, after: u64, limit: usize) -> Fut<'_, Vec<(u64, u64, String)>> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            let rows = c
                .query(
                    "SELECT id, ts_ms, event FROM events WHERE id > $1 ORDER BY id LIMIT $2",
                    &[&i(after), &(limit as i64)],
                )
                .await
                .map_err(unavailable)?;
            Ok(rows
                .into_iter()
                .map(|r| (u(r.get(0)), u(r.get(1)), r.get(2)))
                .collect())
        })
    }

    fn notices(&self) -> Option<broadcast::Receiver<Notice>> {
        Some(self.notices.subscribe())
    }

    fn close(&self) -> Fut<'_, ()> {
        Box::pin(async move { Ok(()) })
    }
}
