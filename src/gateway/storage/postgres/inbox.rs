//! The gateway's own inbox in PostgreSQL (what nodes uploaded for the gateway's
//! clients): listing in order and acknowledging.

use super::super::{GatewayState, StateError};
use super::queue::Q_GATEWAY_INBOX;
use super::{i, unavailable, Postgres, STATUS_KEEP_MS};

pub async fn list(
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
            &[&Q_GATEWAY_INBOX, &from, &i(pg.now_ms()), &(limit as i64)],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows.into_iter().map(|r| r.get(0)).collect())
}

pub async fn ack(pg: &Postgres, message_id: &str) -> Result<Option<bool>, StateError> {
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
            &[&Q_GATEWAY_INBOX, &message_id, &keep, &shard],
        )
        .await
        .map_err(unavailable)?;
    let known = match gone {
        Some(_) => Some(true),
        None => tx
            .query_opt(
                "SELECT 1 FROM message_status WHERE message_id = $1 AND queue = $2",
                &[&message_id, &Q_GATEWAY_INBOX],
            )
            .await
            .map_err(unavailable)?
            .map(|_| false),
    };
    tx.commit().await.map_err(unavailable)?;
    Ok(known)
}
