//! The operator's console as a read model: what the fleet page and a node's page show,
//! built from the same sources as `GET /v1/nodes` ([`super::fleet::nodes`]), the
//! state's per-node queue listing and the event log kept in memory. No HTTP here (the
//! pages are `api::gateway::ui`); the shaping — filter, sort, pages, totals, the
//! chart's buckets, "since when" — is plain functions of their inputs and `now`.
//!
//! Layout: this file (fleet and node views) · [`chart`] (events per 5-minute bucket) ·
//! [`sessions`] (sign-in sessions, bounded per token, per subject and in all) ·
//! [`sign_in`] (failed sign-ins per address, sign-ins per token) · [`fleet_state`]
//! (the selector filter, the label and desired-state forms, inventory lines) ·
//! [`rollouts`] (the "start a rollout" form as a spec, progress bars) · [`tenants`]
//! (which tenant's fleet a session looks at).

pub mod chart;
pub mod fleet_state;
pub mod rollouts;
pub mod sessions;
pub mod sign_in;
pub mod tenants;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::caller::Caller;
use super::error::GatewayError;
use super::events::{Event, GatewayEvent};
use super::fleet::Fleet;
use super::fleet::NodeView;
use super::fleet_confined::event_seen;
use super::liveness::{DEAD_MS, ONLINE_MS, STALE_MS};
use super::storage::QueuedMessage;
use crate::sync::wire::TaskResult;

/// Rows per fleet page: 2,000 nodes are ten pages, each rendered in a few ms.
pub const PAGE_ROWS: usize = 200;
/// Queued messages a node page lists (the queue's head, in pull order).
pub const NODE_QUEUE_ROWS: usize = 200;
/// Recent events a node page lists.
pub const NODE_EVENTS: usize = 50;
/// Recent results a node page lists, each with what the tool answered.
pub const NODE_RESULTS: usize = 20;

/// What the liveness column says: the four states of [`super::liveness`] plus `never`
/// for a node not heard from since this gateway started (there `offline`).
pub fn liveness_label(v: &NodeView) -> &'static str {
    if v.last_seen.is_none() && !v.polling {
        "never"
    } else {
        v.liveness
    }
}

/// Since when the node has been in its current liveness state, where that is known:
/// `online` from its last `node_online` event; `stale`, `offline` and `dead` from when
/// its silence crossed that state's threshold; `never` from the gateway's start.
pub fn liveness_since(
    label: &str,
    last_seen: Option<u64>,
    online_since: Option<u64>,
    started_ms: u64,
) -> Option<u64> {
    match (label, last_seen) {
        ("online", _) => online_since.or(last_seen),
        ("stale", Some(s)) => Some(s + ONLINE_MS),
        ("offline", Some(s)) => Some(s + STALE_MS),
        ("dead", Some(s)) => Some(s + DEAD_MS),
        ("never", _) => Some(started_ms),
        _ => None,
    }
}

/// Sort keys of the fleet table (`?sort=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Node,
    Liveness,
    LastSeen,
    Queue,
    Oldest,
    Audit,
    Agent,
    Sync,
}

impl SortKey {
    pub const ALL: [SortKey; 8] = [
        SortKey::Node,
        SortKey::Liveness,
        SortKey::LastSeen,
        SortKey::Queue,
        SortKey::Oldest,
        SortKey::Audit,
        SortKey::Agent,
        SortKey::Sync,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Node => "node",
            SortKey::Liveness => "liveness",
            SortKey::LastSeen => "last_seen",
            SortKey::Queue => "queue",
            SortKey::Oldest => "oldest",
            SortKey::Audit => "audit",
            SortKey::Agent => "agent_version",
            SortKey::Sync => "in_sync",
        }
    }
}

