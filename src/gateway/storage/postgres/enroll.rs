//! Enrollment on PostgreSQL, shared by every replica: tokens (their uses counted under
//! the token row's lock, so a limit holds across replicas), enrollment records, and the
//! peers row an enrollment, approval or retirement changes — each in one transaction,
//! announced to the other replicas with the trust store's `NOTIFY`.

use tokio_postgres::Transaction;

use super::{i, listen, own_audit, unavailable, Postgres, STATUS_KEEP_MS};
use crate::audit::AuditRecord;
use crate::envelope::{b64_encode, IdentityDocument, KeyRotation, Rotated, RotationError};
use crate::gateway::storage::{
    AuditExtension, EnrollmentState, Fut, GatewayState, PendingAudit, RetireAudit, SettleAudit,
    StateError,
};
use crate::gateway::storage::{
    Decision, EnrollmentRecord, Facts, Kind, RecordState, TokenRecord, NODE_RIGHTS,
};
use crate::store::names::Q_TO_NODE;

fn corrupt(what: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Corrupt(format!("{what}: {e}"))
}

pub(super) fn to_json<T: serde::Serialize>(v: &T) -> Result<String, StateError> {
    serde_json::to_string(v).map_err(|e| corrupt("enrollment", e))
}

fn state_name(s: RecordState) -> &'static str {
    match s {
        RecordState::Enrolled => "enrolled",
        RecordState::Pending => "pending",
        RecordState::Rejected => "rejected",
        RecordState::Revoked => "revoked",
        RecordState::Rotated => "rotated",
    }
}

pub(super) async fn records_of(
    tx: &Transaction<'_>,
    node_id: &str,
) -> Result<Vec<EnrollmentRecord>, StateError> {
    let rows = tx
        .query(
            "SELECT record FROM enrollments WHERE node_id = $1 FOR UPDATE",
            &[&node_id],
        )
        .await
        .map_err(unavailable)?;
    rows.iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| corrupt("enrollments", e)))
        .collect()
}

