//! [`TenantState`] on the embedded store: one KV record per tenant under
//! [`KV_GW_TENANTS`]`/<name>`, written by `outpost tenant` (the gateway only reads
//! them), each write one commit with its pending audit entry.
//!
//! The existence checks are made in this process before its commit: two `outpost
//! tenant` commands racing on one name could both pass them (the last one's record
//! stays). A delete counts the tenant's nodes in the trust store just before its
//! commit; an enrollment into the tenant committed by the running gateway between the
//! two is possible (a node of a deleted tenant then answers as any node of an unknown
//! tenant: refused until the tenant is made again). PostgreSQL makes both checks in the
//! write's transaction.

use super::Embedded;
use crate::audit::AuditRecord;
use crate::fleet::tenant::TenantRecord;
use crate::gateway::storage::tenants::{TenantDeleted, TenantPut, TenantState};
use crate::gateway::storage::{Fut, RecordState, StateError, TenantRoom};
use crate::store::names::KV_GW_TENANTS;
use crate::store::Batch;

impl Embedded {
    /// Whether `tenant` can take one more node (PROTOCOL §18): its nodes trusted or
    /// waiting for approval against its `max_nodes`, counted only when it has one (a read
    /// of every peer and record: a quota costs its tenant's enrollments that much).
    pub(super) fn tenant_room(&self, tenant: &str) -> Result<TenantRoom, StateError> {
        use crate::fleet::tenant::{tenant_of, TenantRecord, DEFAULT_TENANT};
        let record: Option<TenantRecord> =
            self.kv_json(crate::store::names::KV_GW_TENANTS, tenant)?;
        let max_nodes = match record {
            None if tenant != DEFAULT_TENANT => return Ok(TenantRoom::Missing),
            None => return Ok(TenantRoom::Open),
            Some(r) => match r.quotas.max_nodes {
                None => return Ok(TenantRoom::Open),
                Some(m) => m,
            },
        };
        let trust = crate::daemon::trust::load(&self.store).map_err(super::trust_corrupt)?;
        let trusted = trust
            .list()
            .filter(|p| {
                p.doc.role == "node" && p.tenant.as_deref().unwrap_or(DEFAULT_TENANT) == tenant
            })
            .count() as u64;
        let waiting = self
            .records_now()?
            .iter()
            .filter(|r| r.state == RecordState::Pending && tenant_of(&r.node_id) == tenant)
            .count() as u64;
        Ok(if trusted + waiting >= max_nodes {
            TenantRoom::Full { max_nodes }
        } else {
            TenantRoom::Open
        })
    }

    fn tenants_now(&self) -> Result<Vec<TenantRecord>, StateError> {
        let mut all = self
            .store
            .kv_list(KV_GW_TENANTS)?
            .into_iter()
            .map(|(name, v)| {
                serde_json::from_slice(&v)
                    .map_err(|e| StateError::Corrupt(format!("tenant {name}: {e}")))
            })
            .collect::<Result<Vec<TenantRecord>, _>>()?;
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn tenant_put_now(
        &self,
        record: &TenantRecord,
        how: TenantPut,
        audit: &AuditRecord,
    ) -> Result<bool, StateError> {
        let exists = self.store.kv_get(KV_GW_TENANTS, &record.name)?.is_some();
        if exists != (how == TenantPut::Replace) {
            return Ok(false);
        }
        let bytes = serde_json::to_vec(record)
            .map_err(|e| StateError::Corrupt(format!("tenant {}: {e}", record.name)))?;
        let mut batch = Batch::new();
        batch.kv_put(KV_GW_TENANTS, &record.name, bytes);
        self.pend(&mut batch, self.store.now_ms(), audit);
        self.store.commit(batch).await?;
        Ok(true)
    }

    async fn tenant_delete_now(
        &self,
        name: &str,
        audit: &AuditRecord,
    ) -> Result<TenantDeleted, StateError> {
        if self.store.kv_get(KV_GW_TENANTS, name)?.is_none() {
            return Ok(TenantDeleted::NotFound);
        }
        let trust = crate::daemon::trust::load(&self.store).map_err(super::trust_corrupt)?;
        let nodes = trust
            .list()
            .filter(|p| p.tenant.as_deref() == Some(name))
            .count() as u64;
        if nodes > 0 {
            return Ok(TenantDeleted::HasNodes(nodes));
        }
        let mut batch = Batch::new();
        batch.kv_delete(KV_GW_TENANTS, name);
        self.pend(&mut batch, self.store.now_ms(), audit);
        self.store.commit(batch).await?;
        Ok(TenantDeleted::Deleted)
    }
}

impl TenantState for Embedded {
    fn tenants(&self) -> Fut<'_, Vec<TenantRecord>> {
        Box::pin(async move { self.tenants_now() })
    }

    fn tenant<'a>(&'a self, name: &'a str) -> Fut<'a, Option<TenantRecord>> {
        Box::pin(async move { self.kv_json(KV_GW_TENANTS, name) })
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
