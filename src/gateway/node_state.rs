//! Fleet state (PROTOCOL §16): the labels an admin sets, the inventory and reported
//! state each node reports, and the desired state an admin writes, which a node's pull
//! carries while the node holds an older version (coalesced: only the newest is ever
//! sealed).
//!
//! Every change reads the node's record, makes the new one (pure: `fleet`), and writes
//! it over the revision it read, again from the top when another write came first
//! (`storage::fleet`): two replicas, an operator and a node's report never lose each
//! other's change, and no version goes back.

use rand_core::OsRng;
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::own_audit;
use super::state::Gateway;
use super::storage::fleet::{DocsWrite, FleetRecord};
use crate::audit::AuditRecord;
use crate::envelope::{seal, SealParams};
use crate::fleet::{delta, LabelChange, Labels, Versioned, Write};
pub use crate::sync::wire::desired_message_id;
use crate::sync::wire::{DesiredState, ReportAnswer, StateReport, DESIRED_STATE};

/// Writes over a revision that moved, before the flow gives up (each retry re-reads:
/// only a node written this often at once runs out).
const RETRIES: usize = 32;
/// A sealed desired state lives this long (it is sealed again for a later pull).
pub const DESIRED_TTL_MS: u64 = 3600 * 1000;

/// One node's state as `GET /v1/nodes/{id}/state` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct StateView {
    pub delta: Value,
    pub desired: Value,
    pub desired_version: u64,
    pub in_sync: bool,
    pub node_desired_version: u64,
    pub node_id: String,
    pub reported: Value,
    pub reported_version: u64,
}

impl StateView {
    pub fn of(node_id: &str, r: &FleetRecord) -> Self {
        let d = delta(&r.docs.desired, &r.docs.reported);
        Self {
            in_sync: d.is_none(),
            delta: d.unwrap_or_else(|| Value::Object(Default::default())),
            desired: r.docs.desired.clone(),
            desired_version: r.summary.desired_version,
            node_desired_version: r.summary.node_desired_version,
            node_id: node_id.to_string(),
            reported: r.docs.reported.clone(),
            reported_version: r.summary.reported_version,
        }
    }
}

/// A record's labels as they apply (none set yet: none).
pub fn labels_of(r: &FleetRecord) -> Labels {
    r.summary.labels.clone().unwrap_or_default()
}

/// What one change makes of a record: the new record and whether its documents
/// changed, or nothing to write.
type Change<T> = Result<Option<(FleetRecord, DocsWrite, T)>, GatewayError>;

/// Labels, inventory, desired and reported state of the fleet's nodes.
pub struct NodeStates<'g>(pub(super) &'g Gateway);

impl Gateway {
    pub fn node_states(&self) -> NodeStates<'_> {
        NodeStates(self)
    }
}