pub(super) async fn put_record(
    tx: &Transaction<'_>,
    r: &EnrollmentRecord,
) -> Result<(), StateError> {
    tx.execute(
        "INSERT INTO enrollments (node_id, sign_pk, state, record) VALUES ($1, $2, $3, $4)
         ON CONFLICT (node_id, sign_pk) DO UPDATE SET state = excluded.state, record = excluded.record",
        &[&r.node_id, &r.node_sign_pk, &state_name(r.state), &to_json(r)?],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

async fn trusted_node(
    tx: &Transaction<'_>,
    node_id: &str,
) -> Result<Option<IdentityDocument>, StateError> {
    let row = tx
        .query_opt(
            "SELECT document FROM peers WHERE node_id = $1 AND role = 'node' FOR UPDATE",
            &[&node_id],
        )
        .await
        .map_err(unavailable)?;
    row.map(|r| serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| corrupt("peers", e)))
        .transpose()
}

/// Trust `doc` as an enrolled node at `address` (replacing the row there) and tell every
/// replica.
async fn trust_node(
    tx: &Transaction<'_>,
    address: &str,
    doc: &IdentityDocument,
    now_ms: u64,
) -> Result<(), StateError> {
    tx.execute(
        "INSERT INTO peers (node_id, role, document, may_send, may_issue, added_at_ms)
         VALUES ($1, 'node', $2, $3, $4, $5)
         ON CONFLICT (node_id) DO UPDATE
             SET role = excluded.role, document = excluded.document,
                 may_send = excluded.may_send, may_issue = excluded.may_issue,
                 rotation = CASE WHEN peers.document = excluded.document
                                 THEN peers.rotation END",
        &[
            &address,
            &to_json(doc)?,
            &NODE_RIGHTS.send,
            &NODE_RIGHTS.issue,
            &i(now_ms),
        ],
    )
    .await
    .map_err(unavailable)?;
    notify_trust(tx, address).await
}

/// Tell every replica the peer at `address` changed: each reads that one row again (a
/// `NOTIFY` with no address has them read every peer).
pub(super) async fn notify_trust(tx: &Transaction<'_>, address: &str) -> Result<(), StateError> {
    tx.execute("SELECT pg_notify($1, $2)", &[&listen::CH_TRUST, &address])
        .await
        .map_err(unavailable)?;
    Ok(())
}

/// Serialise everything about one node id (two devices enrolling the same id at two
/// replicas at once).
pub(super) async fn lock_node(tx: &Transaction<'_>, node_id: &str) -> Result<(), StateError> {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('outpost-enroll:' || $1))",
        &[&node_id],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

pub(super) fn token_row(r: &tokio_postgres::Row) -> Result<TokenRecord, StateError> {
    let mut t: TokenRecord =
        serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| corrupt("enroll_tokens", e))?;
    t.revoked = r.get(1);
    t.uses = super::u(r.get(2));
    Ok(t)
}

impl Postgres {
    pub(super) async fn enroll_now(
        &self,
        node: &IdentityDocument,
        token_id: &str,
        online: &[String],
        decide: &(dyn Fn(&Facts<'_>) -> Decision + Send + Sync),
    ) -> Result<Decision, StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let token = tx
            .query_opt(
                "SELECT record, revoked, uses FROM enroll_tokens WHERE id = $1 FOR UPDATE",
                &[&token_id],
            )
            .await
            .map_err(unavailable)?
            .as_ref()
            .map(token_row)
            .transpose()?;
        let address = match &token {
            Some(t) => t.address_of(&node.node_id),
            None => node.node_id.clone(),
        };
        lock_node(&tx, &address).await?;
        let key = b64_encode(&node.sign_pk);
        let records = records_of(&tx, &address).await?;
        let trusted = trusted_node(&tx, &address).await?;
        let now_ms = self.now_ms();
        let facts = Facts {
            now_ms,
            node,
            token: token.as_ref(),
            same: records.iter().find(|r| r.node_sign_pk == key),
            trusted: trusted.as_ref(),
            pending_other: records
                .iter()
                .any(|r| r.node_sign_pk != key && r.state == RecordState::Pending),
            online: online.contains(&address),
            tenant: super::tenants::tenant_room(&tx, crate::fleet::tenant::tenant_of(&address))
                .await?,
        };
        let decision = decide(&facts);
        let Decision::Record {
            record,
            consume,
            audit,
        } = &decision
        else {
            return Ok(decision);
        };
        own_audit::pend(&tx, now_ms, audit).await?;
        if *consume {
            tx.execute(
                "UPDATE enroll_tokens SET uses = uses + 1 WHERE id = $1",
                &[&token_id],
            )
            .await
            .map_err(unavailable)?;
        }
        put_record(&tx, record).await?;
        if record.state == RecordState::Enrolled {
            trust_node(&tx, &record.node_id, &record.document, now_ms).await?;
            super::fleet::stage_token_labels(&tx, &record.node_id, &record.labels).await?;
        }
        tx.commit().await.map_err(unavailable)?;
        // The refresh takes a connection of its own: holding this one while it waits
        // would let a burst of enrollments take the whole pool and wait for itself.
        drop(c);
        self.refresh_peer_now(&address).await?;
        Ok(decision)
    }

    pub(super) async fn records_now(&self) -> Result<Vec<EnrollmentRecord>, StateError> {
        let c = self.pool.get().await?;
        let rows = c
            .query("SELECT record FROM enrollments ORDER BY node_id", &[])
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| corrupt("enrollments", e))
            })
            .collect()
    }

    pub(super) async fn settle_now(
        &self,
        node_id: &str,
        approve: bool,
        now_ms: u64,
        by: &str,
        audit: &SettleAudit<'_>,
    ) -> Result<Option<EnrollmentRecord>, StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        lock_node(&tx, node_id).await?;
        let records = records_of(&tx, node_id).await?;
        let old = trusted_node(&tx, node_id)
            .await?
            .map(|d| b64_encode(&d.sign_pk));
        let Some(mut r) = crate::gateway::storage::settleable(&records, approve, old.as_deref())
        else {
            return Ok(None);
        };
        r.decided_at_ms = Some(now_ms);
        r.decided_by = Some(by.to_string());
        if approve {
            r.state = RecordState::Enrolled;
            if r.kind == Kind::Rekey {
                for mut o in records
                    .into_iter()
                    .filter(|o| Some(&o.node_sign_pk) == old.as_ref())
                {
                    o.state = RecordState::Revoked;
                    o.decided_at_ms = Some(now_ms);
                    o.decided_by = Some(by.to_string());
                    put_record(&tx, &o).await?;
                }
            }
            trust_node(&tx, &r.node_id, &r.document, now_ms).await?;
            super::fleet::stage_token_labels(&tx, node_id, &r.labels).await?;
        } else {
            r.state = RecordState::Rejected;
        }
        put_record(&tx, &r).await?;
        own_audit::pend(&tx, now_ms, &audit(&r)).await?;
        tx.commit().await.map_err(unavailable)?;
        // The refresh takes a connection of its own: holding this one while it waits
        // would let a burst of enrollments take the whole pool and wait for itself.
        drop(c);
        self.refresh_peer_now(node_id).await?;
        Ok(Some(r))
    }

    pub(super) async fn revoke_node_now(
        &self,
        node_id: &str,
        now_ms: u64,
        by: &str,
        audit: &RetireAudit<'_>,
    ) -> Result<Option<Vec<String>>, StateError> {
        let mut c = self.pool.get().await?;
        let shard = c.shard();
        let tx = c.transaction().await.map_err(unavailable)?;
        lock_node(&tx, node_id).await?;
        let Some(doc) = trusted_node(&tx, node_id).await? else {
            return Ok(None);
        };
        let records = records_of(&tx, node_id).await?;
        for r in crate::gateway::storage::retired_records(records, node_id, &doc, now_ms, by) {
            put_record(&tx, &r).await?;
        }
        tx.execute("DELETE FROM peers WHERE node_id = $1", &[&node_id])
            .await
            .map_err(unavailable)?;
        notify_trust(&tx, node_id).await?;
        let keep = i(now_ms.saturating_add(STATUS_KEEP_MS));
        let rows = tx
            .query(
                "WITH gone AS (
                     DELETE FROM messages WHERE (queue, peer) IS NOT DISTINCT FROM ($1, $2)
                     RETURNING message_id, attempts),
                 uncounted AS (
                     INSERT INTO queue_depth (queue, peer, shard, n)
                     SELECT $1, $2, $4, -count(*) FROM gone HAVING count(*) > 0
                     ON CONFLICT (queue, peer, shard) DO UPDATE SET n = queue_depth.n + excluded.n
                     RETURNING 1)
                 INSERT INTO message_status (message_id, state, queue, peer, attempts, reason, keep_until_ms)
                 SELECT message_id, 'rejected', $1, $2, attempts, $5, $3 FROM gone
                 ON CONFLICT (message_id) DO UPDATE
                     SET state = excluded.state, reason = excluded.reason,
                         attempts = excluded.attempts, keep_until_ms = excluded.keep_until_ms
                 RETURNING message_id",
                &[
                    &Q_TO_NODE,
                    &node_id,
                    &keep,
                    &shard,
                    &crate::enroll::codes::NODE_REVOKED,
                ],
            )
            .await
            .map_err(unavailable)?;
        own_audit::pend(&tx, now_ms, &audit(&doc, rows.len())).await?;
        tx.commit().await.map_err(unavailable)?;
        // The refresh takes a connection of its own: holding this one while it waits
        // would let a burst of enrollments take the whole pool and wait for itself.
        drop(c);
        self.refresh_peer_now(node_id).await?;
        Ok(Some(rows.iter().map(|r| r.get(0)).collect()))
    }

    pub(super) async fn revoked_node_now(
        &self,
        node_id: &str,
    ) -> Result<Option<EnrollmentRecord>, StateError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "SELECT record FROM enrollments WHERE node_id = $1 AND state = 'revoked'",
                &[&node_id],
            )
            .await
            .map_err(unavailable)?;
        let mut newest: Option<EnrollmentRecord> = None;
        for row in rows {
            let r: EnrollmentRecord = serde_json::from_str(row.get::<_, &str>(0))
                .map_err(|e| corrupt("enrollments", e))?;
            if newest
                .as_ref()
                .is_none_or(|n| n.decided_at_ms < r.decided_at_ms)
            {
                newest = Some(r);
            }
        }
        Ok(newest)
    }
}

