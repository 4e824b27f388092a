//! Key rotation on PostgreSQL (PROTOCOL §15.7): a node's rotation applied to its
//! `peers` row under the row's lock, and the gateway's own newest rotation, one row
//! every replica reads.

use super::enroll::{lock_node, notify_trust, put_record, records_of, to_json};
use super::{i, own_audit, unavailable, Postgres};
use crate::audit::AuditRecord;
use crate::envelope::{KeyRotation, Rotated, RotationError, TrustStore};
use crate::gateway::storage::{GatewayState, StateError};

impl Postgres {
    /// The row of the node at `address` under its lock, [`TrustStore::rotate_at`] on
    /// it, the row written back.
    pub(super) async fn rotate_node_now(
        &self,
        address: &str,
        rot: &KeyRotation,
        now_ms: u64,
        grace_ms: u64,
        audit: &AuditRecord,
    ) -> Result<Result<Rotated, RotationError>, StateError> {
        let node_id = &address.to_string();
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        lock_node(&tx, node_id).await?;
        let row = tx
            .query_opt(
                "SELECT document, may_send, may_issue, rotation, node_id FROM peers
                 WHERE node_id = $1 FOR UPDATE",
                &[node_id],
            )
            .await
            .map_err(unavailable)?;
        let mut one = TrustStore::new();
        if let Some(r) = &row {
            one.insert(super::peers::peer_row(r)?);
        }
        match one.rotate_at(address, rot, now_ms, grace_ms) {
            Ok(Rotated::Applied) => {}
            other => return Ok(other),
        }
        let peer = one
            .get(node_id)
            .ok_or_else(|| StateError::Corrupt("peers: rotated peer vanished".into()))?;
        tx.execute(
            "UPDATE peers SET document = $2, rotation = $3 WHERE node_id = $1",
            &[node_id, &to_json(&peer.doc)?, &peer.rotation_row()],
        )
        .await
        .map_err(unavailable)?;
        let records = records_of(&tx, node_id).await?;
        for r in crate::gateway::storage::rotated_records(records, rot, now_ms) {
            put_record(&tx, &r).await?;
        }
        own_audit::pend(&tx, now_ms, audit).await?;
        notify_trust(&tx, node_id).await?;
        tx.commit().await.map_err(unavailable)?;
        // The refresh takes a connection of its own: holding this one while it waits
        // would let a burst of enrollments take the whole pool and wait for itself.
        drop(c);
        self.refresh_peer_now(node_id).await?;
        Ok(Ok(Rotated::Applied))
    }

    /// The node's row under its lock, [`TrustStore::end_grace`] on it, the row written
    /// back when a grace was running.
    pub(super) async fn end_node_grace_now(
        &self,
        node_id: &str,
        now_ms: u64,
        audit: &AuditRecord,
    ) -> Result<Option<bool>, StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let row = tx
            .query_opt(
                "SELECT document, may_send, may_issue, rotation, node_id FROM peers
                 WHERE node_id = $1 AND role = 'node' FOR UPDATE",
                &[&node_id],
            )
            .await
            .map_err(unavailable)?;
        let mut one = TrustStore::new();
        if let Some(r) = &row {
            one.insert(super::peers::peer_row(r)?);
        }
        let ended = one.end_grace(node_id, now_ms);
        let Some(peer) = one.get(node_id).filter(|_| ended == Some(true)) else {
            return Ok(ended);
        };
        tx.execute(
            "UPDATE peers SET rotation = $2 WHERE node_id = $1",
            &[&node_id, &peer.rotation_row()],
        )
        .await
        .map_err(unavailable)?;
        own_audit::pend(&tx, now_ms, audit).await?;
        notify_trust(&tx, node_id).await?;
        tx.commit().await.map_err(unavailable)?;
        // The refresh takes a connection of its own (see rotate_node_now).
        drop(c);
        self.refresh_peer_now(node_id).await?;
        Ok(ended)
    }

    pub(super) async fn put_gateway_rotation_now(
        &self,
        rotation: &KeyRotation,
        until_ms: u64,
        audit: &AuditRecord,
    ) -> Result<(), StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let changed = tx
            .execute(
                "INSERT INTO gateway_rotation (id, statement, until_ms) VALUES (1, $1, $2)
                 ON CONFLICT (id) DO UPDATE
                     SET statement = excluded.statement, until_ms = excluded.until_ms
                     WHERE gateway_rotation.statement <> excluded.statement",
                &[&to_json(rotation)?, &i(until_ms)],
            )
            .await
            .map_err(unavailable)?;
        // Audited once, by the replica whose write published it.
        if changed > 0 {
            own_audit::pend(&tx, self.now_ms(), audit).await?;
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(())
    }

    pub(super) async fn gateway_rotation_now(
        &self,
    ) -> Result<Option<(KeyRotation, u64)>, StateError> {
        let c = self.pool.get().await?;
        let row = c
            .query_opt(
                "SELECT statement, until_ms FROM gateway_rotation WHERE id = 1",
                &[],
            )
            .await
            .map_err(unavailable)?;
        row.map(|r| {
            let statement = serde_json::from_str(r.get::<_, &str>(0))
                .map_err(|e| StateError::Corrupt(format!("gateway_rotation: {e}")))?;
            Ok((statement, super::u(r.get(1))))
        })
        .transpose()
    }
}
