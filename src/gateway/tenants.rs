//! The tenant registry's flows (PROTOCOL §18): create, set quotas, delete, and list
//! with what each tenant uses. `outpost tenant` on the gateway host calls them on the
//! gateway's state (either engine); refusals are [`TenantError`]s, never a status.
//!
//! What a tenant uses is read where it lives: its nodes are the trust store's nodes
//! whose address names it, its queued messages and bytes the queues of those addresses
//! (`fleet::tenant`, DECISIONS D17).

use std::collections::BTreeMap;

use super::storage::tenants::{TenantDeleted, TenantPut};
use super::storage::{GatewayState, StateError, QUEUE_TO_NODE};
use crate::fleet::tenant::{
    tenant_of, validate_tenant, InvalidTenant, Quotas, TenantRecord, Usage, DEFAULT_TENANT,
};

/// Why a registry change was refused.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error(transparent)]
    Invalid(#[from] InvalidTenant),
    #[error("tenant {0} exists already")]
    Exists(String),
    #[error("no tenant {0}")]
    NotFound(String),
    #[error("tenant {name} still has {nodes} node(s): retire them first (`outpost nodes revoke`)")]
    HasNodes { name: String, nodes: u64 },
    #[error("the tenant default always exists: it can be given quotas, not made or deleted")]
    Default,
    #[error(transparent)]
    State(#[from] StateError),
}

/// A change of a tenant's quotas: each `Some` replaces that quota (`Some(None)` lifts
/// it), each `None` keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaChange {
    pub max_nodes: Option<Option<u64>>,
    pub max_queued_messages: Option<Option<u64>>,
    pub max_queued_bytes: Option<Option<u64>>,
    pub max_commands_per_s: Option<Option<u64>>,
}

impl QuotaChange {
    /// `quotas` with this change applied.
    pub fn apply(&self, quotas: Quotas) -> Quotas {
        Quotas {
            max_nodes: self.max_nodes.unwrap_or(quotas.max_nodes),
            max_queued_messages: self
                .max_queued_messages
                .unwrap_or(quotas.max_queued_messages),
            max_queued_bytes: self.max_queued_bytes.unwrap_or(quotas.max_queued_bytes),
            max_commands_per_s: self.max_commands_per_s.unwrap_or(quotas.max_commands_per_s),
        }
    }
}

/// A tenant and what it uses now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantView {
    pub record: TenantRecord,
    pub usage: Usage,
}

/// Make tenant `name` with `quotas`, by `actor`, at the state's time.
pub async fn create(
    state: &dyn GatewayState,
    name: &str,
    quotas: Quotas,
    actor: &str,
) -> Result<TenantRecord, TenantError> {
    validate_tenant(name)?;
    if name == DEFAULT_TENANT {
        return Err(TenantError::Default);
    }
    let record = TenantRecord {
        name: name.to_string(),
        quotas,
        created_ms: state.now_ms(),
        created_by: actor.to_string(),
    };
    let audit = super::own_audit::tenant_changed(actor, name, "created", Some(&quotas));
    if !state.tenant_put(&record, TenantPut::Create, &audit).await? {
        return Err(TenantError::Exists(name.to_string()));
    }
    Ok(record)
}

/// Change tenant `name`'s quotas (the tenant `default` gets a record the first time).
pub async fn set(
    state: &dyn GatewayState,
    name: &str,
    change: QuotaChange,
    actor: &str,
) -> Result<TenantRecord, TenantError> {
    validate_tenant(name)?;
    // Twice at most: a `default` record made by another command between the read and
    // the write is read again.
    for _ in 0..2 {
        let (mut record, how) = match state.tenant(name).await? {
            Some(r) => (r, TenantPut::Replace),
            None if name == DEFAULT_TENANT => (TenantRecord::implicit_default(), TenantPut::Create),
            None => return Err(TenantError::NotFound(name.to_string())),
        };
        record.quotas = change.apply(record.quotas);
        let audit = super::own_audit::tenant_changed(actor, name, "set", Some(&record.quotas));
        if state.tenant_put(&record, how, &audit).await? {
            return Ok(record);
        }
    }
    Err(TenantError::NotFound(name.to_string()))
}

