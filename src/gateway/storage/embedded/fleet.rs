//! [`FleetState`] on the embedded store: a node's summary under KV
//! [`KV_GW_FLEET`]`/<node>`, its documents under [`KV_GW_FLEET_DOCS`]`/<node>`, both
//! written in one commit. This process is the store's only writer, so the revision
//! check runs under one lock and the desired versions the pull path asks for are kept
//! in memory once read.

use std::collections::HashMap;

use super::Embedded;
use crate::audit::AuditRecord;
use crate::gateway::storage::fleet::{DocsWrite, FleetDocs, FleetRecord, FleetState, FleetSummary};
use crate::gateway::storage::{Fut, StateError};
use crate::store::names::{KV_GW_FLEET, KV_GW_FLEET_DOCS};
use crate::store::Batch;

/// The fleet records' lock and the desired versions read so far.
#[derive(Default)]
pub(super) struct FleetCache {
    writing: tokio::sync::Mutex<()>,
    desired: std::sync::Mutex<HashMap<String, u64>>,
}

impl FleetCache {
    fn desired(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.desired.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, StateError> {
    serde_json::to_vec(v).map_err(|e| StateError::Corrupt(format!("fleet record: {e}")))
}

impl Embedded {
    fn summary_now(&self, node: &str) -> Result<Option<FleetSummary>, StateError> {
        self.kv_json(KV_GW_FLEET, node)
    }

    async fn put_fleet_now(
        &self,
        node: &str,
        expected: u64,
        record: &FleetRecord,
        docs: DocsWrite,
        audit: Option<(u64, &AuditRecord)>,
    ) -> Result<bool, StateError> {
        let _one = self.fleet.writing.lock().await;
        let current = self.summary_now(node)?.map_or(0, |s| s.revision);
        if current != expected || record.summary.revision != expected + 1 {
            return Ok(false);
        }
        let mut batch = Batch::new();
        batch.kv_put(KV_GW_FLEET, node, json(&record.summary)?);
        if docs == DocsWrite::Changed {
            batch.kv_put(KV_GW_FLEET_DOCS, node, json(&record.docs)?);
        }
        if let Some((at_ms, a)) = audit {
            self.pend(&mut batch, at_ms, a);
        }
        self.store.commit(batch).await?;
        self.fleet
            .desired()
            .insert(node.to_string(), record.summary.desired_version);
        Ok(true)
    }
}

impl Embedded {
    /// Stage the enrollment token's labels for a node the batch trusts
    /// ([`FleetSummary::with_token_labels`]); the lock returned is held until the batch
    /// commits.
    pub(super) async fn stage_token_labels(
        &self,
        batch: &mut Batch,
        node: &str,
        labels: &crate::fleet::Labels,
    ) -> Result<Option<tokio::sync::MutexGuard<'_, ()>>, StateError> {
        if labels.is_empty() {
            return Ok(None);
        }
        let held = self.fleet.writing.lock().await;
        if let Some(s) = FleetSummary::with_token_labels(self.summary_now(node)?, labels) {
            batch.kv_put(KV_GW_FLEET, node, json(&s)?);
        }
        Ok(Some(held))
    }
}

impl FleetState for Embedded {
    fn fleet_record<'a>(&'a self, node: &'a str) -> Fut<'a, FleetRecord> {
        Box::pin(async move {
            let Some(summary) = self.summary_now(node)? else {
                return Ok(FleetRecord::default());
            };
            let docs: FleetDocs = self.kv_json(KV_GW_FLEET_DOCS, node)?.unwrap_or_default();
            Ok(FleetRecord { summary, docs })
        })
    }

    fn fleet_summaries(&self) -> Fut<'_, HashMap<String, FleetSummary>> {
        Box::pin(async move {
            self.store
                .kv_list(KV_GW_FLEET)?
                .into_iter()
                .map(|(node, v)| {
                    serde_json::from_slice(&v)
                        .map(|s| (node.clone(), s))
                        .map_err(|e| StateError::Corrupt(format!("{KV_GW_FLEET}/{node}: {e}")))
                })
                .collect()
        })
    }

    fn put_fleet<'a>(
        &'a self,
        node: &'a str,
        expected: u64,
        record: &'a FleetRecord,
        docs: DocsWrite,
        wake: bool,
        audit: Option<(u64, &'a AuditRecord)>,
    ) -> Fut<'a, bool> {
        // One process: the flow wakes its own long-polls; `wake` is for other replicas.
        let _ = wake;
        Box::pin(self.put_fleet_now(node, expected, record, docs, audit))
    }

    fn desired_version<'a>(&'a self, node: &'a str) -> Fut<'a, u64> {
        Box::pin(async move {
            if let Some(v) = self.fleet.desired().get(node) {
                return Ok(*v);
            }
            // Under the writers' lock: a write between this read and the insert would
            // otherwise leave its version behind the stale one read here.
            let _one = self.fleet.writing.lock().await;
            if let Some(v) = self.fleet.desired().get(node) {
                return Ok(*v);
            }
            let v = self.summary_now(node)?.map_or(0, |s| s.desired_version);
            self.fleet.desired().insert(node.to_string(), v);
            Ok(v)
        })
    }
}