impl EnrollmentState for Postgres {
    fn enroll_token_add<'a>(&'a self, token: TokenRecord, audit: &'a AuditRecord) -> Fut<'a, ()> {
        Box::pin(self.token_add_now(token, audit))
    }

    fn enroll_tokens(&self) -> Fut<'_, Vec<TokenRecord>> {
        Box::pin(self.tokens_now())
    }

    fn enroll_token_revoke<'a>(
        &'a self,
        id: &'a str,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Option<bool>> {
        Box::pin(self.token_revoke_now(id, audit))
    }

    fn enroll<'a>(
        &'a self,
        node: &'a IdentityDocument,
        token_id: &'a str,
        online: &'a [String],
        decide: &'a (dyn Fn(&Facts<'_>) -> Decision + Send + Sync),
    ) -> Fut<'a, Decision> {
        Box::pin(self.enroll_now(node, token_id, online, decide))
    }

    fn enrollments(&self) -> Fut<'_, Vec<EnrollmentRecord>> {
        Box::pin(self.records_now())
    }

    fn settle_enrollment<'a>(
        &'a self,
        node_id: &'a str,
        approve: bool,
        now_ms: u64,
        by: &'a str,
        audit: &'a SettleAudit<'a>,
    ) -> Fut<'a, Option<EnrollmentRecord>> {
        Box::pin(self.settle_now(node_id, approve, now_ms, by, audit))
    }

    fn revoke_node<'a>(
        &'a self,
        node_id: &'a str,
        now_ms: u64,
        by: &'a str,
        audit: &'a RetireAudit<'a>,
    ) -> Fut<'a, Option<Vec<String>>> {
        Box::pin(self.revoke_node_now(node_id, now_ms, by, audit))
    }

    fn revoked_node<'a>(&'a self, node_id: &'a str) -> Fut<'a, Option<EnrollmentRecord>> {
        Box::pin(self.revoked_node_now(node_id))
    }

    fn rotate_node<'a>(
        &'a self,
        address: &'a str,
        rotation: &'a KeyRotation,
        now_ms: u64,
        grace_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Result<Rotated, RotationError>> {
        Box::pin(self.rotate_node_now(address, rotation, now_ms, grace_ms, audit))
    }

    fn end_node_grace<'a>(
        &'a self,
        node_id: &'a str,
        now_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Option<bool>> {
        Box::pin(self.end_node_grace_now(node_id, now_ms, audit))
    }

    fn put_gateway_rotation<'a>(
        &'a self,
        rotation: &'a KeyRotation,
        until_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, ()> {
        Box::pin(self.put_gateway_rotation_now(rotation, until_ms, audit))
    }

    fn gateway_rotation(&self) -> Fut<'_, Option<(KeyRotation, u64)>> {
        Box::pin(self.gateway_rotation_now())
    }

    fn audit_pending(&self, max: usize) -> Fut<'_, Vec<PendingAudit>> {
        Box::pin(own_audit::pending(self, max))
    }

    fn audit_append_pending<'a>(
        &'a self,
        node: &'a str,
        ext: AuditExtension,
        seqs: &'a [u64],
    ) -> Fut<'a, bool> {
        Box::pin(own_audit::append(self, node, ext, seqs))
    }
}