/// Delete tenant `name` (refused while it has nodes).
pub async fn delete(state: &dyn GatewayState, name: &str, actor: &str) -> Result<(), TenantError> {
    validate_tenant(name)?;
    if name == DEFAULT_TENANT {
        return Err(TenantError::Default);
    }
    let audit = super::own_audit::tenant_changed(actor, name, "deleted", None);
    match state.tenant_delete(name, &audit).await? {
        TenantDeleted::Deleted => Ok(()),
        TenantDeleted::NotFound => Err(TenantError::NotFound(name.to_string())),
        TenantDeleted::HasNodes(nodes) => Err(TenantError::HasNodes {
            name: name.to_string(),
            nodes,
        }),
    }
}

/// Every tenant (`default` first, then by name) with what it uses now.
pub async fn list(state: &dyn GatewayState) -> Result<Vec<TenantView>, StateError> {
    let records = state.tenants().await?;
    let trust = state.load_trust()?;
    let stats = state.queue_stats().await?;
    let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
    for p in trust.list().filter(|p| p.doc.role == "node") {
        usage
            .entry(tenant_of(&p.address()).to_string())
            .or_default()
            .nodes += 1;
    }
    for s in stats.iter().filter(|s| s.queue == QUEUE_TO_NODE) {
        let u = usage.entry(tenant_of(&s.peer).to_string()).or_default();
        u.queued_messages += s.depth;
        u.queued_bytes += s.bytes;
    }
    Ok(views(records, &usage))
}

/// The registry's records with their usage: `default` first (its implicit record when
/// none is stored), then by name.
fn views(records: Vec<TenantRecord>, usage: &BTreeMap<String, Usage>) -> Vec<TenantView> {
    let mut records = records;
    if !records.iter().any(|r| r.name == DEFAULT_TENANT) {
        records.push(TenantRecord::implicit_default());
    }
    records.sort_by(|a, b| {
        (a.name != DEFAULT_TENANT, &a.name).cmp(&(b.name != DEFAULT_TENANT, &b.name))
    });
    records
        .into_iter()
        .map(|record| TenantView {
            usage: usage.get(&record.name).copied().unwrap_or_default(),
            record,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &str) -> TenantRecord {
        TenantRecord {
            name: name.into(),
            quotas: Quotas::default(),
            created_ms: 1,
            created_by: "t".into(),
        }
    }

    #[test]
    fn default_is_listed_first_even_without_a_record() {
        let mut usage = BTreeMap::new();
        usage.insert(
            "acme".to_string(),
            Usage {
                nodes: 2,
                ..Usage::default()
            },
        );
        let v = views(vec![rec("zeta"), rec("acme")], &usage);
        let names: Vec<_> = v.iter().map(|v| v.record.name.as_str()).collect();
        assert_eq!(names, ["default", "acme", "zeta"]);
        assert_eq!(v[1].usage.nodes, 2);
        assert_eq!(v[0].usage, Usage::default());
        // A stored default record is listed once, with its quotas.
        let mut d = rec("default");
        d.quotas.max_nodes = Some(5);
        let v = views(vec![rec("acme"), d], &usage);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].record.quotas.max_nodes, Some(5));
    }

    #[test]
    fn a_change_replaces_only_what_it_names() {
        let q = Quotas {
            max_nodes: Some(10),
            max_queued_messages: Some(100),
            max_queued_bytes: None,
            max_commands_per_s: Some(50),
        };
        let c = QuotaChange {
            max_nodes: Some(None),
            max_queued_bytes: Some(Some(4096)),
            ..QuotaChange::default()
        };
        assert_eq!(
            c.apply(q),
            Quotas {
                max_nodes: None,
                max_queued_messages: Some(100),
                max_queued_bytes: Some(4096),
                max_commands_per_s: Some(50),
            }
        );
        assert_eq!(QuotaChange::default().apply(q), q);
    }
}
