//! The fleet as operators read it: every enrolled node with its liveness, long-poll,
//! queue and audit copy (`GET /v1/nodes`), and where one message is (`GET
//! /v1/messages/{id}`), the gateway's `/v1/status`, and the events a resuming
//! subscriber missed (from memory, or the replicas' events). Read-only: it asks the
//! state, liveness, audit sync and the trust store and changes nothing.

use super::commands::result_of;
use super::error::GatewayError;
use super::events::Missed;
use super::node_state::StateView;
use super::state::Gateway;
use super::storage::fleet::FleetSummary;
use super::storage::{MessageStatus, QueueStat, QUEUE_TO_NODE};
use crate::fleet::Selector;
use crate::sync::wire::TaskResult;

/// Does the node with this summary match `sel`?
pub fn selects(sel: &Selector, s: &FleetSummary) -> bool {
    let labels = s.labels.clone().unwrap_or_default();
    sel.matches(&labels, &|f| s.inventory.as_ref().and_then(|i| i.fact(f)))
}
use crate::telemetry::status::{AuditStatus, QueueStatus, Status};

/// Where a message is, and the result filed for it.
#[derive(Debug, Clone)]
pub struct MessageView {
    pub status: Option<MessageStatus>,
    pub result: Option<TaskResult>,
}

/// One enrolled node as `GET /v1/nodes` shows it. Fields in alphabetical order: the
/// answer gives its keys sorted, like the rest of the API's answers.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct NodeView {
    /// The outpost version the node reported (PROTOCOL §16.3); null until it did.
    pub agent_version: Option<String>,
    pub audit_size: u64,
    /// Trusted with `send`: it can connect and pull. Without it nothing is queued for it.
    pub can_connect: bool,
    /// Its desired state's members all have their values in its reported state.
    pub in_sync: bool,
    pub labels: crate::fleet::Labels,
    pub last_seen: Option<u64>,
    pub liveness: &'static str,
    pub node_id: String,
    pub oldest_age_s: u64,
    pub polling: bool,
    pub queue_depth: u64,
}

/// One node as `GET /v1/nodes/{id}` shows it: its row of the listing, its inventory
/// and its state.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct NodeDetail {
    pub inventory: Option<crate::fleet::Inventory>,
    pub inventory_at_ms: Option<u64>,
    pub state: super::node_state::StateView,
    #[serde(flatten)]
    pub view: NodeView,
}

/// The fleet read model: what `/v1/nodes`, `/v1/messages/{id}`, `/v1/status` and the
/// console show. Reads only.
pub struct Fleet<'g>(pub(super) &'g Gateway);

impl Gateway {
    pub fn fleet(&self) -> Fleet<'_> {
        Fleet(self)
    }
}

