//! Delivery from the PostgreSQL queues: one pull per node at a time (a newer pull
//! supersedes older ones at any replica), a pull's look at the queue's head, and acks.

use super::super::{Delivery, GatewayState, NodeAck, PullBatch, StateError, Take};
use super::queue::Q_TO_NODE;
use super::{i, listen, u, unavailable, Postgres, LEASE_MS, STATUS_KEEP_MS};

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
/// pull's answer goes to a connection the node gave up on. With `$8` (a pipelining
/// node's `after`), what is at or before that message, while it is still queued, is
/// skipped: the node has it and its ack is on the way. Committed without waiting
/// for the WAL flush ([`super::pool::Conn::query_relaxed`]): what it writes is the
/// delivery counter.
const TAKE_BATCH: &str = "
WITH p AS (
    SELECT pull FROM node_pulls WHERE node_id = $2),
a AS (
    SELECT priority, seq FROM messages
    WHERE message_id = $8 AND queue = $1 AND peer = $2),
head AS (
    SELECT m.seq, m.message_id, m.body, m.priority,
           sum(octet_length(m.body)) OVER w AS run, row_number() OVER w AS rn
    FROM (SELECT seq, message_id, body, priority FROM messages q
          WHERE queue = $1 AND peer = $2 AND expires_at_ms > $3
            AND NOT EXISTS (SELECT 1 FROM p WHERE pull > $5)
            AND NOT EXISTS (SELECT 1 FROM a WHERE a.priority > q.priority
                            OR (a.priority = q.priority AND a.seq >= q.seq))
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
    take: Take<'_>,
) -> Result<PullBatch, StateError> {
    let Take {
        pull,
        max,
        max_bytes,
        after,
    } = take;
    let now = pg.now_ms();
    let mut c = pg.pool.get().await?;
    let st = c.prep(TAKE_BATCH).await?;
    let rows = c
        .query_relaxed(
            &st,
            &[
                &Q_TO_NODE,
                &node,
                &i(now),
                &(max.max(1) as i64),
                &i(pull),
                &(max_bytes.min(i64::MAX as usize) as i64),
                &i(now + LEASE_MS),
                &after,
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
    let (events_ts, events) = ack.events;
    let (event_ids, event_json): (Vec<String>, Vec<String>) = events.into_iter().unzip();
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
                 RETURNING 1),
             staged AS (
                 INSERT INTO events_staged (ts_ms, event)
                 SELECT $8, e.event
                 FROM unnest($9::text[], $10::text[]) WITH ORDINALITY AS e(id, event, n)
                 JOIN gone g ON g.message_id = e.id
                 ORDER BY e.n
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
    // One statement, its own commit, the events of what it removed with it. (The recipient is compared with `IS NOT DISTINCT
    // FROM` so that the plan looks the ids up by their unique index alone, not ANDed
    // with the recipient's whole queue range: docs/BENCHMARKS.md.)
    let rows = c
        .query(
            &st,
            &[
                &Q_TO_NODE,
                &node,
                &ids,
                &rejected_ids,
                &codes,
                &keep,
                &c.shard(),
                &i(events_ts),
                &event_ids,
                &event_json,
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