impl NodeStates<'_> {
    /// Apply `change` to the node's record until the write lands on the revision it was
    /// read at; the record as written (or as read, when there was nothing to write)
    /// and the change's own outcome. `audit` of the new record is the gateway audit
    /// entry committed with it (pending, appended here once it landed), if any.
    async fn update<T>(
        &self,
        node: &str,
        wake: bool,
        change: impl Fn(&FleetRecord) -> Change<T>,
        audit: impl Fn(&FleetRecord) -> Option<AuditRecord>,
    ) -> Result<(FleetRecord, Option<T>), GatewayError> {
        let state = &self.0.state;
        for _ in 0..RETRIES {
            let read = state.fleet_record(node).await?;
            let Some((mut next, docs, out)) = change(&read)? else {
                return Ok((read, None));
            };
            next.summary.revision = read.summary.revision + 1;
            let entry = audit(&next);
            let stamped = entry.as_ref().map(|a| (self.0.now_ms(), a));
            if state
                .put_fleet(node, read.summary.revision, &next, docs, wake, stamped)
                .await?
            {
                if entry.is_some() {
                    super::own_audit::append_pending(self.0).await;
                }
                return Ok((next, Some(out)));
            }
        }
        Err(GatewayError::Internal(format!(
            "the fleet record of {node} changed {RETRIES} times while it was written; retry"
        )))
    }

    /// The node must be enrolled (trusted as a node) for an operator to change it.
    async fn enrolled(&self, node: &str) -> Result<(), GatewayError> {
        match self.0.enrolled(node).await? {
            Some(_) => Ok(()),
            None => Err(GatewayError::UnknownNode(node.to_string())),
        }
    }

    /// One node's record (the default when nothing was stored), enrolled or not.
    pub async fn record(&self, node: &str) -> Result<FleetRecord, GatewayError> {
        Ok(self.0.state.fleet_record(node).await?)
    }

    /// `PATCH /v1/nodes/{id}/labels`: the change applied as a whole, or refused whole;
    /// the gateway's audit log records who made it.
    pub async fn change_labels(
        &self,
        node: &str,
        change: &LabelChange,
        by: &str,
    ) -> Result<Labels, GatewayError> {
        self.enrolled(node).await?;
        let (rec, _) = self
            .update(
                node,
                false,
                |r| {
                    let labels = labels_of(r).apply(change)?;
                    let mut next = r.clone();
                    next.summary.labels = Some(labels);
                    Ok(Some((next, DocsWrite::Unchanged, ())))
                },
                |_| Some(own_audit::labels_changed(by, node, change)),
            )
            .await?;
        let labels = labels_of(&rec);
        self.0.publish(GatewayEvent::LabelsChanged {
            node_id: node.to_string(),
            labels: labels.clone(),
            by: by.to_string(),
        });
        self.0.events_committed().await;
        Ok(labels)
    }

    /// `PUT`/`PATCH /v1/nodes/{id}/desired`: a new desired version (checked against
    /// `if_match`), durable before it returns; a long-poll of the node is answered so
    /// the version goes out at once. The gateway's audit log records who wrote it.
    pub async fn write_desired(
        &self,
        node: &str,
        write: &Write,
        if_match: Option<u64>,
        by: &str,
    ) -> Result<u64, GatewayError> {
        self.desired(node, write, if_match, by, true).await
    }

    /// A rollout's desired-state write to one of its nodes: audited once as the
    /// rollout (its `rollout` entry names the change and the selector), not per node.
    pub(super) async fn rollout_desired(
        &self,
        node: &str,
        write: &Write,
        by: &str,
    ) -> Result<u64, GatewayError> {
        self.desired(node, write, None, by, false).await
    }

    async fn desired(
        &self,
        node: &str,
        write: &Write,
        if_match: Option<u64>,
        by: &str,
        audited: bool,
    ) -> Result<u64, GatewayError> {
        self.enrolled(node).await?;
        let (rec, _) = self
            .update(
                node,
                true,
                |r| {
                    let now = Versioned {
                        doc: r.docs.desired.clone(),
                        version: r.summary.desired_version,
                    };
                    let new = now.write(write, if_match)?;
                    let mut next = r.clone();
                    next.summary.in_sync = delta(&new.doc, &r.docs.reported).is_none();
                    next.summary.desired_version = new.version;
                    next.docs.desired = new.doc;
                    Ok(Some((next, DocsWrite::Changed, ())))
                },
                |next| {
                    audited.then(|| {
                        let version = next.summary.desired_version;
                        own_audit::desired_written(by, node, write, version, &next.docs.desired)
                    })
                },
            )
            .await?;
        let version = rec.summary.desired_version;
        self.0.wake_node(node);
        self.0.publish(GatewayEvent::DesiredSet {
            node_id: node.to_string(),
            version,
            by: by.to_string(),
        });
        self.0.events_committed().await;
        Ok(version)
    }

    /// `POST /v1/nodes/{id}/report`: keep a newer reported version and an inventory
    /// that moved (PROTOCOL §16.3, §16.5); a report that changes nothing writes nothing.
    pub async fn take_report(
        &self,
        node: &str,
        report: &StateReport,
    ) -> Result<ReportAnswer, GatewayError> {
        if let Some(inv) = &report.inventory {
            inv.check()
                .map_err(|e| GatewayError::BadRequest(format!("inventory: {e}")))?;
        }
        if let Some(rep) = &report.reported {
            // The same checks as a write of it (object, size), without its version rule.
            Versioned::default().write(&Write::Replace(rep.doc.clone()), None)?;
        }
        let now = self.0.now_ms();
        let (rec, changed) = self
            .update(node, false, |r| Ok(reported(r, report, now)), |_| None)
            .await?;
        if let Some((reported, inventory)) = changed {
            if reported {
                self.0.publish(GatewayEvent::StateReported {
                    node_id: node.to_string(),
                    version: rec.summary.reported_version,
                    in_sync: rec.summary.in_sync,
                });
            }
            if inventory {
                self.0.publish(GatewayEvent::InventoryChanged {
                    node_id: node.to_string(),
                    agent_version: rec
                        .summary
                        .inventory
                        .as_ref()
                        .map(|i| i.agent_version.clone())
                        .unwrap_or_default(),
                });
            }
            self.0.events_committed().await;
        }
        Ok(ReportAnswer {
            desired_version: rec.summary.desired_version,
            reported_version: rec.summary.reported_version,
        })
    }

    /// The `DESIRED_STATE` envelope a pull of `node` begins with when the node holds
    /// version `held` and the gateway a newer one (PROTOCOL §16.4); `None` otherwise.
    pub async fn desired_for_pull(
        &self,
        node: &str,
        held: u64,
    ) -> Result<Option<Box<RawValue>>, GatewayError> {
        let gw = self.0;
        if gw.state.desired_version(node).await? <= held {
            return Ok(None);
        }
        let Some(to) = gw.trust().get(node).map(|p| p.doc.clone()) else {
            return Ok(None);
        };
        let rec = gw.state.fleet_record(node).await?;
        let version = rec.summary.desired_version;
        if version <= held {
            return Ok(None);
        }
        let now = gw.now_ms();
        let params = SealParams {
            message_id: desired_message_id(node, version),
            created_at_ms: now,
            expires_at_ms: now + DESIRED_TTL_MS,
            payload_type: DESIRED_STATE.to_string(),
            priority: 0,
        };
        let pt = serde_json::to_vec(&DesiredState {
            desired: rec.docs.desired,
            version,
        })
        .map_err(|e| GatewayError::Internal(format!("desired state: {e}")))?;
        let env = seal(
            &gw.keys.current(),
            &gw.cfg.node_id,
            &to,
            &params,
            &pt,
            &mut OsRng,
        )
        .map_err(|e| GatewayError::Internal(format!("sealing desired state: {e}")))?;
        RawValue::from_string(String::from_utf8_lossy(&env.to_json()).into_owned())
            .map(Some)
            .map_err(|e| GatewayError::Internal(format!("desired state envelope: {e}")))
    }
}