impl Fleet<'_> {
    pub async fn message(&self, id: &str) -> Result<MessageView, GatewayError> {
        let gw = self.0;
        let status = gw.state.message_status(id).await?;
        let result = result_of(gw, id).await?;
        if status.is_none() && result.is_none() {
            return Err(GatewayError::NotFound(
                "not_found",
                "no such message".into(),
            ));
        }
        Ok(MessageView { status, result })
    }

    /// Every enrolled node, or those `selector` selects (PROTOCOL §16.2).
    pub async fn nodes(&self, selector: Option<&Selector>) -> Result<Vec<NodeView>, GatewayError> {
        let summaries = self.0.state.fleet_summaries().await?;
        self.views(&summaries, &|_, s| {
            selector.is_none_or(|sel| selects(sel, s))
        })
        .await
    }

    /// Every enrolled node, each with whether `selector` selects it: the console's
    /// totals count the whole fleet while its table shows the selected.
    pub async fn nodes_marked(
        &self,
        selector: Option<&Selector>,
    ) -> Result<Vec<(NodeView, bool)>, GatewayError> {
        let summaries = self.0.state.fleet_summaries().await?;
        let none = FleetSummary::default();
        let views = self.views(&summaries, &|_, _| true).await?;
        Ok(views
            .into_iter()
            .map(|v| {
                let s = summaries.get(&v.node_id).unwrap_or(&none);
                let selected = selector.is_none_or(|sel| selects(sel, s));
                (v, selected)
            })
            .collect())
    }

    /// One enrolled node with its labels, inventory and state (`GET /v1/nodes/{id}`).
    pub async fn node(&self, id: &str) -> Result<NodeDetail, GatewayError> {
        let record = self.0.node_states().record(id).await?;
        let summaries = [(id.to_string(), record.summary.clone())].into();
        let view = self
            .views(&summaries, &|n, _| n == id)
            .await?
            .pop()
            .ok_or_else(|| GatewayError::UnknownNode(id.to_string()))?;
        Ok(NodeDetail {
            inventory: record.summary.inventory.clone(),
            inventory_at_ms: record.summary.inventory_at_ms,
            state: StateView::of(id, &record),
            view,
        })
    }

    /// The enrolled nodes `keep` keeps, given their fleet summaries.
    async fn views(
        &self,
        summaries: &std::collections::HashMap<String, FleetSummary>,
        keep: &(dyn Fn(&str, &FleetSummary) -> bool + Sync),
    ) -> Result<Vec<NodeView>, GatewayError> {
        let gw = self.0;
        let none = FleetSummary::default();
        let summary = |id: &str| summaries.get(id).unwrap_or(&none);
        let stats: Vec<QueueStat> = gw.state.queue_stats().await?;
        let mut out = Vec::new();
        let trust = gw.trust();
        let ids: Vec<String> = trust
            .list()
            .filter(|p| p.doc.role == "node")
            .map(|p| p.address())
            .filter(|id| keep(id, summary(id)))
            .collect();
        let live = gw.liveness_of(&ids).await;
        let stats: std::collections::HashMap<&str, &QueueStat> = stats
            .iter()
            .filter(|s| s.queue == QUEUE_TO_NODE)
            .map(|s| (s.peer.as_str(), s))
            .collect();
        let audit_sizes = gw.audit_sync().confirmed_sizes(&ids).await?;
        for id in &ids {
            let (liveness, last_seen, polling) =
                live.get(id).copied().unwrap_or(super::live::NOT_SEEN);
            let st = stats.get(id.as_str());
            let fleet = summary(id);
            out.push(NodeView {
                agent_version: fleet.inventory.as_ref().map(|i| i.agent_version.clone()),
                in_sync: fleet.in_sync || fleet.desired_version == 0,
                labels: fleet.labels.clone().unwrap_or_default(),
                node_id: id.clone(),
                last_seen,
                liveness: liveness.as_str(),
                polling,
                can_connect: trust.get(id).is_some_and(|p| p.rights.send),
                queue_depth: st.map(|s| s.depth).unwrap_or(0),
                oldest_age_s: st.map(|s| s.oldest_age_s).unwrap_or(0),
                audit_size: audit_sizes.get(id).copied().unwrap_or(0),
            });
        }
        Ok(out)
    }

    /// The events after `after` a resuming dashboard or console page missed: from
    /// memory, or from the state's event table when memory does not reach back.
    pub async fn events_after(&self, after: u64) -> Missed {
        self.0.events.missed(self.0.state.events(), after).await
    }

    /// `GET /v1/status` of a gateway: the node's shape where it applies.
    pub async fn status(&self) -> Result<Status, GatewayError> {
        let gw = self.0;
        let queues = gw.state.queue_stats().await?;
        Ok(Status {
            node_id: gw.cfg.node_id.clone(),
            role: "gateway".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            store: gw.cfg.store_description(),
            uptime_s: gw.now_ms().saturating_sub(gw.started_ms) / 1000,
            upstream: serde_json::json!({"state": "none", "detail": "this is the gateway"}),
            queues: queues.iter().map(QueueStatus::from).collect(),
            audit: AuditStatus {
                size: 0,
                synced_size: 0,
            },
            nodes_enrolled: Some(gw.trust().list().filter(|p| p.doc.role == "node").count()),
            sign_pk: None,
            key_rotation: None,
            clock: None,
        })
    }
}
