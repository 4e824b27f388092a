//! The queues in PostgreSQL: per-recipient FIFO with leases, duplicates by id, caps,
//! expiry, and the uploads nodes send.

use tokio_postgres::Transaction;

use super::super::{
    Delivery, ForNode, GatewayState, InboxMessage, NewJob, NodeAck, PullBatch, Queued, StateError,
    Upload,
};
use super::{i, listen, u, unavailable, Postgres, LEASE_MS, STATUS_KEEP_MS};
use crate::store::{ExpiredMessage, MessageState, MessageStatus, QueueStat, StoreError};

pub use crate::store::names::{Q_GATEWAY_INBOX as Q_INBOX, Q_TO_NODE as Q_NODE, SCOPE_RESULTS};

/// The most an expiry sweep or prune removes in one transaction.
const SWEEP_LIMIT: i64 = 10_000;

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

/// Insert one message with the prepared [`ENQUEUE`] on `c` (a client: its own commit;
/// a transaction: with the rest of it).
async fn insert<C: tokio_postgres::GenericClient>(
    pg: &Postgres,
    c: &C,
    enqueue: &tokio_postgres::Statement,
    m: Row<'_>,
    shard: i16,
) -> Result<Queued, StateError> {
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
        .await
        .map_err(unavailable)?;
    let (inserted, known, depth): (i64, bool, i64) = (row.get(0), row.get(1), row.get(2));
    if inserted == 1 {
        Ok(Queued::Queued)
    } else if known || u(depth) < pg.opts.max_per_recipient {
        // Known, or inserted by a concurrent request with the same id.
        Ok(Queued::Duplicate)
    } else {
        Err(StoreError::QueueFull {
            retry_after_s: pg.opts.queue_full_retry_after_s,
        }
        .into())
    }
}

fn row(msg: &ForNode) -> Row<'_> {
    Row {
        queue: Q_NODE,
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
    let mut c = pg.pool.get().await?;
    let enqueue = c.prep(ENQUEUE).await?;
    let Some(job) = job else {
        // One statement, its own commit.
        let q = insert(pg, &*c, &enqueue, row(&msg), c.shard()).await?;
        if q == Queued::Queued {
            pg.notify(listen::CH_QUEUED, msg.node_id);
        }
        return Ok(q);
    };
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
    tx.commit().await.map_err(unavailable)?;
    pg.notify(listen::CH_QUEUED, msg.node_id);
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
                        &[&Q_INBOX, &m.message_id, &i(m.remember_until_ms)],
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
        queue: Q_INBOX,
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

pub async fn begin_pull(pg: &Postgres, node: &str) -> Result<u64, StateError> {
    let mut c = pg.pool.get().await?;
    // Also wakes the node's pulls held at other replicas: they find themselves
    // superseded.
    let st = c
        .prep(
            "WITH p AS (
                 INSERT INTO node_pulls (node_id, pull) VALUES ($1, 1)
                 ON CONFLICT (node_id) DO UPDATE SET pull = node_pulls.pull + 1
                 RETURNING pull)
             SELECT pull FROM p",
        )
        .await?;
    let n: i64 = c
        .query_one(&st, &[&node])
        .await
        .map_err(unavailable)?
        .get(0);
    pg.notify(listen::CH_PULLED, format!("{n}/{node}"));
    Ok(u(n))
}

/// A pull's look at the queue, in one statement (one round trip): the node's newest pull
/// number, and — unless that supersedes this pull — the queue's head in delivery order,
/// cut to `$6` bytes (always at least one message), marked as handed out, with the
/// recipient's queue depth. No lock: a `begin_pull` committed just after this look
/// finds the same head for the newer pull, which is what the protocol does anyway (a
/// pull hands out what is not acknowledged; the node deduplicates by id), and an older
/// pull's answer goes to a connection the node gave up on. Committed without waiting
/// for the WAL flush ([`super::pool::Conn::query_relaxed`]): what it writes is the
/// delivery counter.
const TAKE_BATCH: &str = "
WITH p AS (
    SELECT pull FROM node_pulls WHERE node_id = $2),
