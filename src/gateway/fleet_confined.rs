//! The fleet read model confined to a caller (PROTOCOL §18): a tenant's caller sees its
//! own nodes, by their node ids, and what is queued for or came from them; anything of
//! another tenant answers exactly as something that does not exist. The operator sees
//! every tenant, each node by its address.

use super::caller::Caller;
use super::error::GatewayError;
use super::events::{Event, GatewayEvent};
use super::fleet::{Fleet, MessageView, NodeDetail, NodeView};
use crate::fleet::Selector;

impl Fleet<'_> {
    /// [`Fleet::nodes`] of the nodes `caller` sees, as it names them.
    pub async fn nodes_for(
        &self,
        caller: &Caller,
        selector: Option<&Selector>,
    ) -> Result<Vec<NodeView>, GatewayError> {
        let mut nodes = self.nodes(selector).await?;
        nodes.retain(|n| caller.sees(&n.node_id));
        for n in &mut nodes {
            n.node_id = caller.shown(&n.node_id).to_string();
        }
        Ok(nodes)
    }

    /// [`Fleet::node`] of the node `caller` names `id`: unknown when it names none it
    /// may see.
    pub async fn node_for(&self, caller: &Caller, id: &str) -> Result<NodeDetail, GatewayError> {
        let unknown = || GatewayError::UnknownNode(id.to_string());
        let address = caller.address(id).ok_or_else(unknown)?;
        let mut d = self.node(&address).await.map_err(|e| match e {
            GatewayError::UnknownNode(_) => unknown(),
            e => e,
        })?;
        d.view.node_id = id.to_string();
        d.state.node_id = id.to_string();
        Ok(d)
    }

    /// [`Fleet::message`] when the message is for (or from) a node `caller` sees; else
    /// the answer for a message that does not exist.
    pub async fn message_for(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<MessageView, GatewayError> {
        let mut view = self.message_seen(caller, id).await?;
        if let Some(s) = &mut view.status {
            s.peer = caller.shown(&s.peer).to_string();
        }
        Ok(view)
    }
}

impl Fleet<'_> {
    /// [`Fleet::message`] when `caller` sees the node it is for (or from), its node named
    /// by its address (the console's view); else the answer for a message that does not
    /// exist.
    pub async fn message_seen(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<MessageView, GatewayError> {
        let view = self.message(id).await?;
        let node = match &view.status {
            Some(s) => Some(s.peer.clone()),
            None => self.0.state.request_node(id).await?,
        };
        if !node.is_some_and(|n| caller.sees(&n)) {
            return Err(GatewayError::NotFound(
                "not_found",
                "no such message".into(),
            ));
        }
        Ok(view)
    }
}

/// Whether `caller` sees event `e` at all (as [`event_for`] decides, without renaming).
pub fn event_seen(caller: &Caller, e: &GatewayEvent) -> bool {
    if caller.tenant.is_none() {
        return true;
    }
    if let Some(tenant) = rollout_tenant(e) {
        return tenant == caller.tenant.as_deref();
    }
    let mut e = e.clone();
    node_of_event(&mut e).is_some_and(|n| caller.sees(n))
}

/// The event as `caller` may see it: one of its nodes' events with the node as it names
/// it, and its tenant's rollouts'; `None` for another tenant's, and for a tenant's caller
/// the events of no tenant (token revocations, the operator's rollouts).
pub fn event_for(caller: &Caller, e: &Event) -> Option<Event> {
    if caller.tenant.is_none() {
        return Some(e.clone());
    }
    if let Some(tenant) = rollout_tenant(&e.event) {
        return (tenant == caller.tenant.as_deref()).then(|| e.clone());
    }
    let mut e = e.clone();
    let node = node_of_event(&mut e.event)?;
    if !caller.sees(node) {
        return None;
    }
    *node = caller.shown(node).to_string();
    Some(e)
}

/// A rollout event's tenant (`Some(None)`: the operator's rollout); `None`: not a
/// rollout event.
fn rollout_tenant(e: &GatewayEvent) -> Option<Option<&str>> {
    use GatewayEvent as G;
    match e {
        G::RolloutProgress { tenant, .. }
        | G::RolloutHalted { tenant, .. }
        | G::RolloutCompleted { tenant, .. } => Some(tenant.as_deref()),
        _ => None,
    }
}

/// The node an event is about.
fn node_of_event(e: &mut GatewayEvent) -> Option<&mut String> {
    use GatewayEvent as G;
    match e {
        G::Queued { node_id, .. }
        | G::Delivered { node_id, .. }
        | G::Expired { node_id, .. }
        | G::Rejected { node_id, .. }
        | G::Dead { node_id, .. }
        | G::Result { node_id, .. }
        | G::NodeOnline { node_id }
        | G::NodeOffline { node_id }
        | G::Enrollment { node_id, .. }
        | G::NodeRevoked { node_id, .. }
        | G::NodeRotated { node_id, .. }
        | G::AuditRefused { node_id, .. }
        | G::LabelsChanged { node_id, .. }
        | G::DesiredSet { node_id, .. }
        | G::StateReported { node_id, .. }
        | G::InventoryChanged { node_id, .. } => Some(node_id),
        G::Revoked { .. }
        | G::RolloutProgress { .. }
        | G::RolloutHalted { .. }
        | G::RolloutCompleted { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(node: &str) -> Event {
        Event {
            id: 7,
            ts_ms: 1,
            event: GatewayEvent::NodeOnline {
                node_id: node.into(),
            },
        }
    }

    #[test]
    fn a_tenant_sees_its_own_nodes_events_by_their_ids() {
        let acme = Caller::of_tenant("t", "acme");
        let op = Caller::operator("o");
        assert_eq!(event_for(&acme, &ev("node:a@acme")), Some(ev("node:a")));
        assert_eq!(event_for(&acme, &ev("node:a")), None);
        assert_eq!(event_for(&acme, &ev("node:a@globex")), None);
        assert_eq!(event_for(&op, &ev("node:a@acme")), Some(ev("node:a@acme")));
        let revoked = Event {
            id: 8,
            ts_ms: 1,
            event: GatewayEvent::Revoked {
                jti: "j".into(),
                version: 1,
                by: "o".into(),
            },
        };
        assert_eq!(event_for(&acme, &revoked), None);
        assert!(event_for(&op, &revoked).is_some());
    }

    #[test]
    fn a_tenant_sees_its_own_rollouts_events_only() {
        let done = |tenant: Option<&str>| Event {
            id: 9,
            ts_ms: 1,
            event: GatewayEvent::RolloutCompleted {
                rollout_id: "r".into(),
                tenant: tenant.map(Into::into),
                state: crate::gateway::storage::rollouts::State::Completed,
            },
        };
        let acme = Caller::of_tenant("t", "acme");
        let op = Caller::operator("o");
        assert_eq!(
            event_for(&acme, &done(Some("acme"))),
            Some(done(Some("acme")))
        );
        assert_eq!(event_for(&acme, &done(Some("globex"))), None);
        assert_eq!(event_for(&acme, &done(None)), None);
        assert!(event_for(&op, &done(Some("globex"))).is_some());
        assert!(event_for(&op, &done(None)).is_some());
    }
}
