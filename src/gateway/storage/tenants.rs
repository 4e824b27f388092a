//! The part of the gateway's state the tenant registry uses (PROTOCOL §18): one record
//! per tenant (its name, quotas, who made it), each write one transaction with its
//! entry of the gateway's own audit log as pending (`storage::enrollments`).
//!
//! The tenant `default` always exists: a gateway from before tenants holds no record of
//! it, and one is stored only once an operator sets its quotas. The registry says which
//! tenants exist; what a tenant uses (its nodes, its queued messages) is read from the
//! trust store and the queues, where a node's address names its tenant
//! (`fleet::tenant`, DECISIONS D17).

use super::Fut;
use crate::audit::AuditRecord;
use crate::fleet::tenant::TenantRecord;

/// How [`TenantState::tenant_put`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantPut {
    /// A new tenant: written only when no record of the name exists.
    Create,
    /// A tenant's new quotas: written only when a record of the name exists.
    Replace,
}

/// Outcome of [`TenantState::tenant_delete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantDeleted {
    Deleted,
    /// No record of the name (nothing written).
    NotFound,
    /// The tenant still has this many nodes in the trust store (nothing written).
    HasNodes(u64),
}

pub trait TenantState {
    /// Every stored tenant record, by name.
    fn tenants(&self) -> Fut<'_, Vec<TenantRecord>>;
    /// The stored record of one tenant.
    fn tenant<'a>(&'a self, name: &'a str) -> Fut<'a, Option<TenantRecord>>;
    /// Store `record` as `how` says, with `audit` pending in the same transaction; false
    /// (nothing written) when the name's record does not allow it (exists for
    /// [`TenantPut::Create`], missing for [`TenantPut::Replace`]).
    fn tenant_put<'a>(
        &'a self,
        record: &'a TenantRecord,
        how: TenantPut,
        audit: &'a AuditRecord,
    ) -> Fut<'a, bool>;
    /// Remove a tenant's record, with `audit` pending in the same transaction, unless a
    /// node of the tenant is in the trust store (checked in that transaction).
    fn tenant_delete<'a>(&'a self, name: &'a str, audit: &'a AuditRecord)
        -> Fut<'a, TenantDeleted>;
}
