//! The gateway's pending audit entries on PostgreSQL (`storage::enrollments` says why
//! they exist): table `gateway_audit_pending`, a row inserted in the transaction of the
//! decision it records, deleted in the transaction that appends it to the gateway's log
//! (under that log's extension lock), so any replica may append it, and only one does.

use tokio_postgres::Transaction;

use super::{audit, u, unavailable, Postgres};
use crate::audit::{AuditEntry, AuditRecord};
use crate::gateway::storage::{pending_json, AuditExtension, PendingAudit, StateError};

/// Insert `record`, decided at `ts_ms`, as pending in the decision's transaction.
pub(super) async fn pend(
    tx: &Transaction<'_>,
    ts_ms: u64,
    record: &AuditRecord,
) -> Result<(), StateError> {
    tx.execute(
        "INSERT INTO gateway_audit_pending (entry) VALUES ($1)",
        &[&pending_json(ts_ms, record)],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

pub(super) async fn pending(pg: &Postgres, max: usize) -> Result<Vec<PendingAudit>, StateError> {
    let c = pg.pool.get().await?;
    let rows = c
        .query(
            "SELECT seq, entry FROM gateway_audit_pending ORDER BY seq LIMIT $1",
            &[&(max as i64)],
        )
        .await
        .map_err(unavailable)?;
    rows.iter()
        .map(|r| {
            let entry: AuditEntry = serde_json::from_str(r.get::<_, &str>(1))
                .map_err(|e| StateError::Corrupt(format!("gateway_audit_pending: {e}")))?;
            Ok(PendingAudit {
                seq: u(r.get(0)),
                entry,
            })
        })
        .collect()
}

pub(super) async fn append(
    pg: &Postgres,
    node: &str,
    ext: AuditExtension,
    seqs: &[u64],
) -> Result<bool, StateError> {
    let mut c = pg.pool.get().await?;
    let tx = c.transaction().await.map_err(unavailable)?;
    if audit::locked_size(&tx, node).await? != ext.start {
        return Ok(false);
    }
    let seqs: Vec<i64> = seqs.iter().map(|s| super::i(*s)).collect();
    let taken = tx
        .execute(
            "DELETE FROM gateway_audit_pending WHERE seq = ANY($1)",
            &[&seqs],
        )
        .await
        .map_err(unavailable)?;
    if taken != seqs.len() as u64 {
        // Another replica appended some of them first; dropping `tx` rolls back.
        return Ok(false);
    }
    audit::write(&tx, node, ext).await?;
    tx.commit().await.map_err(unavailable)?;
    Ok(true)
}
