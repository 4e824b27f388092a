//! The queues in PostgreSQL, the way in: per-recipient FIFO enqueue with duplicates by
//! id and caps, and the uploads nodes send. Pulls and acks are `delivery.rs`, the
//! gateway's own inbox `inbox.rs`, status, statistics and expiry `status.rs`.

use tokio_postgres::Transaction;

use super::super::{
    CommandKey, ForNode, GatewayState, InboxMessage, NewJob, Queued, StateError, Upload,
};
use super::{after_commit, i, listen, u, unavailable, Postgres};
use crate::store::StoreError;

pub use crate::store::names::{Q_GATEWAY_INBOX, Q_TO_NODE, SCOPE_RESULTS};

/// Enqueue in one statement (one round trip, its own commit when run outside a
/// transaction): the id must be unknown (queued, finished, or remembered) and the
/// recipient under its cap; `$11` is the connection's `queue_depth` shard; `$12`, `$13`
/// an event (`ts_ms`, JSON) committed with the message into `events_staged`, or NULL.
/// The recipient's long-polls are woken after the commit ([`Postgres::notify`]).
///
/// No lock: two enqueues that overlap in time have no order between them; one that
/// starts after another's commit (a client that waited for its 202) gets a higher
/// `seq`, so what a sender queued one after the other is pulled in that order. The cap
/// is checked against the committed depth, so enqueues racing at the cap may pass it
/// by as many as are in flight at once.
const ENQUEUE: &str = "
    WITH known AS (
        SELECT EXISTS (SELECT 1 FROM messages WHERE message_id = $1)
            OR EXISTS (SELECT 1 FROM message_status WHERE message_id = $1)
            OR EXISTS (SELECT 1 FROM remembered_ids WHERE scope = $2 AND id = $1) AS k),
    depth AS (
        SELECT coalesce(sum(n), 0)::bigint AS n FROM queue_depth
        WHERE queue = $2 AND peer = $3),
    ins AS (
        INSERT INTO messages (message_id, queue, peer, priority, payload_type,
                              created_at_ms, expires_at_ms, body, max_attempts)
        SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
        WHERE NOT (SELECT k FROM known) AND (SELECT n FROM depth) < $10
        ON CONFLICT (message_id) DO NOTHING
        RETURNING seq),
    counted AS (
        INSERT INTO queue_depth (queue, peer, shard, n) SELECT $2, $3, $11, 1 FROM ins
        ON CONFLICT (queue, peer, shard) DO UPDATE SET n = queue_depth.n + 1
        RETURNING 1),
    staged AS (
        INSERT INTO events_staged (ts_ms, event) SELECT $12, $13 FROM ins
        WHERE $13::text IS NOT NULL
        RETURNING 1)
    SELECT (SELECT count(*) FROM ins), (SELECT k FROM known), (SELECT n FROM depth),
           (SELECT count(*) FROM counted), (SELECT count(*) FROM staged)";

/// Rows of `queue_depth` per recipient.
pub const DEPTH_SHARDS: i16 = 64;

struct Row<'a> {
    queue: &'a str,
    peer: &'a str,
    message_id: &'a str,
    payload_type: &'a str,
    priority: u8,
    created_at_ms: u64,
    expires_at_ms: u64,
    body: &'a [u8],
    max_attempts: u32,
    /// Committed with the message into `events_staged`.
    event: Option<(u64, &'a str)>,
}

/// What is refused before the database is asked: too large, or already expired.
fn check(pg: &Postgres, m: &Row<'_>) -> Result<(), StateError> {
    if m.body.len() as u64 > pg.opts.max_message_bytes {
        return Err(StoreError::TooLarge {
            size: m.body.len() as u64,
            max: pg.opts.max_message_bytes,
        }
        .into());
    }
    if m.expires_at_ms <= pg.now_ms() {
        return Err(StoreError::Expired.into());
    }
    Ok(())
}

