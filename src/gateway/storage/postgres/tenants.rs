//! [`TenantState`] on PostgreSQL: a row per tenant (`tenants`, migration 9), each write
//! one transaction with its pending gateway audit entry. A delete locks the tenant's
//! row and counts its nodes in `peers` in that transaction, so an enrollment into the
//! tenant (which reads the row `FOR SHARE`) cannot slip between the count and the
//! delete.

use super::{own_audit, unavailable, Postgres};
use crate::audit::AuditRecord;
use crate::fleet::tenant::TenantRecord;
use crate::gateway::storage::tenants::{TenantDeleted, TenantPut, TenantState};
use crate::gateway::storage::{Fut, GatewayState, StateError, TenantRoom};
use tokio_postgres::Transaction;

fn parse(name: &str, record: &str) -> Result<TenantRecord, StateError> {
    serde_json::from_str(record).map_err(|e| StateError::Corrupt(format!("tenant {name}: {e}")))
}

impl Postgres {
    async fn tenants_now(&self) -> Result<Vec<TenantRecord>, StateError> {
        let c = self.pool.get().await?;
        let rows = c
            .query("SELECT name, record FROM tenants ORDER BY name", &[])
            .await
            .map_err(unavailable)?;
        rows.iter().map(|r| parse(r.get(0), r.get(1))).collect()
    }

    async fn tenant_now(&self, name: &str) -> Result<Option<TenantRecord>, StateError> {
        let c = self.pool.get().await?;
        let row = c
            .query_opt("SELECT record FROM tenants WHERE name = $1", &[&name])
            .await
            .map_err(unavailable)?;
        row.map(|r| parse(name, r.get(0))).transpose()
    }

    async fn tenant_put_now(
        &self,
        record: &TenantRecord,
        how: TenantPut,
        audit: &AuditRecord,
    ) -> Result<bool, StateError> {
        let json = serde_json::to_string(record)
            .map_err(|e| StateError::Corrupt(format!("tenant {}: {e}", record.name)))?;
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let sql = match how {
            TenantPut::Create => {
                "INSERT INTO tenants (name, record) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING"
            }
            TenantPut::Replace => "UPDATE tenants SET record = $2 WHERE name = $1",
        };
        let n = tx
            .execute(sql, &[&record.name, &json])
            .await
            .map_err(unavailable)?;
        if n == 0 {
            return Ok(false);
        }
        own_audit::pend(&tx, self.now_ms(), audit).await?;
        tx.commit().await.map_err(unavailable)?;
        Ok(true)
    }

    async fn tenant_delete_now(
        &self,
        name: &str,
        audit: &AuditRecord,
    ) -> Result<TenantDeleted, StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let found = tx
            .query_opt("SELECT 1 FROM tenants WHERE name = $1 FOR UPDATE", &[&name])
            .await
            .map_err(unavailable)?;
        if found.is_none() {
            return Ok(TenantDeleted::NotFound);
        }
        // A tenant name has no LIKE wildcard (`[a-z0-9-]`), and an address ends in
        // `@<tenant>` (node ids have no `@`).
        let nodes: i64 = tx
            .query_one(
                "SELECT count(*) FROM peers WHERE node_id LIKE '%@' || $1",
                &[&name],
            )
            .await
            .map_err(unavailable)?
            .get(0);
        if nodes > 0 {
            return Ok(TenantDeleted::HasNodes(nodes as u64));
        }
        tx.execute("DELETE FROM tenants WHERE name = $1", &[&name])
            .await
            .map_err(unavailable)?;
        own_audit::pend(&tx, self.now_ms(), audit).await?;
        tx.commit().await.map_err(unavailable)?;
        Ok(TenantDeleted::Deleted)
    }
}

impl TenantState for Postgres {
    fn tenants(&self) -> Fut<'_, Vec<TenantRecord>> {
        Box::pin(self.tenants_now())
    }

    fn tenant<'a>(&'a self, name: &'a str) -> Fut<'a, Option<TenantRecord>> {
        Box::pin(self.tenant_now(name))
    }

    fn tenant_put<'a>(
        &'a self,
        record: &'a TenantRecord,
        how: TenantPut,
        audit: &'a AuditRecord,
    ) -> Fut<'a, bool> {
        Box::pin(self.tenant_put_now(record, how, audit))
    }

    fn tenant_delete<'a>(
        &'a self,
        name: &'a str,
        audit: &'a AuditRecord,
    ) -> Fut<'a, TenantDeleted> {
        Box::pin(self.tenant_delete_now(name, audit))
    }
}

/// Whether `tenant` can take one more node (PROTOCOL §18), read in the enrollment's
/// transaction: its row `FOR SHARE` (a delete of the tenant waits for the enrollment, or
/// the enrollment sees it gone), and with a `max_nodes` its nodes trusted or waiting,
/// counted under a lock of the tenant's, so two replicas never both take its last place.
pub(super) async fn tenant_room(
    tx: &Transaction<'_>,
    tenant: &str,
) -> Result<TenantRoom, StateError> {
    use crate::fleet::tenant::{TenantRecord, DEFAULT_TENANT};
    let row = tx
        .query_opt(
            "SELECT record FROM tenants WHERE name = $1 FOR SHARE",
            &[&tenant],
        )
        .await
        .map_err(unavailable)?;
    let max_nodes = match row {
        None if tenant != DEFAULT_TENANT => return Ok(TenantRoom::Missing),
        None => return Ok(TenantRoom::Open),
        Some(r) => {
            let rec: TenantRecord = serde_json::from_str(r.get::<_, &str>(0))
                .map_err(|e| StateError::Corrupt(format!("tenants: {e}")))?;
            match rec.quotas.max_nodes {
                None => return Ok(TenantRoom::Open),
                Some(m) => m,
            }
        }
    };
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('outpost-tenant:' || $1))",
        &[&tenant],
    )
    .await
    .map_err(unavailable)?;
    // The part of an address after `@`: '' in `default` (indexed: `peers_tenant`).
    let part = if tenant == DEFAULT_TENANT { "" } else { tenant };
    let n: i64 = tx
        .query_one(
            "SELECT (SELECT count(*) FROM peers WHERE split_part(node_id, '@', 2) = $1
                        AND role = 'node')
                  + (SELECT count(*) FROM enrollments WHERE state = 'pending'
                        AND split_part(node_id, '@', 2) = $1)",
            &[&part],
        )
        .await
        .map_err(unavailable)?
        .get(0);
    Ok(if n as u64 >= max_nodes {
        TenantRoom::Full { max_nodes }
    } else {
        TenantRoom::Open
    })
}
