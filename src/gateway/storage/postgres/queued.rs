//! What waits in one node's queue, for the console's node page: in pull order, without
//! the envelopes, never a message past its expiry.

use super::super::{GatewayState, QueuedMessage, StateError, QUEUE_TO_NODE};
use super::{i, u, unavailable, Postgres};

pub async fn list(
    pg: &Postgres,
    node: &str,
    limit: usize,
) -> Result<Vec<QueuedMessage>, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT message_id, payload_type, priority, created_at_ms, expires_at_ms,
                    attempts, max_attempts
             FROM messages
             WHERE queue = $1 AND peer = $2 AND expires_at_ms > $3
             ORDER BY priority DESC, seq LIMIT $4",
            &[
                &QUEUE_TO_NODE,
                &node,
                &i(pg.now_ms()),
                &(limit.min(i64::MAX as usize) as i64),
            ],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows
        .into_iter()
        .map(|r| QueuedMessage {
            message_id: r.get(0),
            payload_type: r.get(1),
            priority: r.get::<_, i16>(2).clamp(0, 255) as u8,
            created_at_ms: u(r.get(3)),
            expires_at_ms: u(r.get(4)),
            attempts: r.get::<_, i32>(5).max(0) as u32,
            max_attempts: r.get::<_, i32>(6).max(0) as u32,
        })
        .collect())
}
