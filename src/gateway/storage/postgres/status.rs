//! What became of messages, what the queues hold, and expiry: a message's status, the
//! per-recipient statistics, and the sweep that removes what expired and prunes what
//! is kept only for a while.

use super::super::{GatewayState, StateError};
use super::{i, u, unavailable, Postgres, STATUS_KEEP_MS};
use crate::store::{ExpiredMessage, MessageState, MessageStatus, QueueStat};

/// The most an expiry sweep or prune removes in one transaction.
const SWEEP_LIMIT: i64 = 10_000;

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
            // The age of the message a pull hands out next (the head in
            // `messages_fifo` order), as the embedded store answers: one index probe
            // per recipient.
            "SELECT s.queue, s.peer, s.n, s.bytes, h.created_at_ms
             FROM (SELECT queue, peer, count(*) AS n,
                          coalesce(sum(length(body)), 0)::bigint AS bytes
                   FROM messages GROUP BY queue, peer) s
             CROSS JOIN LATERAL (
                 SELECT created_at_ms FROM messages m
                 WHERE m.queue = s.queue AND m.peer = s.peer
                 ORDER BY m.priority DESC, m.seq LIMIT 1) h
             ORDER BY s.queue, s.peer",
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
/// remembered ids, seen signatures and command idempotency keys past their time.
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
    for table in [
        "message_status",
        "remembered_ids",
        "seen_signatures",
        "command_keys",
    ] {
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
