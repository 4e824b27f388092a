//! The tenants' quotas on what they queue, checked for each command, tool call and
//! forward (`gateway::tenant_quota` says how).

use std::collections::HashMap;

use crate::fleet::tenant::{tenant_of, Quota, Quotas, Usage};
use crate::gateway::error::GatewayError;
use crate::gateway::state::Gateway;
use crate::gateway::storage::QUEUE_TO_NODE;
use crate::gateway::tenant_quota::{admit, Snapshot, REREAD_MS};

impl Gateway {
    /// Admit one message of `bytes` for the node at `address` (and count it), or refuse
    /// it: [`GatewayError::TenantQuota`].
    pub(in crate::gateway) async fn admit_queued(
        &self,
        address: &str,
        bytes: u64,
    ) -> Result<(), GatewayError> {
        let now = self.now_ms();
        self.fresh_quotas(now).await?;
        let tenant = tenant_of(address);
        let mut s = self.quota_gate.snapshot();
        let Some(q) = s.quotas.get(tenant).copied() else {
            return Ok(());
        };
        let u = s.usage.entry(tenant.to_string()).or_default();
        admit(&q, u, bytes).map_err(|quota| {
            GatewayError::TenantQuota(
                quota.as_str(),
                format!(
                    "tenant {tenant} has reached its {} ({} messages, {} bytes queued for its nodes): nothing was queued; retry once its nodes have taken some",
                    quota.as_str(),
                    u.queued_messages,
                    u.queued_bytes
                ),
            )
        })?;
        u.queued_messages += 1;
        u.queued_bytes += bytes;
        Ok(())
    }

    /// Admit one command or tool call for the node at `address` under its tenant's
    /// `max_commands_per_s`, or refuse it ([`GatewayError::TenantQuota`]); before
    /// anything is sealed or written.
    pub(in crate::gateway) async fn admit_command(
        &self,
        address: &str,
    ) -> Result<(), GatewayError> {
        let now = self.now_ms();
        self.fresh_quotas(now).await?;
        let tenant = tenant_of(address);
        let rate = self
            .quota_gate
            .snapshot()
            .quotas
            .get(tenant)
            .and_then(|q| q.max_commands_per_s);
        match rate {
            Some(rate) if !self.quota_gate.take_command(tenant, rate, now) => {
                Err(GatewayError::TenantQuota(
                    Quota::CommandRate.as_str(),
                    format!(
                        "tenant {tenant} has reached its max_commands_per_s ({rate} a second): nothing was queued; retry in a second"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The snapshot at most [`REREAD_MS`] old at `now`.
    async fn fresh_quotas(&self, now: u64) -> Result<(), GatewayError> {
        let stale = self
            .quota_gate
            .snapshot()
            .read_ms
            .is_none_or(|t| now.saturating_sub(t) >= REREAD_MS);
        if stale {
            self.reread_quotas(now).await?;
        }
        Ok(())
    }

    /// Read the registry and, when a tenant has a quota on what it queues, each
    /// tenant's queued messages and bytes.
    async fn reread_quotas(&self, now: u64) -> Result<(), GatewayError> {
        let _one = self.quota_gate.rereading.lock().await;
        if self
            .quota_gate
            .snapshot()
            .read_ms
            .is_some_and(|t| now.saturating_sub(t) < REREAD_MS)
        {
            return Ok(());
        }
        let quotas: HashMap<String, Quotas> = self
            .state
            .tenants()
            .await?
            .into_iter()
            .filter(|t| {
                let q = &t.quotas;
                q.max_queued_messages.is_some()
                    || q.max_queued_bytes.is_some()
                    || q.max_commands_per_s.is_some()
            })
            .map(|t| (t.name, t.quotas))
            .collect();
        let counted = |q: &Quotas| q.max_queued_messages.is_some() || q.max_queued_bytes.is_some();
        let mut usage: HashMap<String, Usage> = HashMap::new();
        if quotas.values().any(counted) {
            for s in self.state.queue_stats().await? {
                let t = tenant_of(&s.peer);
                if s.queue == QUEUE_TO_NODE && quotas.get(t).is_some_and(counted) {
                    let u = usage.entry(t.to_string()).or_default();
                    u.queued_messages += s.depth;
                    u.queued_bytes += s.bytes;
                }
            }
        }
        *self.quota_gate.snapshot() = Snapshot {
            read_ms: Some(now),
            quotas,
            usage,
        };
        Ok(())
    }
}
