//! [`RolloutState`] on PostgreSQL: `rollouts` (the record, its revision, the caller's
//! key, the lease) and `rollout_targets` (one row per node). The lease is a row update
//! on the database's own clock, so replicas whose clocks differ agree on who holds it;
//! a replica that dies holding it loses it when it runs out.

use super::{after_commit, i, own_audit, unavailable, Postgres};
use crate::audit::AuditRecord;
use crate::gateway::storage::rollouts::{RolloutRecord, RolloutState, TargetRecord};
use crate::gateway::storage::{Fut, GatewayState, StateError};

fn json<T: serde::Serialize>(v: &T) -> Result<String, StateError> {
    serde_json::to_string(v).map_err(|e| StateError::Corrupt(format!("rollout record: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, StateError> {
    serde_json::from_str(text).map_err(|e| StateError::Corrupt(format!("{what}: {e}")))
}

/// The database's time in ms.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

impl Postgres {
    async fn create_now(
        &self,
        r: &RolloutRecord,
        targets: &[TargetRecord],
        key: Option<&str>,
        audit: &AuditRecord,
    ) -> Result<Option<String>, StateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let n = tx
            .execute(
                "INSERT INTO rollouts (id, revision, created_ms, idem_key, record)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (idem_key) DO NOTHING",
                &[&r.id, &i(r.revision), &i(r.created_at_ms), &key, &json(r)?],
            )
            .await
            .map_err(unavailable)?;
        if n == 0 {
            let row = tx
                .query_one("SELECT id FROM rollouts WHERE idem_key = $1", &[&key])
                .await
                .map_err(unavailable)?;
            return Ok(Some(row.get(0)));
        }
        let nodes: Vec<&str> = targets.iter().map(|t| t.node_id.as_str()).collect();
        let records: Vec<String> = targets.iter().map(json).collect::<Result<_, _>>()?;
        tx.execute(
            "INSERT INTO rollout_targets (rollout_id, node_id, record)
             SELECT $1, n, r FROM unnest($2::text[], $3::text[]) AS x(n, r)",
            &[&r.id, &nodes, &records],
        )
        .await
        .map_err(unavailable)?;
        own_audit::pend(&tx, r.created_at_ms, audit).await?;
        tx.commit().await.map_err(after_commit)?;
        Ok(None)
    }

    async fn put_rollout_now(
        &self,
        r: &RolloutRecord,
        expected: u64,
        audit: Option<&AuditRecord>,
    ) -> Result<bool, StateError> {
        if r.revision != expected + 1 {
            return Ok(false);
        }
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await.map_err(unavailable)?;
        let n = tx
            .execute(
                "UPDATE rollouts SET revision = $2, record = $3 WHERE id = $1 AND revision = $4",
                &[&r.id, &i(r.revision), &json(r)?, &i(expected)],
            )
            .await
            .map_err(unavailable)?;
        if n == 0 {
            return Ok(false);
        }
        if let Some(a) = audit {
            own_audit::pend(&tx, self.now_ms(), a).await?;
        }
        tx.commit().await.map_err(after_commit)?;
        Ok(true)
    }

    async fn rows(&self, sql: &str, id: Option<&str>) -> Result<Vec<String>, StateError> {
        let c = self.pool.get().await?;
        let rows = match id {
            Some(id) => c.query(sql, &[&id]).await,
            None => c.query(sql, &[]).await,
        }
        .map_err(unavailable)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn upsert_targets(
        &self,
        id: &str,
        targets: &[TargetRecord],
        replace: bool,
    ) -> Result<usize, StateError> {
        if targets.is_empty() {
            return Ok(0);
        }
        let nodes: Vec<&str> = targets.iter().map(|t| t.node_id.as_str()).collect();
        let records: Vec<String> = targets.iter().map(json).collect::<Result<_, _>>()?;
        let sql = if replace {
            "INSERT INTO rollout_targets (rollout_id, node_id, record)
             SELECT $1, n, r FROM unnest($2::text[], $3::text[]) AS x(n, r)
             ON CONFLICT (rollout_id, node_id) DO UPDATE SET record = excluded.record"
        } else {
            "INSERT INTO rollout_targets (rollout_id, node_id, record)
             SELECT $1, n, r FROM unnest($2::text[], $3::text[]) AS x(n, r)
             ON CONFLICT (rollout_id, node_id) DO NOTHING"
        };
        let c = self.pool.get().await?;
        let n = c
            .execute(sql, &[&id, &nodes, &records])
            .await
            .map_err(after_commit)?;
        Ok(n as usize)
    }

    async fn lease_now(&self, id: &str, holder: &str, ttl_ms: u64) -> Result<bool, StateError> {
        let c = self.pool.get().await?;
        let sql = format!(
            "UPDATE rollouts SET lease_owner = $2, lease_until = {NOW_MS} + $3
             WHERE id = $1 AND (lease_owner IS NULL OR lease_owner = $2 OR lease_until < {NOW_MS})"
        );
        let n = c
            .execute(sql.as_str(), &[&id, &holder, &i(ttl_ms)])
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }
}

impl RolloutState for Postgres {
    fn rollout_create<'a>(
        &'a self,
        rollout: &'a RolloutRecord,
        targets: &'a [TargetRecord],
        key: Option<&'a str>,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Option<String>> {
        Box::pin(self.create_now(rollout, targets, key, audit))
    }

    fn rollouts(&self) -> Fut<'_, Vec<RolloutRecord>> {
        Box::pin(async move {
            self.rows(
                "SELECT record FROM rollouts ORDER BY created_ms DESC, id DESC",
                None,
            )
            .await?
            .iter()
            .map(|t| parse("rollouts", t))
            .collect()
        })
    }

    fn rollout<'a>(&'a self, id: &'a str) -> Fut<'a, Option<RolloutRecord>> {
        Box::pin(async move {
            self.rows("SELECT record FROM rollouts WHERE id = $1", Some(id))
                .await?
                .first()
                .map(|t| parse("rollouts", t))
                .transpose()
        })
    }

    fn rollout_targets<'a>(&'a self, id: &'a str) -> Fut<'a, Vec<TargetRecord>> {
        Box::pin(async move {
            self.rows(
                "SELECT record FROM rollout_targets WHERE rollout_id = $1 ORDER BY node_id",
                Some(id),
            )
            .await?
            .iter()
            .map(|t| parse("rollout_targets", t))
            .collect()
        })
    }

    fn put_rollout<'a>(
        &'a self,
        rollout: &'a RolloutRecord,
        expected: u64,
        audit: Option<&'a AuditRecord>,
    ) -> Fut<'a, bool> {
        Box::pin(self.put_rollout_now(rollout, expected, audit))
    }

    fn put_targets<'a>(&'a self, id: &'a str, targets: &'a [TargetRecord]) -> Fut<'a, ()> {
        Box::pin(async move {
            self.upsert_targets(id, targets, true).await?;
            Ok(())
        })
    }

    fn add_targets<'a>(&'a self, id: &'a str, targets: &'a [TargetRecord]) -> Fut<'a, usize> {
        Box::pin(self.upsert_targets(id, targets, false))
    }

    fn rollout_lease<'a>(&'a self, id: &'a str, holder: &'a str, ttl_ms: u64) -> Fut<'a, bool> {
        Box::pin(self.lease_now(id, holder, ttl_ms))
    }

    fn rollout_release<'a>(&'a self, id: &'a str, holder: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let c = self.pool.get().await?;
            c.execute(
                "UPDATE rollouts SET lease_owner = NULL, lease_until = 0
                 WHERE id = $1 AND lease_owner = $2",
                &[&id, &holder],
            )
            .await
            .map_err(unavailable)?;
            Ok(())
        })
    }
}