/// Run the prepared [`ENQUEUE`] for one checked message on `c` (a client: its own
/// commit; a transaction: with the rest of it). The outer error is the database's.
async fn execute<C: tokio_postgres::GenericClient>(
    pg: &Postgres,
    c: &C,
    enqueue: &tokio_postgres::Statement,
    m: Row<'_>,
    shard: i16,
) -> Result<Result<Queued, StateError>, tokio_postgres::Error> {
    let row = c
        .query_one(
            enqueue,
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
                &i(pg.opts.max_per_recipient),
                &shard,
                &m.event.map(|(ts, _)| i(ts)),
                &m.event.map(|(_, e)| e),
            ],
        )
        .await?;
    let (inserted, known, depth): (i64, bool, i64) = (row.get(0), row.get(1), row.get(2));
    Ok(if inserted == 1 {
        Ok(Queued::Queued)
    } else if known || u(depth) < pg.opts.max_per_recipient {
        // Known, or inserted by a concurrent request with the same id.
        Ok(Queued::Duplicate)
    } else {
        Err(StoreError::QueueFull {
            retry_after_s: pg.opts.queue_full_retry_after_s,
        }
        .into())
    })
}

/// Insert one message with the prepared [`ENQUEUE`] on `c` (a client: its own commit;
/// a transaction: with the rest of it).
async fn insert<C: tokio_postgres::GenericClient>(
    pg: &Postgres,
    c: &C,
    enqueue: &tokio_postgres::Statement,
    m: Row<'_>,
    shard: i16,
) -> Result<Queued, StateError> {
    check(pg, &m)?;
    execute(pg, c, enqueue, m, shard)
        .await
        .map_err(unavailable)?
}

/// One message in its own transaction (the statement's own commit: once it is sent,
/// a lost answer leaves the outcome unknown, see [`after_commit`]).
pub(super) async fn insert_alone(pg: &Postgres, msg: &ForNode) -> Result<Queued, StateError> {
    let mut c = pg.pool.get().await?;
    let enqueue = c.prep(ENQUEUE).await?;
    let m = row(msg);
    check(pg, &m)?;
    if c.is_closed() {
        return Err(StateError::Unavailable(
            "postgres: the connection closed".into(),
        ));
    }
    let shard = c.shard();
    execute(pg, &*c, &enqueue, m, shard)
        .await
        .map_err(after_commit)?
}

/// A group of messages in one transaction on one connection, the statements pipelined
/// (sent without waiting for each answer) in the group's order: an answer per message
/// once the group is committed. See [`group`](super::group).
pub(super) async fn insert_group(
    pg: &Postgres,
    msgs: &[ForNode],
) -> Result<Vec<Result<Queued, StateError>>, Failed> {
    if let [msg] = msgs {
        return Ok(vec![insert_alone(pg, msg).await]);
    }
    let mut c = pg.pool.get().await.map_err(Failed::Connection)?;
    let enqueue = c.prep(ENQUEUE).await.map_err(Failed::Connection)?;
    let shard = c.shard();
    let checked: Vec<Result<(), StateError>> = msgs.iter().map(|m| check(pg, &row(m))).collect();
    let tx = c
        .transaction()
        .await
        .map_err(|e| Failed::Connection(unavailable(e)))?;
    let runs = futures_util::future::join_all(
        msgs.iter()
            .zip(&checked)
            .filter(|(_, ok)| ok.is_ok())
            .map(|(m, _)| execute(pg, &tx, &enqueue, row(m), shard)),
    )
    .await;
    let mut ran = Vec::with_capacity(runs.len());
    for run in runs {
        ran.push(run.map_err(failed)?);
    }
    tx.commit()
        .await
        .map_err(|e| Failed::Connection(after_commit(e)))?;
    let mut ran = ran.into_iter();
    Ok(checked
        .into_iter()
        .map(|c| match c {
            Ok(()) => ran.next().unwrap_or(Err(StateError::Unavailable(
                "an enqueue of the group has no answer".into(),
            ))),
            Err(e) => Err(e),
        })
        .collect())
}

/// Why a group's transaction did not commit.
pub enum Failed {
    /// A statement's error (bad data in one message): nothing of the group is kept.
    Statement,
    /// The connection or the commit failed: every message of the group gets this.
    Connection(StateError),
}

/// A statement's error fails the group's transaction; the connection's fails the group.
fn failed(e: tokio_postgres::Error) -> Failed {
    match e.as_db_error().map(|db| &db.code().code()[..2]) {
        // 08 connection, 53 resources, 57 operator intervention (shutdown).
        Some("08" | "53" | "57") | None => Failed::Connection(unavailable(e)),
        Some(_) => Failed::Statement,
    }
}

