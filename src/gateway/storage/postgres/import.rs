//! `outpost gateway migrate --to postgres://…`: an embedded gateway's state copied into
//! an empty PostgreSQL database in one transaction (all of it or nothing), then
//! counted and the audit roots compared.
//!
//! What is copied: queued messages of both queues (per recipient in queue order, with
//! their TTLs and attempts), job bindings, task requests and results, the trust store,
//! revocations (with their versions), every node's audit copy and checkpoints, the
//! tenant registry. What is
//! not: the finished-message history (`/v1/messages/{id}` of messages delivered or
//! expired before the move answers `not_found`) and the windows that refuse replayed
//! uploads (a node re-sending an upload the old gateway already took is deduplicated by
//! the node's own outbox state, which only forgets it once acknowledged).

use super::super::snapshot::Snapshot;
use super::super::StateError;
use super::{i, unavailable, Postgres};
use crate::audit::{leaf_hash, Frontier};
use crate::store::names::{Q_GATEWAY_INBOX, Q_TO_NODE};
use crate::store::StoredMessage;

fn corrupt(what: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Corrupt(format!("{what}: {e}"))
}

/// What was copied, and the audit roots compared.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub messages: u64,
    pub jobs: u64,
    pub results: u64,
    pub revocations: u64,
    pub peers: u64,
    pub audit_nodes: u64,
    pub audit_entries: u64,
    pub tenants: u64,
}

impl Report {
    /// The counts the copy of `snap` must show.
    fn of(snap: &Snapshot) -> Self {
        Report {
            messages: snap.messages.len() as u64,
            jobs: snap.jobs.len() as u64,
            results: snap.results.len() as u64,
            revocations: snap.revocations.len() as u64,
            peers: snap.trust.len() as u64,
            audit_nodes: snap.audit.iter().filter(|(_, e, _)| !e.is_empty()).count() as u64,
            audit_entries: snap.audit.iter().map(|(_, e, _)| e.len() as u64).sum(),
            tenants: snap.tenants.len() as u64,
        }
    }
}

fn root(entries: &[Vec<u8>]) -> [u8; 32] {
    let mut f = Frontier::new();
    for e in entries {
        f.push(leaf_hash(e));
    }
    f.root()
}

impl Postgres {
    /// Copy `snap` into this (empty) database in one transaction, then verify counts
    /// and audit roots by reading it back.
    pub async fn import(&self, snap: &Snapshot) -> Result<Report, StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let used: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM messages) OR EXISTS (SELECT 1 FROM message_status)
                     OR EXISTS (SELECT 1 FROM jobs) OR EXISTS (SELECT 1 FROM task_results)
                     OR EXISTS (SELECT 1 FROM revocations) OR EXISTS (SELECT 1 FROM peers)
                     OR EXISTS (SELECT 1 FROM audit_entries) OR EXISTS (SELECT 1 FROM tenants)",
                &[],
            )
            .await
            .map_err(unavailable)?
            .get(0);
        if used {
            return Err(StateError::Store(crate::store::StoreError::Invalid(
                "the target database already holds gateway state; migrate into an empty one".into(),
            )));
        }
        copy_queues(&tx, snap).await?;
        let now = i(crate::clock::Clock::now_ms(&*self.clock));
        copy_the_rest(&tx, snap, now).await?;
        tx.commit().await.map_err(unavailable)?;
        drop(c);
        self.verify_import(snap).await
    }

    async fn verify_import(&self, snap: &Snapshot) -> Result<Report, StateError> {
        let c = self.pool.get().await?;
        let count = |sql: &'static str| {
            let c = &c;
            async move {
                c.query_one(sql, &[])
                    .await
                    .map(|r| r.get::<_, i64>(0) as u64)
                    .map_err(unavailable)
            }
        };
        let report = Report {
            messages: count("SELECT count(*) FROM messages").await?,
            jobs: count("SELECT count(*) FROM jobs").await?,
            results: count("SELECT count(*) FROM task_results").await?,
            revocations: count("SELECT count(*) FROM revocations").await?,
            peers: count("SELECT count(*) FROM peers").await?,
            audit_nodes: count("SELECT count(DISTINCT node_id) FROM audit_entries").await?,
            audit_entries: count("SELECT count(*) FROM audit_entries").await?,
            tenants: count("SELECT count(*) FROM tenants").await?,
        };
        let want = Report::of(snap);
        if report != want {
            return Err(StateError::Corrupt(format!(
                "copied counts differ: source {want:?}, database {report:?}"
            )));
        }
        // Per recipient, the queue order survived.
        for q in [Q_TO_NODE, Q_GATEWAY_INBOX] {
            let rows = c
                .query(
                    "SELECT message_id FROM messages WHERE queue = $1
                     ORDER BY peer, priority DESC, seq",
                    &[&q],
                )
                .await
                .map_err(unavailable)?;
            let got: Vec<String> = rows.into_iter().map(|r| r.get(0)).collect();
            let mut want: Vec<&StoredMessage> =
                snap.messages.iter().filter(|m| m.queue == q).collect();
            want.sort_by(|a, b| {
                (a.peer.as_str(), std::cmp::Reverse(a.priority), a.seq).cmp(&(
                    b.peer.as_str(),
                    std::cmp::Reverse(b.priority),
                    b.seq,
                ))
            });
            if got
                .iter()
                .map(String::as_str)
                .ne(want.iter().map(|m| m.message_id.as_str()))
            {
                return Err(StateError::Corrupt(format!("queue order of {q} differs")));
            }
        }
        for (node, entries, _) in &snap.audit {
            let rows = c
                .query(
                    "SELECT entry FROM audit_entries WHERE node_id = $1 ORDER BY idx",
                    &[node],
                )
                .await
                .map_err(unavailable)?;
            let copied: Vec<Vec<u8>> = rows.into_iter().map(|r| r.get(0)).collect();
            if root(&copied) != root(entries) {
                return Err(StateError::Corrupt(format!(
                    "audit root of {node} differs after the copy"
                )));
            }
        }
        Ok(report)
    }
}

