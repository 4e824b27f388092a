//! [`RolloutState`] on the embedded store: a rollout under KV [`KV_GW_ROLLOUTS`]`/<id>`,
//! its targets under [`KV_GW_ROLLOUT_TARGETS_PREFIX`]`<id>/<node>`, a caller's key
//! under [`KV_GW_ROLLOUT_KEYS`]. One process writes the store, so the revision check
//! runs under one lock (the enrollment lock, which also orders the gateway's pending
//! audit entries) and leases are kept in memory.

use std::collections::HashMap;

use super::Embedded;
use crate::audit::AuditRecord;
use crate::gateway::storage::rollouts::{RolloutRecord, RolloutState, TargetRecord};
use crate::gateway::storage::{Fut, StateError};
use crate::store::names::{KV_GW_ROLLOUTS, KV_GW_ROLLOUT_KEYS, KV_GW_ROLLOUT_TARGETS_PREFIX};
use crate::store::Batch;

/// Who holds each rollout's lease, until when.
#[derive(Default)]
pub(super) struct Leases(std::sync::Mutex<HashMap<String, (String, u64)>>);

fn json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, StateError> {
    serde_json::to_vec(v).map_err(|e| StateError::Corrupt(format!("rollout record: {e}")))
}

fn ns(id: &str) -> String {
    format!("{KV_GW_ROLLOUT_TARGETS_PREFIX}{id}")
}

impl Embedded {
    async fn create_now(
        &self,
        r: &RolloutRecord,
        targets: &[TargetRecord],
        key: Option<&str>,
        audit: &AuditRecord,
    ) -> Result<Option<String>, StateError> {
        let _one = self.enrolling.lock().await;
        if let Some(k) = key {
            if let Some(id) = self.store.kv_get(KV_GW_ROLLOUT_KEYS, k)? {
                return Ok(Some(String::from_utf8_lossy(&id).into_owned()));
            }
        }
        let mut batch = Batch::new();
        batch.kv_put(KV_GW_ROLLOUTS, &r.id, json(r)?);
        if let Some(k) = key {
            batch.kv_put(KV_GW_ROLLOUT_KEYS, k, r.id.clone().into_bytes());
        }
        let space = ns(&r.id);
        for t in targets {
            batch.kv_put(&space, &t.node_id, json(t)?);
        }
        self.pend(&mut batch, self.store.now_ms(), audit);
        self.store.commit(batch).await?;
        Ok(None)
    }

    async fn put_rollout_now(
        &self,
        r: &RolloutRecord,
        expected: u64,
        audit: Option<&AuditRecord>,
    ) -> Result<bool, StateError> {
        let _one = self.enrolling.lock().await;
        let stored: Option<RolloutRecord> = self.kv_json(KV_GW_ROLLOUTS, &r.id)?;
        if stored.map(|s| s.revision) != Some(expected) || r.revision != expected + 1 {
            return Ok(false);
        }
        let mut batch = Batch::new();
        batch.kv_put(KV_GW_ROLLOUTS, &r.id, json(r)?);
        if let Some(a) = audit {
            self.pend(&mut batch, self.store.now_ms(), a);
        }
        self.store.commit(batch).await?;
        Ok(true)
    }

    fn targets_now(&self, id: &str) -> Result<Vec<TargetRecord>, StateError> {
        self.store
            .kv_list(&ns(id))?
            .into_iter()
            .map(|(node, v)| {
                serde_json::from_slice(&v)
                    .map_err(|e| StateError::Corrupt(format!("rollout {id} target {node}: {e}")))
            })
            .collect()
    }

    async fn add_targets_now(
        &self,
        id: &str,
        targets: &[TargetRecord],
    ) -> Result<usize, StateError> {
        let _one = self.enrolling.lock().await;
        let space = ns(id);
        let mut batch = Batch::new();
        let mut added = 0;
        for t in targets {
            if self.store.kv_get(&space, &t.node_id)?.is_none() {
                batch.kv_put(&space, &t.node_id, json(t)?);
                added += 1;
            }
        }
        if added > 0 {
            self.store.commit(batch).await?;
        }
        Ok(added)
    }
}

impl RolloutState for Embedded {
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
            let mut all: Vec<RolloutRecord> = self
                .store
                .kv_list(KV_GW_ROLLOUTS)?
                .into_iter()
                .map(|(id, v)| {
                    serde_json::from_slice(&v)
                        .map_err(|e| StateError::Corrupt(format!("rollout {id}: {e}")))
                })
                .collect::<Result<_, _>>()?;
            all.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then(b.id.cmp(&a.id)));
            Ok(all)
        })
    }

    fn rollout<'a>(&'a self, id: &'a str) -> Fut<'a, Option<RolloutRecord>> {
        Box::pin(async move { self.kv_json(KV_GW_ROLLOUTS, id) })
    }

    fn rollout_targets<'a>(&'a self, id: &'a str) -> Fut<'a, Vec<TargetRecord>> {
        Box::pin(async move { self.targets_now(id) })
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
            if targets.is_empty() {
                return Ok(());
            }
            let space = ns(id);
            let mut batch = Batch::new();
            for t in targets {
                batch.kv_put(&space, &t.node_id, json(t)?);
            }
            self.store.commit(batch).await?;
            Ok(())
        })
    }

    fn add_targets<'a>(&'a self, id: &'a str, targets: &'a [TargetRecord]) -> Fut<'a, usize> {
        Box::pin(self.add_targets_now(id, targets))
    }

    fn rollout_lease<'a>(&'a self, id: &'a str, holder: &'a str, ttl_ms: u64) -> Fut<'a, bool> {
        Box::pin(async move {
            let now = self.store.now_ms();
            let mut leases = self
                .rollout_leases
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match leases.get(id) {
                Some((h, until)) if h != holder && *until > now => Ok(false),
                _ => {
                    leases.insert(id.to_string(), (holder.to_string(), now + ttl_ms));
                    Ok(true)
                }
            }
        })
    }

    fn rollout_release<'a>(&'a self, id: &'a str, holder: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let mut leases = self
                .rollout_leases
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if leases.get(id).is_some_and(|(h, _)| h == holder) {
                leases.remove(id);
            }
            Ok(())
        })
    }
}