fn row(msg: &ForNode) -> Row<'_> {
    Row {
        queue: Q_TO_NODE,
        peer: &msg.node_id,
        message_id: &msg.message_id,
        payload_type: &msg.payload_type,
        priority: msg.priority,
        created_at_ms: msg.created_at_ms,
        expires_at_ms: msg.expires_at_ms,
        body: &msg.envelope,
        max_attempts: msg.max_attempts,
        event: msg.event.as_ref().map(|(ts, e)| (*ts, e.as_str())),
    }
}

pub async fn queue_command(
    pg: &Postgres,
    msg: ForNode,
    job: Option<NewJob>,
) -> Result<Queued, StateError> {
    let Some(job) = job else {
        // One statement, its own commit (without a group: see `group.rs`).
        let q = insert_alone(pg, &msg).await?;
        if q == Queued::Queued {
            pg.notify(listen::CH_QUEUED, msg.node_id);
        }
        return Ok(q);
    };
    let mut c = pg.pool.get().await?;
    let enqueue = c.prep(ENQUEUE).await?;
    let bind = c
        .prep(
            "INSERT INTO jobs (job_key, message_id, tool_name, args_sha256, node_id)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (job_key) DO NOTHING",
        )
        .await?;
    let request = c
        .prep(
            "INSERT INTO task_requests (request_id, node_id) VALUES ($1, $2)
             ON CONFLICT (request_id) DO UPDATE SET node_id = excluded.node_id",
        )
        .await?;
    let shard = c.shard();
    let tx = c.transaction().await.map_err(unavailable)?;
    // The job binding first: a second replica racing with the same job id finds it
    // taken and queues nothing (the caller then answers from the binding).
    let bound = tx
        .execute(
            &bind,
            &[
                &job.key,
                &job.record.message_id,
                &job.record.tool_name,
                &job.record.args_sha256,
                &msg.node_id,
            ],
        )
        .await
        .map_err(unavailable)?;
    if bound == 0 {
        return Ok(Queued::Duplicate);
    }
    tx.execute(&request, &[&msg.message_id, &msg.node_id])
        .await
        .map_err(unavailable)?;
    if insert(pg, &tx, &enqueue, row(&msg), shard).await? == Queued::Duplicate {
        // Nothing of it is kept (the job binding included).
        return Ok(Queued::Duplicate);
    }
    tx.commit().await.map_err(after_commit)?;
    pg.notify(listen::CH_QUEUED, msg.node_id);
    Ok(Queued::Queued)
}

/// Bind a command's idempotency key, unless a live one holds its message id (one past
/// its keep-until, not yet pruned, is replaced): one row written, or none.
const BIND_KEY: &str = "
    INSERT INTO command_keys (message_id, subject, request_sha256, expires_at_ms, keep_until_ms)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (message_id) DO UPDATE
        SET subject = excluded.subject, request_sha256 = excluded.request_sha256,
            expires_at_ms = excluded.expires_at_ms, keep_until_ms = excluded.keep_until_ms
        WHERE command_keys.keep_until_ms <= $6";

/// A command and its caller's idempotency key in one transaction: `Duplicate` (and
/// nothing kept) when the key or the message id is taken.
pub async fn queue_keyed_command(
    pg: &Postgres,
    msg: &ForNode,
    key: &CommandKey,
) -> Result<Queued, StateError> {
    let mut c = pg.pool.get().await?;
    let enqueue = c.prep(ENQUEUE).await?;
    let bind = c.prep(BIND_KEY).await?;
    let shard = c.shard();
    let tx = c.transaction().await.map_err(unavailable)?;
    // The key first: a replica racing with the same key waits here for this
    // transaction, then finds the key taken and queues nothing.
    let bound = tx
        .execute(
            &bind,
            &[
                &key.message_id,
                &key.subject,
                &key.request_sha256,
                &i(key.expires_at_ms),
                &i(key.keep_until_ms),
                &i(pg.now_ms()),
            ],
        )
        .await
        .map_err(unavailable)?;
    if bound == 0 {
        return Ok(Queued::Duplicate);
    }
    if insert(pg, &tx, &enqueue, row(msg), shard).await? == Queued::Duplicate {
        // The message id is another's: the key is not kept either.
        return Ok(Queued::Duplicate);
    }
    tx.commit().await.map_err(after_commit)?;
    pg.notify(listen::CH_QUEUED, msg.node_id.clone());
    Ok(Queued::Queued)
}

