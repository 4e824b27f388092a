//! Node liveness shared by the replicas: who was heard from when, who holds a
//! long-poll somewhere, and online/offline transitions each taken by one replica (row
//! locks), so each shows up once in the events.

use std::collections::HashMap;

use super::super::{NodeSeen, StateError};
use super::{i, u, unavailable, Postgres};

/// `node` was heard from; true when it was not online before. The row is locked while
/// its old state is read, so of two replicas hearing it at once exactly one gets true.
/// Liveness is bookkeeping: its writes commit without waiting for the WAL flush
/// ([`super::pool::Conn::query_relaxed`]).
pub async fn heard(pg: &Postgres, node: &str, now_ms: u64) -> Result<bool, StateError> {
    let mut c = pg.pool.get().await?;
    let update = c
        .prep(
            "UPDATE nodes n SET last_seen_ms = greatest(n.last_seen_ms, $2), online = true
             FROM (SELECT online FROM nodes WHERE node_id = $1 FOR UPDATE) o
             WHERE n.node_id = $1
             RETURNING o.online",
        )
        .await?;
    let insert = c
        .prep(
            "INSERT INTO nodes (node_id, last_seen_ms, online) VALUES ($1, $2, true)
             ON CONFLICT (node_id) DO NOTHING RETURNING 1",
        )
        .await?;
    loop {
        let old = c.query_relaxed(&update, &[&node, &i(now_ms)]).await?;
        if let Some(row) = old.first() {
            return Ok(!row.get::<_, bool>(0));
        }
        let inserted = c.query_relaxed(&insert, &[&node, &i(now_ms)]).await?;
        if !inserted.is_empty() {
            return Ok(true);
        }
        // Another replica inserted it meanwhile: take the update path.
    }
}

pub async fn polling(
    pg: &Postgres,
    nodes: Vec<String>,
    now_ms: u64,
    until_ms: u64,
) -> Result<(), StateError> {
    if nodes.is_empty() {
        return Ok(());
    }
    let mut c = pg.pool.get().await?;
    let st = c
        .prep(
            "UPDATE nodes SET polling_until_ms = greatest(polling_until_ms, $2),
                              last_seen_ms = greatest(last_seen_ms, $3)
             WHERE node_id = ANY($1)",
        )
        .await?;
    c.query_relaxed(&st, &[&nodes, &i(until_ms), &i(now_ms)])
        .await?;
    Ok(())
}

/// Ends this replica's claim on `node`'s long-poll (`polling_until_ms = until_ms`, as
/// [`polling`] wrote it) at `now_ms`; a later claim (greater) is someone else's newer
/// poll and stays.
pub async fn poll_abandoned(
    pg: &Postgres,
    node: &str,
    until_ms: u64,
    now_ms: u64,
) -> Result<(), StateError> {
    let mut c = pg.pool.get().await?;
    let st = c
        .prep(
            "UPDATE nodes SET polling_until_ms = $3
             WHERE node_id = $1 AND polling_until_ms = $2",
        )
        .await?;
    c.query_relaxed(&st, &[&node, &i(until_ms), &i(now_ms)])
        .await?;
    Ok(())
}

pub async fn sweep_offline(
    pg: &Postgres,
    silent_since_ms: u64,
    now_ms: u64,
) -> Result<Vec<String>, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "UPDATE nodes SET online = false
             WHERE online AND last_seen_ms < $1 AND polling_until_ms < $2
             RETURNING node_id",
            &[&i(silent_since_ms), &i(now_ms)],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows.into_iter().map(|r| r.get(0)).collect())
}

pub async fn seen(
    pg: &Postgres,
    nodes: &[String],
) -> Result<HashMap<String, NodeSeen>, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT node_id, last_seen_ms, polling_until_ms FROM nodes WHERE node_id = ANY($1)",
            &[&nodes],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.get(0),
                NodeSeen {
                    last_seen_ms: Some(u(r.get(1))),
                    polling_until_ms: u(r.get(2)),
                },
            )
        })
        .collect())
}