head AS (
    SELECT m.seq, m.message_id, m.body, m.priority,
           sum(octet_length(m.body)) OVER w AS run, row_number() OVER w AS rn
    FROM (SELECT seq, message_id, body, priority FROM messages
          WHERE queue = $1 AND peer = $2 AND expires_at_ms > $3
            AND NOT EXISTS (SELECT 1 FROM p WHERE pull > $5)
          ORDER BY priority DESC, seq LIMIT $4) m
    WINDOW w AS (ORDER BY m.priority DESC, m.seq)),
take AS (
    SELECT seq, message_id, body, priority FROM head WHERE run <= $6 OR rn = 1),
marked AS (
    UPDATE messages SET lease_until_ms = $7, attempts = attempts + 1
    WHERE seq IN (SELECT seq FROM take) RETURNING 1)
SELECT (SELECT pull FROM p),
       (SELECT coalesce(sum(n), 0)::bigint FROM queue_depth WHERE queue = $1 AND peer = $2),
       t.message_id, t.body
FROM (SELECT 1) one LEFT JOIN take t ON true
ORDER BY t.priority DESC, t.seq";

pub async fn take_batch(
    pg: &Postgres,
    node: &str,
    pull: u64,
    max: usize,
    max_bytes: usize,
) -> Result<PullBatch, StateError> {
    let now = pg.now_ms();
    let mut c = pg.pool.get().await?;
    let st = c.prep(TAKE_BATCH).await?;
    let rows = c
        .query_relaxed(
            &st,
            &[
                &Q_NODE,
                &node,
                &i(now),
                &(max.max(1) as i64),
                &i(pull),
                &(max_bytes.min(i64::MAX as usize) as i64),
                &i(now + LEASE_MS),
            ],
        )
        .await?;
    let Some(first) = rows.first() else {
        return Err(StateError::Corrupt("a pull's look returned no row".into()));
    };
    let newest: Option<i64> = first.get(0);
    if newest.is_some_and(|n| u(n) > pull) {
        return Ok(PullBatch {
            superseded: true,
            ..PullBatch::default()
        });
    }
    let pending: i64 = first.get(1);
    let mut deliveries = Vec::with_capacity(rows.len());
    for r in &rows {
        let Some(message_id) = r.get::<_, Option<String>>(2) else {
            continue;
        };
        deliveries.push(Delivery {
            message_id,
            envelope: r.get(3),
        });
    }
    Ok(PullBatch {
        deliveries,
        pending: u(pending),
        superseded: false,
    })
}

pub async fn ack(pg: &Postgres, node: &str, ack: NodeAck) -> Result<Vec<String>, StateError> {
    let keep = i(pg.now_ms().saturating_add(STATUS_KEEP_MS));
    let mut ids: Vec<&str> = ack.delivered.iter().map(String::as_str).collect();
    let rejected_ids: Vec<&str> = ack.rejected.iter().map(|(id, _)| id.as_str()).collect();
    let codes: Vec<&str> = ack.rejected.iter().map(|(_, c)| c.as_str()).collect();
    ids.extend(&rejected_ids);
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut c = pg.pool.get().await?;
    let st = c
        .prep(
            "WITH gone AS (
                 DELETE FROM messages
                 WHERE message_id = ANY($3) AND (queue, peer) IS NOT DISTINCT FROM ($1, $2)
                 RETURNING message_id, attempts, queue, peer),
             why AS (SELECT * FROM unnest($4::text[], $5::text[]) AS r(id, code)),
             uncounted AS (
                 INSERT INTO queue_depth (queue, peer, shard, n)
                 SELECT $1, $2, $7, -count(*) FROM gone HAVING count(*) > 0
                 ON CONFLICT (queue, peer, shard) DO UPDATE SET n = queue_depth.n + excluded.n
                 RETURNING 1)
             INSERT INTO message_status (message_id, state, queue, peer, attempts, reason, keep_until_ms)
             SELECT g.message_id,
                    CASE WHEN w.code IS NULL THEN 'delivered' ELSE 'rejected' END,
                    $1, $2, g.attempts, w.code, $6
             FROM gone g LEFT JOIN why w ON w.id = g.message_id
             ON CONFLICT (message_id) DO UPDATE
                 SET state = excluded.state, reason = excluded.reason,
                     attempts = excluded.attempts, keep_until_ms = excluded.keep_until_ms
             RETURNING message_id",
        )
        .await?;
    // One statement, its own commit. (The recipient is compared with `IS NOT DISTINCT
    // FROM` so that the plan looks the ids up by their unique index alone, not ANDed
    // with the recipient's whole queue range: docs/BENCHMARKS.md.)
    let rows = c
        .query(
            &st,
            &[
                &Q_NODE,
                &node,
                &ids,
                &rejected_ids,
                &codes,
                &keep,
                &c.shard(),
            ],
        )
        .await
        .map_err(unavailable)?;
    let removed: std::collections::HashSet<String> = rows.into_iter().map(|r| r.get(0)).collect();
    // In the order the node gave them (an id acknowledged twice is removed once).
    let mut out = Vec::with_capacity(removed.len());
    for id in ids {
        if removed.contains(id) && !out.iter().any(|o: &String| o == id) {
            out.push(id.to_string());
        }
    }
    Ok(out)
}