/// What the fleet page was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetQuery {
    /// Case-insensitive substring of the node id or its liveness label.
    pub filter: String,
    /// A selector (PROTOCOL §16.2) the rows must match, besides the filter.
    pub selector: String,
    pub sort: SortKey,
    pub descending: bool,
    /// 1-based.
    pub page: usize,
    /// The operator's tenant switcher: only this tenant's fleet ("" = every tenant).
    pub tenant: String,
}

impl Default for FleetQuery {
    fn default() -> Self {
        Self {
            filter: String::new(),
            selector: String::new(),
            sort: SortKey::Node,
            descending: false,
            page: 1,
            tenant: String::new(),
        }
    }
}

/// One row of the fleet table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetRow {
    pub node_id: String,
    /// `online`, `stale`, `offline`, `dead` or `never`.
    pub liveness: &'static str,
    pub since_ms: Option<u64>,
    pub polling: bool,
    pub can_connect: bool,
    pub last_seen_ms: Option<u64>,
    pub queue_depth: u64,
    pub oldest_age_s: u64,
    pub audit_size: u64,
    /// The node's last audit upload was refused (`audit_gap`, `audit_mismatch`) and none
    /// extended the copy since (among the events in memory): the code and when.
    pub audit_alarm: Option<(String, u64)>,
    /// The outpost version its inventory says it runs; `None` until it reported one.
    pub agent_version: Option<String>,
    /// Its reported state holds every member of its desired state (or none was set).
    pub in_sync: bool,
}

/// Counts over the whole fleet (not only the page shown).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub nodes: usize,
    pub online: usize,
    pub stale: usize,
    pub offline: usize,
    pub dead: usize,
    pub never: usize,
    pub polling: usize,
    pub queued: u64,
    /// Nodes whose reported state lacks some of their desired state.
    pub out_of_sync: usize,
}

/// The fleet page: one page of rows, the totals, and the chart.
#[derive(Debug, Clone)]
pub struct FleetPage {
    pub rows: Vec<FleetRow>,
    pub totals: Totals,
    /// Rows that passed the filter.
    pub matched: usize,
    pub page: usize,
    pub pages: usize,
    pub chart: chart::Chart,
    pub now_ms: u64,
    /// The query's selector, when it is malformed: no row is shown.
    pub selector_error: Option<crate::fleet::BadSelector>,
}

/// Liveness rank for sorting: the states that need attention first when descending.
fn liveness_rank(l: &str) -> u8 {
    match l {
        "online" => 0,
        "stale" => 1,
        "offline" => 2,
        "dead" => 3,
        _ => 4,
    }
}

/// Rows from `GET /v1/nodes`'s views and the events in memory. (No dead-letter column:
/// the gateway's pull delivery never dead-letters, PROTOCOL §11.)
pub fn rows(nodes: Vec<NodeView>, events: &[Arc<Event>], started_ms: u64) -> Vec<FleetRow> {
    let mut online_since: HashMap<&str, u64> = HashMap::new();
    // The newest audit refusal per node: (code, when, the copy's size then).
    let mut alarms: HashMap<&str, (String, u64, u64)> = HashMap::new();
    for e in events {
        match &e.event {
            GatewayEvent::NodeOnline { node_id } => {
                online_since.insert(node_id.as_str(), e.ts_ms);
            }
            GatewayEvent::AuditRefused {
                node_id,
                code,
                confirmed_size,
            } => {
                alarms.insert(node_id.as_str(), (code.clone(), e.ts_ms, *confirmed_size));
            }
            _ => {}
        }
    }
    nodes
        .into_iter()
        .map(|v| {
            let label = liveness_label(&v);
            FleetRow {
                since_ms: liveness_since(
                    label,
                    v.last_seen,
                    online_since.get(v.node_id.as_str()).copied(),
                    started_ms,
                ),
                liveness: label,
                polling: v.polling,
                can_connect: v.can_connect,
                last_seen_ms: v.last_seen,
                queue_depth: v.queue_depth,
                oldest_age_s: v.oldest_age_s,
                audit_size: v.audit_size,
                // Over once the copy grew past what it held at the refusal (an upload
                // extended it since, at whichever replica).
                audit_alarm: alarms
                    .get(v.node_id.as_str())
                    .filter(|(_, _, kept)| v.audit_size <= *kept)
                    .cloned()
                    .map(|(code, at, _)| (code, at)),
                agent_version: v.agent_version,
                in_sync: v.in_sync,
                node_id: v.node_id,
            }
        })
        .collect()
}