/// Results of one upload filed in one statement: `(request_id, result bytes,
/// result message id, remember until)`; the last of two for one request wins, as if
/// they had come one after the other.
const FILE_RESULTS: &str = "
WITH r AS (
    SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bigint[])
        WITH ORDINALITY AS x(request_id, result, result_id, keep, n)),
filed AS (
    INSERT INTO task_results (request_id, result, filed_at_ms)
    SELECT DISTINCT ON (request_id) request_id, result, $5 FROM r
    ORDER BY request_id, n DESC
    ON CONFLICT (request_id) DO UPDATE SET result = excluded.result,
                                           filed_at_ms = excluded.filed_at_ms
    RETURNING 1),
remembered AS (
    INSERT INTO remembered_ids (scope, id, keep_until_ms)
    SELECT $6, result_id, max(keep) FROM r GROUP BY result_id
    ON CONFLICT (scope, id)
    DO UPDATE SET keep_until_ms = greatest(remembered_ids.keep_until_ms, excluded.keep_until_ms)
    RETURNING 1)
SELECT (SELECT count(*) FROM filed), (SELECT count(*) FROM remembered)";

const REMEMBER: &str = "
INSERT INTO remembered_ids (scope, id, keep_until_ms) VALUES ($1, $2, $3)
ON CONFLICT (scope, id)
DO UPDATE SET keep_until_ms = greatest(remembered_ids.keep_until_ms, excluded.keep_until_ms)";

pub async fn receive_uploads(pg: &Postgres, items: Vec<Upload>) -> Result<Vec<Queued>, StateError> {
    let mut c = pg.pool.get().await?;
    let enqueue = c.prep(ENQUEUE).await?;
    let remember = c.prep(REMEMBER).await?;
    let file = c.prep(FILE_RESULTS).await?;
    let shard = c.shard();
    let results: Vec<&super::super::FiledResult> = items
        .iter()
        .filter_map(|item| match item {
            Upload::Result(r) => Some(r),
            Upload::Inbox(_) => None,
        })
        .collect();
    let tx = c.transaction().await.map_err(unavailable)?;
    let mut out = Vec::with_capacity(items.len());
    for item in &items {
        match item {
            Upload::Result(_) => out.push(Queued::Queued),
            Upload::Inbox(m) => {
                let q = inbox_insert(pg, &tx, &enqueue, m, shard).await?;
                if q == Queued::Queued {
                    tx.execute(
                        &remember,
                        &[&Q_GATEWAY_INBOX, &m.message_id, &i(m.remember_until_ms)],
                    )
                    .await
                    .map_err(unavailable)?;
                }
                out.push(q);
            }
        }
    }
    if !results.is_empty() {
        let request_ids: Vec<&str> = results.iter().map(|r| r.request_id.as_str()).collect();
        let bodies: Vec<&[u8]> = results.iter().map(|r| r.plaintext.as_slice()).collect();
        let result_ids: Vec<&str> = results
            .iter()
            .map(|r| r.result_message_id.as_str())
            .collect();
        let keep: Vec<i64> = results.iter().map(|r| i(r.remember_until_ms)).collect();
        tx.query_one(
            &file,
            &[
                &request_ids,
                &bodies,
                &result_ids,
                &keep,
                &i(pg.now_ms()),
                &SCOPE_RESULTS,
            ],
        )
        .await
        .map_err(unavailable)?;
    }
    tx.commit().await.map_err(unavailable)?;
    Ok(out)
}

async fn inbox_insert(
    pg: &Postgres,
    tx: &Transaction<'_>,
    enqueue: &tokio_postgres::Statement,
    m: &InboxMessage,
    shard: i16,
) -> Result<Queued, StateError> {
    let row = Row {
        queue: Q_GATEWAY_INBOX,
        peer: &m.from_node,
        message_id: &m.message_id,
        payload_type: &m.payload_type,
        priority: m.priority,
        created_at_ms: m.created_at_ms,
        expires_at_ms: m.expires_at_ms,
        body: &m.record,
        max_attempts: 0,
        event: None,
    };
    insert(pg, tx, enqueue, row, shard).await
}