pub async fn inbox_list(
    pg: &Postgres,
    from: Option<&str>,
    limit: usize,
) -> Result<Vec<Vec<u8>>, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT body FROM messages
             WHERE queue = $1 AND ($2::text IS NULL OR peer = $2) AND expires_at_ms > $3
             ORDER BY peer, priority DESC, seq LIMIT $4",
            &[&Q_INBOX, &from, &i(pg.now_ms()), &(limit as i64)],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows.into_iter().map(|r| r.get(0)).collect())
}

pub async fn inbox_ack(pg: &Postgres, message_id: &str) -> Result<Option<bool>, StateError> {
    let keep = i(pg.now_ms().saturating_add(STATUS_KEEP_MS));
    let mut c = pg.pool.get().await?;
    let shard = c.shard();
    let tx = c.transaction().await.map_err(unavailable)?;
    let gone = tx
        .query_opt(
            "WITH gone AS (
                 DELETE FROM messages WHERE queue = $1 AND message_id = $2
                 RETURNING message_id, queue, peer, attempts),
             uncounted AS (
                 INSERT INTO queue_depth (queue, peer, shard, n)
                 SELECT queue, peer, $4, -count(*) FROM gone GROUP BY queue, peer
                 ON CONFLICT (queue, peer, shard) DO UPDATE SET n = queue_depth.n + excluded.n
                 RETURNING 1)
             INSERT INTO message_status (message_id, state, queue, peer, attempts, reason, keep_until_ms)
             SELECT message_id, 'delivered', $1, peer, attempts, NULL, $3 FROM gone
             ON CONFLICT (message_id) DO UPDATE SET state = 'delivered', keep_until_ms = excluded.keep_until_ms
             RETURNING message_id",
            &[&Q_INBOX, &message_id, &keep, &shard],
        )
        .await
        .map_err(unavailable)?;
    let known = match gone {
        Some(_) => Some(true),
        None => tx
            .query_opt(
                "SELECT 1 FROM message_status WHERE message_id = $1 AND queue = $2",
                &[&message_id, &Q_INBOX],
            )
            .await
            .map_err(unavailable)?
            .map(|_| false),
    };
    tx.commit().await.map_err(unavailable)?;
    Ok(known)
}

fn state_of(s: &str) -> Result<MessageState, StateError> {
    Ok(match s {
        "queued" => MessageState::Queued,
        "delivering" => MessageState::Delivering,
        "delivered" => MessageState::Delivered,
        "expired" => MessageState::Expired,
        "dead" => MessageState::Dead,
        "rejected" => MessageState::Rejected,
        other => {
            return Err(StateError::Corrupt(format!(
                "message_status.state {other:?}"
            )))
        }
    })
}

pub async fn status(pg: &Postgres, message_id: &str) -> Result<Option<MessageStatus>, StateError> {
    let c = pg.pool.get().await?;
    if let Some(r) = c
        .query_opt(
            "SELECT queue, peer, attempts, lease_until_ms FROM messages WHERE message_id = $1",
            &[&message_id],
        )
        .await
        .map_err(unavailable)?
    {
        let lease: i64 = r.get(3);
        return Ok(Some(MessageStatus {
            state: if u(lease) > pg.now_ms() {
                MessageState::Delivering
            } else {
                MessageState::Queued
            },
            queue: r.get(0),
            peer: r.get(1),
            attempts: r.get::<_, i32>(2).max(0) as u32,
            next_attempt_at_ms: 0,
            reason: None,
        }));
    }
    let row = c
        .query_opt(
            "SELECT state, queue, peer, attempts, reason FROM message_status WHERE message_id = $1",
            &[&message_id],
        )
        .await
        .map_err(unavailable)?;
    row.map(|r| {
        Ok(MessageStatus {
            state: state_of(r.get(0))?,
            queue: r.get(1),
            peer: r.get(2),
            attempts: r.get::<_, i32>(3).max(0) as u32,
            next_attempt_at_ms: 0,
            reason: r.get(4),
        })
    })
    .transpose()
}