pub fn totals(rows: &[FleetRow]) -> Totals {
    let mut t = Totals {
        nodes: rows.len(),
        ..Totals::default()
    };
    for r in rows {
        match r.liveness {
            "online" => t.online += 1,
            "stale" => t.stale += 1,
            "offline" => t.offline += 1,
            "dead" => t.dead += 1,
            _ => t.never += 1,
        }
        t.polling += usize::from(r.polling);
        t.queued += r.queue_depth;
        t.out_of_sync += usize::from(!r.in_sync);
    }
    t
}

/// Filter, sort (ties by node id, so pages are stable) and cut one page out; returns
/// the page's rows, how many matched, the page number (clamped) and the page count.
pub fn page(mut rows: Vec<FleetRow>, q: &FleetQuery) -> (Vec<FleetRow>, usize, usize, usize) {
    let needle = q.filter.trim().to_lowercase();
    if !needle.is_empty() {
        rows.retain(|r| r.node_id.to_lowercase().contains(&needle) || r.liveness == needle);
    }
    rows.sort_by(|a, b| {
        let o = match q.sort {
            SortKey::Node => std::cmp::Ordering::Equal,
            SortKey::Liveness => liveness_rank(a.liveness).cmp(&liveness_rank(b.liveness)),
            SortKey::LastSeen => a.last_seen_ms.cmp(&b.last_seen_ms),
            SortKey::Queue => a.queue_depth.cmp(&b.queue_depth),
            SortKey::Oldest => a.oldest_age_s.cmp(&b.oldest_age_s),
            SortKey::Audit => a.audit_size.cmp(&b.audit_size),
            SortKey::Agent => a.agent_version.cmp(&b.agent_version),
            // Out of sync first.
            SortKey::Sync => a.in_sync.cmp(&b.in_sync),
        };
        let o = o.then_with(|| a.node_id.cmp(&b.node_id));
        if q.descending {
            o.reverse()
        } else {
            o
        }
    });
    let matched = rows.len();
    let pages = matched.div_ceil(PAGE_ROWS).max(1);
    let page = q.page.clamp(1, pages);
    let rows = rows
        .into_iter()
        .skip((page - 1) * PAGE_ROWS)
        .take(PAGE_ROWS)
        .collect();
    (rows, matched, page, pages)
}

impl Fleet<'_> {
    /// The fleet page for `q`, of the nodes `viewer` sees (and the events of them).
    /// The totals count the whole fleet; the table shows the nodes the selector selects
    /// (none when it is malformed: the page says why).
    pub async fn fleet_page(
        &self,
        viewer: &Caller,
        q: &FleetQuery,
    ) -> Result<FleetPage, GatewayError> {
        let gw = self.0;
        let (selector, selector_error) = match fleet_state::parse_selector(&q.selector) {
            Ok(s) => (s, None),
            Err(e) => (None, Some(e)),
        };
        let mut marked = gw.fleet().nodes_marked(selector.as_ref()).await?;
        marked.retain(|(v, _)| viewer.sees(&v.node_id));
        let selected: HashSet<String> = marked
            .iter()
            .filter(|(_, sel)| *sel && selector_error.is_none())
            .map(|(v, _)| v.node_id.clone())
            .collect();
        let nodes = marked.into_iter().map(|(v, _)| v).collect();
        let (mut events, _) = gw.events.replay(0);
        events.retain(|e| event_seen(viewer, &e.event));
        let now_ms = gw.now_ms();
        let all = rows(nodes, &events, gw.started_ms);
        let totals = totals(&all);
        let shown = all
            .into_iter()
            .filter(|r| selected.contains(&r.node_id))
            .collect();
        let (rows, matched, page, pages) = page(shown, q);
        Ok(FleetPage {
            selector_error,
            rows,
            totals,
            matched,
            page,
            pages,
            chart: chart::Chart::of(&events, chart::covered_from(&events, gw.started_ms), now_ms),
            now_ms,
        })
    }
}

