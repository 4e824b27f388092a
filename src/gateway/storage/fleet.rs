//! The part of the gateway's state fleet state uses (PROTOCOL §16): per node one record
//! of labels, inventory and the desired and reported documents with their versions.
//!
//! A record is read and replaced whole, under a revision that grows by one with each
//! write ([`FleetState::put_fleet`] writes only over the revision it was read at): the
//! flow computes the new record from the one it read (pure, `gateway::node_state`) and
//! retries on a conflict, so two writers — two replicas, an operator and a node's
//! report — never lose each other's change, and a version never goes back.
//!
//! The small part ([`FleetSummary`]: labels, inventory, versions, whether in sync) is
//! what the fleet listing and selectors read for every node; the documents (up to
//! 64 KiB each) are read only for one node.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Fut;
use crate::audit::AuditRecord;
use crate::fleet::{Inventory, Labels};

/// What the fleet listing reads of every node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetSummary {
    /// Grows by one with every write of the record (0: never written).
    pub revision: u64,
    /// `None` while no label was ever set at the gateway: the node has the labels of
    /// the enrollment token it enrolled with.
    #[serde(default)]
    pub labels: Option<Labels>,
    #[serde(default)]
    pub inventory: Option<Inventory>,
    #[serde(default)]
    pub inventory_at_ms: Option<u64>,
    pub desired_version: u64,
    pub reported_version: u64,
    /// When the reported version last changed.
    #[serde(default)]
    pub reported_at_ms: Option<u64>,
    /// The desired version the node last said it holds.
    pub node_desired_version: u64,
    /// The desired document's members all have their values in reported.
    pub in_sync: bool,
}

/// The documents (each a JSON object; `{}` while never written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetDocs {
    pub desired: Value,
    pub reported: Value,
}

impl Default for FleetDocs {
    fn default() -> Self {
        Self {
            desired: Value::Object(Default::default()),
            reported: Value::Object(Default::default()),
        }
    }
}

/// One node's whole record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetRecord {
    pub summary: FleetSummary,
    pub docs: FleetDocs,
}

/// How a write changes a record, besides its summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocsWrite {
    /// The documents are as they were: only the summary is written.
    Unchanged,
    /// The documents changed (they are written too).
    Changed,
}

impl FleetSummary {
    /// The summary once a node enrolled with a token carrying `labels` is trusted:
    /// the token's labels unless the node has labels set already (a node re-enrolled
    /// keeps what an operator gave it). `None`: nothing to write.
    pub fn with_token_labels(stored: Option<FleetSummary>, labels: &Labels) -> Option<Self> {
        let mut s = stored.unwrap_or_default();
        if labels.is_empty() || s.labels.is_some() {
            return None;
        }
        s.labels = Some(labels.clone());
        s.revision += 1;
        Some(s)
    }
}

pub trait FleetState {
    /// One node's record; the default (revision 0) when nothing was ever stored.
    fn fleet_record<'a>(&'a self, node: &'a str) -> Fut<'a, FleetRecord>;
    /// The summary of every node that has a record.
    fn fleet_summaries(&self) -> Fut<'_, HashMap<String, FleetSummary>>;
    /// Replace the record of `node` if it is still at revision `expected` (0: none
    /// stored), in one transaction; `record.summary.revision` must be `expected + 1`.
    /// False (nothing written) when another write came first: read again and retry.
    /// With `wake`, a long-poll of the node held at any replica is answered (a new
    /// desired version goes out at once). `audit` (its time, the entry) is a pending
    /// gateway audit entry written in the same transaction (PROTOCOL §15.6).
    fn put_fleet<'a>(
        &'a self,
        node: &'a str,
        expected: u64,
        record: &'a FleetRecord,
        docs: DocsWrite,
        wake: bool,
        audit: Option<(u64, &'a AuditRecord)>,
    ) -> Fut<'a, bool>;
    /// The desired version held for `node` (0: none). Asked on every pull: answer from
    /// memory or one cheap read.
    fn desired_version<'a>(&'a self, node: &'a str) -> Fut<'a, u64>;
}