pub async fn stats(pg: &Postgres) -> Result<Vec<QueueStat>, StateError> {
    let now = pg.now_ms();
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT queue, peer, count(*), coalesce(sum(length(body)), 0)::bigint,
                    min(created_at_ms)
             FROM messages GROUP BY queue, peer ORDER BY queue, peer",
            &[],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows
        .into_iter()
        .map(|r| QueueStat {
            queue: r.get(0),
            peer: r.get(1),
            depth: u(r.get(2)),
            oldest_age_s: now.saturating_sub(u(r.get::<_, i64>(4))) / 1000,
            bytes: u(r.get(3)),
        })
        .collect())
}

/// Remove what expired (each message reported by exactly one replica: rows are taken
/// with `SKIP LOCKED` and deleted with `RETURNING`), then prune finished statuses,
/// remembered ids and seen signatures past their time.
pub async fn sweep(pg: &Postgres) -> Result<Vec<ExpiredMessage>, StateError> {
    let now = i(pg.now_ms());
    let keep = i(pg.now_ms().saturating_add(STATUS_KEEP_MS));
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "WITH gone AS (
                 DELETE FROM messages WHERE seq IN (
                     SELECT seq FROM messages WHERE expires_at_ms <= $1
                     ORDER BY expires_at_ms LIMIT $3 FOR UPDATE SKIP LOCKED)
                 RETURNING message_id, queue, peer, payload_type, expires_at_ms, attempts),
             uncounted AS (
                 INSERT INTO queue_depth (queue, peer, shard, n)
                 SELECT queue, peer, $5, -count(*) FROM gone GROUP BY queue, peer
                 ON CONFLICT (queue, peer, shard) DO UPDATE SET n = queue_depth.n + excluded.n
                 RETURNING 1),
             st AS (
                 INSERT INTO message_status (message_id, state, queue, peer, attempts, reason, keep_until_ms)
                 SELECT message_id, 'expired', queue, peer, attempts, $4, $2 FROM gone
                 ON CONFLICT (message_id) DO UPDATE
                     SET state = 'expired', reason = excluded.reason, keep_until_ms = excluded.keep_until_ms)
             SELECT message_id, queue, peer, payload_type, expires_at_ms FROM gone
             WHERE (SELECT count(*) FROM uncounted) >= 0",
            &[&now, &keep, &SWEEP_LIMIT, &crate::store::REASON_TIMEOUT, &c.shard()],
        )
        .await
        .map_err(unavailable)?;
    for table in ["message_status", "remembered_ids", "seen_signatures"] {
        // Bounded per tick; whatever is left goes at the next.
        let sql = format!(
            "DELETE FROM {table} WHERE ctid IN (
                 SELECT ctid FROM {table} WHERE keep_until_ms <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
        );
        c.execute(sql.as_str(), &[&now, &SWEEP_LIMIT])
            .await
            .map_err(unavailable)?;
    }
    c.execute(
        // Only the oldest rows are looked at (by the primary key): events are kept in
        // id order, so a filter on `ts_ms` alone would read the whole table each time
        // nothing is old enough.
        "DELETE FROM events WHERE id IN (
             SELECT id FROM (SELECT id, ts_ms FROM events ORDER BY id LIMIT $2) oldest
             WHERE ts_ms <= $1)",
        &[
            &i(pg.now_ms().saturating_sub(super::EVENTS_KEEP_MS)),
            &SWEEP_LIMIT,
        ],
    )
    .await
    .map_err(unavailable)?;
    Ok(rows
        .into_iter()
        .map(|r| ExpiredMessage {
            message_id: r.get(0),
            queue: r.get(1),
            peer: r.get(2),
            payload_type: r.get(3),
            expires_at_ms: u(r.get(4)),
        })
        .collect())
}