/// The queues (in order per recipient: sequence numbers follow it), their depths, and
/// the job bindings and requests of tool calls.
async fn copy_queues(
    tx: &tokio_postgres::Transaction<'_>,
    snap: &Snapshot,
) -> Result<(), StateError> {
    // In queue order per recipient: sequence numbers follow it.
    for m in &snap.messages {
        tx.execute(
            "INSERT INTO messages (message_id, queue, peer, priority, payload_type,
                 created_at_ms, expires_at_ms, body, max_attempts, attempts)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                &m.message_id,
                &m.queue,
                &m.peer,
                &(m.priority as i16),
                &m.payload_type,
                &i(m.created_at_ms),
                &i(m.expires_at_ms),
                &m.body,
                &(m.max_attempts.min(i32::MAX as u32) as i32),
                &(m.attempts.min(i32::MAX as u32) as i32),
            ],
        )
        .await
        .map_err(unavailable)?;
    }
    tx.execute(
        "INSERT INTO queue_depth (queue, peer, shard, n)
         SELECT queue, peer, 0, count(*) FROM messages GROUP BY queue, peer",
        &[],
    )
    .await
    .map_err(unavailable)?;
    for (key, job) in &snap.jobs {
        let node = snap
            .requests
            .iter()
            .find(|(r, _)| r == &job.message_id)
            .map(|(_, n)| n.as_str())
            .unwrap_or_default();
        tx.execute(
            "INSERT INTO jobs (job_key, message_id, tool_name, args_sha256, node_id)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                key,
                &job.message_id,
                &job.tool_name,
                &job.args_sha256,
                &node,
            ],
        )
        .await
        .map_err(unavailable)?;
    }
    for (request, node) in &snap.requests {
        tx.execute(
            "INSERT INTO task_requests (request_id, node_id) VALUES ($1, $2)",
            &[request, node],
        )
        .await
        .map_err(unavailable)?;
    }
    Ok(())
}

/// Results, revocations, the trust store and the nodes' audit copies.
async fn copy_the_rest(
    tx: &tokio_postgres::Transaction<'_>,
    snap: &Snapshot,
    now: i64,
) -> Result<(), StateError> {
    for (request, result) in &snap.results {
        tx.execute(
            "INSERT INTO task_results (request_id, result, filed_at_ms) VALUES ($1, $2, $3)",
            &[request, result, &now],
        )
        .await
        .map_err(unavailable)?;
    }
    for t in &snap.tenants {
        let record = serde_json::to_string(t).map_err(|e| corrupt("tenant", e))?;
        tx.execute(
            "INSERT INTO tenants (name, record) VALUES ($1, $2)",
            &[&t.name, &record],
        )
        .await
        .map_err(unavailable)?;
    }
    for (version, jti) in &snap.revocations {
        tx.execute(
            "INSERT INTO revocations (version, jti, revoked_at_ms) VALUES ($1, $2, $3)",
            &[&i(*version), jti, &now],
        )
        .await
        .map_err(unavailable)?;
    }
    for p in snap.trust.list() {
        let doc = serde_json::to_string(&p.doc).map_err(|e| corrupt("document", e))?;
        tx.execute(
            "INSERT INTO peers (node_id, role, document, may_send, may_issue, added_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &p.address(),
                &p.doc.role,
                &doc,
                &p.rights.send,
                &p.rights.issue,
                &now,
            ],
        )
        .await
        .map_err(unavailable)?;
    }
    for (node, entries, cps) in &snap.audit {
        let idx: Vec<i64> = (0..entries.len() as i64).collect();
        tx.execute(
            "INSERT INTO audit_entries (node_id, idx, entry)
             SELECT $1, * FROM unnest($2::bigint[], $3::bytea[])",
            &[node, &idx, entries],
        )
        .await
        .map_err(unavailable)?;
        for (size, note) in cps {
            tx.execute(
                "INSERT INTO audit_checkpoints (node_id, size, note) VALUES ($1, $2, $3)",
                &[node, &i(*size), note],
            )
            .await
            .map_err(unavailable)?;
        }
    }
    Ok(())
}
