//! Each node's audit log as the gateway keeps it: the entries, extended only at the
//! copy's end (one extension per node at a time, across replicas), and the node's
//! signed checkpoints.

use std::collections::HashMap;

use tokio_postgres::Transaction;

use super::super::{AuditExtension, StateError};
use super::{i, u, unavailable, Postgres};
use crate::store::StoreError;

pub(super) async fn entries(pg: &Postgres, node: &str) -> Result<Vec<Vec<u8>>, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT entry FROM audit_entries WHERE node_id = $1 ORDER BY idx",
            &[&node],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows.into_iter().map(|r| r.get(0)).collect())
}

pub(super) async fn entry(
    pg: &Postgres,
    node: &str,
    index: u64,
) -> Result<Option<Vec<u8>>, StateError> {
    let c = pg.pool.get().await?;
    let row = c
        .query_opt(
            "SELECT entry FROM audit_entries WHERE node_id = $1 AND idx = $2",
            &[&node, &i(index)],
        )
        .await
        .map_err(unavailable)?;
    Ok(row.map(|r| r.get(0)))
}

pub(super) async fn size(pg: &Postgres, node: &str) -> Result<u64, StateError> {
    let c = pg.pool.get().await?;
    let n: i64 = c
        .query_one(
            "SELECT coalesce(max(idx) + 1, 0) FROM audit_entries WHERE node_id = $1",
            &[&node],
        )
        .await
        .map_err(unavailable)?
        .get(0);
    Ok(u(n))
}

pub(super) async fn sizes(
    pg: &Postgres,
    nodes: &[String],
) -> Result<HashMap<String, u64>, StateError> {
    let mut c = pg.pool.get().await?;
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
}

pub(super) async fn extend(
    pg: &Postgres,
    node: &str,
    ext: AuditExtension,
) -> Result<(), StateError> {
    let mut c = pg.pool.get().await?;
    let tx = c.transaction().await.map_err(unavailable)?;
    let size = locked_size(&tx, node).await?;
    if size != ext.start {
        return Err(StateError::Store(StoreError::AuditIndex {
            expected: size,
            got: ext.start,
        }));
    }
    write(&tx, node, ext).await?;
    tx.commit().await.map_err(unavailable)?;
    Ok(())
}

/// The size of `node`'s copy, with the lock that lets one extension of it at a time
/// in, across replicas, until the transaction ends (an extension must start exactly at
/// the copy's end: a replica with a stale view is refused).
pub(super) async fn locked_size(tx: &Transaction<'_>, node: &str) -> Result<u64, StateError> {
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
    Ok(u(size))
}

/// Write `ext`'s entries and checkpoint (under [`locked_size`]'s lock).
pub(super) async fn write(
    tx: &Transaction<'_>,
    node: &str,
    ext: AuditExtension,
) -> Result<(), StateError> {
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
    Ok(())
}

pub(super) async fn checkpoints(
    pg: &Postgres,
    node: &str,
) -> Result<Vec<(u64, String)>, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT size, note FROM audit_checkpoints WHERE node_id = $1 ORDER BY size",
            &[&node],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows.into_iter().map(|r| (u(r.get(0)), r.get(1))).collect())
}
