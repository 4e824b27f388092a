//! [`FleetState`] on PostgreSQL: one `node_fleet` row per node, replaced under its
//! revision (`UPDATE … WHERE revision = $expected`, or an insert that loses to a
//! concurrent one), so writers at two replicas never lose each other's change. A new
//! desired version is announced on `outpost_queued`, which answers the node's long-poll
//! at whichever replica holds it.

use std::collections::HashMap;

use super::{after_commit, i, listen, own_audit, u, unavailable, Postgres};
use crate::audit::AuditRecord;
use crate::gateway::storage::fleet::{DocsWrite, FleetDocs, FleetRecord, FleetState, FleetSummary};
use crate::gateway::storage::{Fut, StateError};

fn parse<T: serde::de::DeserializeOwned>(
    node: &str,
    what: &str,
    text: &str,
) -> Result<T, StateError> {
    serde_json::from_str(text)
        .map_err(|e| StateError::Corrupt(format!("node_fleet {node} {what}: {e}")))
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, StateError> {
    serde_json::to_string(v).map_err(|e| StateError::Corrupt(format!("fleet record: {e}")))
}

impl Postgres {
    async fn fleet_record_now(&self, node: &str) -> Result<FleetRecord, StateError> {
        let c = self.pool.get().await?;
        let row = c
            .query_opt(
                "SELECT summary, docs FROM node_fleet WHERE node_id = $1",
                &[&node],
            )
            .await
            .map_err(unavailable)?;
        let Some(r) = row else {
            return Ok(FleetRecord::default());
        };
        let summary: FleetSummary = parse(node, "summary", r.get(0))?;
        let docs: FleetDocs = parse(node, "docs", r.get(1))?;
        Ok(FleetRecord { summary, docs })
    }

    async fn fleet_summaries_now(&self) -> Result<HashMap<String, FleetSummary>, StateError> {
        let c = self.pool.get().await?;
        let rows = c
            .query("SELECT node_id, summary FROM node_fleet", &[])
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                let node: String = r.get(0);
                let s = parse(&node, "summary", r.get(1))?;
                Ok((node, s))
            })
            .collect()
    }

    async fn put_fleet_now(
        &self,
        node: &str,
        expected: u64,
        record: &FleetRecord,
        docs: DocsWrite,
        wake: bool,
        audit: Option<(u64, &AuditRecord)>,
    ) -> Result<bool, StateError> {
        if record.summary.revision != expected + 1 {
            return Ok(false);
        }
        let summary = json(&record.summary)?;
        let revision = i(record.summary.revision);
        let desired = i(record.summary.desired_version);
        let mut c = self.pool.get().await?;
        // One transaction: the row and the audit entry that records who changed it.
        let c = c.transaction().await.map_err(unavailable)?;
        let n =
            if expected == 0 {
                c.execute(
                    "INSERT INTO node_fleet (node_id, revision, summary, docs, desired_version)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (node_id) DO NOTHING",
                    &[&node, &revision, &summary, &json(&record.docs)?, &desired],
                )
                .await
            } else if docs == DocsWrite::Changed {
                c.execute(
                "UPDATE node_fleet SET revision = $2, summary = $3, docs = $4, desired_version = $5
                 WHERE node_id = $1 AND revision = $6",
                &[&node, &revision, &summary, &json(&record.docs)?, &desired, &i(expected)],
            )
            .await
            } else {
                c.execute(
                    "UPDATE node_fleet SET revision = $2, summary = $3, desired_version = $4
                 WHERE node_id = $1 AND revision = $5",
                    &[&node, &revision, &summary, &desired, &i(expected)],
                )
                .await
            }
            .map_err(unavailable)?;
        if n != 1 {
            return Ok(false);
        }
        if let Some((at_ms, a)) = audit {
            own_audit::pend(&c, at_ms, a).await?;
        }
        c.commit().await.map_err(after_commit)?;
        if wake {
            self.notify(listen::CH_QUEUED, node.to_string());
        }
        Ok(true)
    }

    async fn desired_version_now(&self, node: &str) -> Result<u64, StateError> {
        let c = self.pool.get().await?;
        let row = c
            .query_opt(
                "SELECT desired_version FROM node_fleet WHERE node_id = $1",
                &[&node],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.map_or(0, |r| u(r.get(0))))
    }
}

/// Stage the enrollment token's labels for a node the transaction trusts
/// ([`FleetSummary::with_token_labels`]), under the row's lock.
pub(super) async fn stage_token_labels(
    tx: &tokio_postgres::Transaction<'_>,
    node: &str,
    labels: &crate::fleet::Labels,
) -> Result<(), StateError> {
    if labels.is_empty() {
        return Ok(());
    }
    let row = tx
        .query_opt(
            "SELECT summary FROM node_fleet WHERE node_id = $1 FOR UPDATE",
            &[&node],
        )
        .await
        .map_err(unavailable)?;
    let stored: Option<FleetSummary> = row
        .as_ref()
        .map(|r| parse(node, "summary", r.get(0)))
        .transpose()?;
    let Some(s) = FleetSummary::with_token_labels(stored, labels) else {
        return Ok(());
    };
    tx.execute(
        "INSERT INTO node_fleet (node_id, revision, summary, docs, desired_version)
         VALUES ($1, $2, $3, $4, 0)
         ON CONFLICT (node_id) DO UPDATE SET revision = $2, summary = $3",
        &[
            &node,
            &i(s.revision),
            &json(&s)?,
            &json(&FleetDocs::default())?,
        ],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

impl FleetState for Postgres {
    fn fleet_record<'a>(&'a self, node: &'a str) -> Fut<'a, FleetRecord> {
        Box::pin(self.fleet_record_now(node))
    }

    fn fleet_summaries(&self) -> Fut<'_, HashMap<String, FleetSummary>> {
        Box::pin(self.fleet_summaries_now())
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
        Box::pin(self.put_fleet_now(node, expected, record, docs, wake, audit))
    }

    fn desired_version<'a>(&'a self, node: &'a str) -> Fut<'a, u64> {
        Box::pin(self.desired_version_now(node))
    }
}
