//! The per-tenant metrics (PROTOCOL §18): what each tenant's nodes have queued, how many
//! of them are online, offline or never seen, and the message events by tenant. One
//! series per tenant (and liveness, or event): their number is bounded by the tenants,
//! never by the nodes.

use std::collections::BTreeMap;

use super::error::GatewayError;
use super::fleet::Fleet;
use super::storage::QUEUE_TO_NODE;
use crate::fleet::tenant::tenant_of;

impl Fleet<'_> {
    /// Set the tenant gauges and counters just before `/metrics` renders.
    pub async fn refresh_tenant_gauges(&self) -> Result<(), GatewayError> {
        let gw = self.0;
        let nodes = self.nodes(None).await?;
        let stats = gw.state.queue_stats().await?;
        let mut queued: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for s in stats.iter().filter(|s| s.queue == QUEUE_TO_NODE) {
            let q = queued.entry(tenant_of(&s.peer).to_string()).or_default();
            q.0 += s.depth;
            q.1 += s.bytes;
        }
        let mut by_liveness: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
        for n in &nodes {
            queued.entry(tenant_of(&n.node_id).to_string()).or_default();
            *by_liveness
                .entry((tenant_of(&n.node_id).to_string(), n.liveness))
                .or_default() += 1;
        }
        let m = &gw.metrics;
        m.tenant_queue_depth.replace_all(
            queued
                .iter()
                .map(|(t, (d, _))| (vec![t.clone()], *d as f64))
                .collect(),
        );
        m.tenant_queued_bytes.replace_all(
            queued
                .iter()
                .map(|(t, (_, b))| (vec![t.clone()], *b as f64))
                .collect(),
        );
        m.tenant_nodes.replace_all(
            by_liveness
                .into_iter()
                .map(|((t, l), n)| (vec![t, l.to_string()], n as f64))
                .collect(),
        );
        for ((t, e), n) in gw.events.tenant_counts() {
            m.tenant_messages_total.set(&[&t, e], n as f64);
        }
        Ok(())
    }
}