/// A node's page.
#[derive(Debug, Clone)]
pub struct NodePage {
    pub row: FleetRow,
    /// The head of its queue, in pull order.
    pub queued: Vec<QueuedMessage>,
    /// Its events among those in memory, newest first.
    pub events: Vec<Arc<Event>>,
    /// Its `result` events among those in memory, newest first (at most
    /// [`NODE_RESULTS`]), each with the result filed for its call where it is still kept.
    pub results: Vec<(Arc<Event>, Option<TaskResult>)>,
    pub now_ms: u64,
}

/// The node an event is about, if any. Event kinds not listed here are about no single
/// node, as far as the console's node page is concerned.
pub fn event_node(e: &GatewayEvent) -> Option<&str> {
    match e {
        GatewayEvent::Queued { node_id, .. }
        | GatewayEvent::Delivered { node_id, .. }
        | GatewayEvent::Expired { node_id, .. }
        | GatewayEvent::Rejected { node_id, .. }
        | GatewayEvent::Dead { node_id, .. }
        | GatewayEvent::Result { node_id, .. }
        | GatewayEvent::NodeOnline { node_id }
        | GatewayEvent::NodeOffline { node_id }
        | GatewayEvent::Enrollment { node_id, .. }
        | GatewayEvent::NodeRevoked { node_id, .. }
        | GatewayEvent::AuditRefused { node_id, .. }
        | GatewayEvent::LabelsChanged { node_id, .. }
        | GatewayEvent::DesiredSet { node_id, .. }
        | GatewayEvent::StateReported { node_id, .. }
        | GatewayEvent::InventoryChanged { node_id, .. } => Some(node_id),
        _ => None,
    }
}

impl Fleet<'_> {
    /// The page of enrolled node `node_id` (its address) when `caller` sees it;
    /// `UnknownNode` otherwise.
    pub async fn node_page(
        &self,
        caller: &Caller,
        node_id: &str,
    ) -> Result<NodePage, GatewayError> {
        let gw = self.0;
        caller.reaches(node_id)?;
        if gw.enrolled(node_id).await?.is_none() {
            return Err(GatewayError::UnknownNode(node_id.to_string()));
        }
        let view = gw
            .fleet()
            .nodes(None)
            .await?
            .into_iter()
            .find(|v| v.node_id == node_id)
            .ok_or_else(|| GatewayError::UnknownNode(node_id.to_string()))?;
        let (events, _) = gw.events.replay(0);
        let row = rows(vec![view], &events, gw.started_ms)
            .pop()
            .ok_or_else(|| GatewayError::UnknownNode(node_id.to_string()))?;
        let mine: Vec<Arc<Event>> = events
            .iter()
            .rev()
            .filter(|e| event_node(&e.event) == Some(node_id))
            .cloned()
            .collect();
        let mut results = Vec::new();
        for e in mine
            .iter()
            .filter(|e| matches!(e.event, GatewayEvent::Result { .. }))
            .take(NODE_RESULTS)
        {
            let GatewayEvent::Result { message_id, .. } = &e.event else {
                continue;
            };
            results.push((e.clone(), super::commands::result_of(gw, message_id).await?));
        }
        Ok(NodePage {
            row,
            queued: gw.state.queued_for(node_id, NODE_QUEUE_ROWS).await?,
            events: mine.into_iter().take(NODE_EVENTS).collect(),
            results,
            now_ms: gw.now_ms(),
        })
    }
}

#[cfg(test)]
mod tests;