/// The record after a node's report, and which of (reported, inventory) changed;
/// `None` when nothing did.
fn reported(
    r: &FleetRecord,
    report: &StateReport,
    now_ms: u64,
) -> Option<(FleetRecord, DocsWrite, (bool, bool))> {
    let mut next = r.clone();
    let s = &mut next.summary;
    let mut any = s.node_desired_version != report.desired_version;
    s.node_desired_version = report.desired_version;
    let mut docs = DocsWrite::Unchanged;
    if let Some(rep) = report
        .reported
        .as_ref()
        .filter(|rep| rep.version > s.reported_version)
    {
        s.reported_version = rep.version;
        s.reported_at_ms = Some(now_ms);
        next.docs.reported = rep.doc.clone();
        s.in_sync = delta(&next.docs.desired, &next.docs.reported).is_none();
        docs = DocsWrite::Changed;
    }
    let inventory = report
        .inventory
        .as_ref()
        .filter(|inv| s.inventory.as_ref().is_none_or(|old| inv.moved_from(old)));
    if let Some(inv) = inventory {
        s.inventory = Some(inv.clone());
        s.inventory_at_ms = Some(now_ms);
    }
    let changed = (docs == DocsWrite::Changed, inventory.is_some());
    any |= changed.0 || changed.1;
    any.then_some((next, docs, changed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Inventory;
    use serde_json::json;

    fn report(reported: Option<(u64, Value)>, inv: Option<Inventory>) -> StateReport {
        StateReport {
            desired_version: 0,
            inventory: inv,
            reported: reported.map(|(version, doc)| Versioned { doc, version }),
        }
    }

    #[test]
    fn a_report_never_takes_an_older_version() {
        let mut r = FleetRecord::default();
        r.summary.reported_version = 5;
        r.docs.reported = json!({"a": 5});
        assert!(reported(&r, &report(Some((4, json!({"a": 4}))), None), 1).is_none());
        assert!(reported(&r, &report(Some((5, json!({"a": 9}))), None), 1).is_none());
        let (next, docs, changed) =
            reported(&r, &report(Some((6, json!({"a": 6}))), None), 1).unwrap();
        assert_eq!(next.summary.reported_version, 6);
        assert_eq!(next.docs.reported, json!({"a": 6}));
        assert_eq!((docs, changed), (DocsWrite::Changed, (true, false)));
    }

    #[test]
    fn in_sync_follows_reported() {
        let mut r = FleetRecord::default();
        r.summary.desired_version = 2;
        r.docs.desired = json!({"fan": {"speed": 3}});
        let (next, _, _) = reported(
            &r,
            &report(Some((1, json!({"fan": {"speed": 2}}))), None),
            1,
        )
        .unwrap();
        assert!(!next.summary.in_sync);
        let (next, _, _) = reported(
            &next,
            &report(Some((2, json!({"fan": {"speed": 3}, "extra": 1}))), None),
            2,
        )
        .unwrap();
        assert!(
            next.summary.in_sync,
            "members only in reported do not count"
        );
    }

    #[test]
    fn an_inventory_is_kept_when_it_moved() {
        let inv = Inventory {
            agent_version: "1".into(),
            arch: "aarch64".into(),
            data_free_bytes: Some(1000),
            ..Inventory::default()
        };
        let (first, _, changed) =
            reported(&FleetRecord::default(), &report(None, Some(inv.clone())), 1).unwrap();
        assert_eq!(changed, (false, true));
        let mut slightly = inv.clone();
        slightly.data_free_bytes = Some(990);
        assert!(reported(&first, &report(None, Some(slightly)), 2).is_none());
        let mut newer = inv;
        newer.agent_version = "2".into();
        assert!(reported(&first, &report(None, Some(newer)), 3).is_some());
    }

    #[test]
    fn desired_ids_are_stable_per_node_and_version() {
        assert_eq!(desired_message_id("n", 3), desired_message_id("n", 3));
        assert_ne!(desired_message_id("n", 3), desired_message_id("n", 4));
        assert_ne!(desired_message_id("n", 3), desired_message_id("m", 3));
        assert!(uuid::Uuid::parse_str(&desired_message_id("n", 3)).is_ok());
    }
}
