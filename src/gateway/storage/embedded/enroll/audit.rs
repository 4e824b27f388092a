//! The gateway's pending audit entries on the embedded store (`storage::enrollments`
//! says why they exist): KV `gw_audit_pending`, key = zero-padded sequence number,
//! written in the batch of the decision they record and removed in the batch that
//! appends them to the gateway's log. The number is picked inside the commit
//! ([`Batch::kv_put_next`]), so a decision of the running gateway and one of an
//! `outpost` command on its host (`trust add`) never take the same; only the gateway
//! appends (under `enrolling`), so a number is reused only once its entry is in the log.

use super::super::{index_key, ns_audit_checkpoints, ns_audit_entries, Embedded};
use crate::audit::{AuditEntry, AuditRecord};
use crate::gateway::storage::{pending_json, AuditExtension, PendingAudit, StateError};
use crate::store::names::KV_GW_AUDIT_PENDING;
use crate::store::Batch;

fn seq_of(key: &str) -> Result<u64, StateError> {
    key.parse()
        .map_err(|_| StateError::Corrupt(format!("{KV_GW_AUDIT_PENDING} key {key}")))
}

impl Embedded {
    /// Put `record`, decided at `ts_ms`, in `batch` as a pending audit entry.
    pub(in crate::gateway::storage) fn pend(
        &self,
        batch: &mut Batch,
        ts_ms: u64,
        record: &AuditRecord,
    ) {
        batch.kv_put_next(
            KV_GW_AUDIT_PENDING,
            pending_json(ts_ms, record).into_bytes(),
        );
    }

    pub(in crate::gateway::storage) fn pending_now(
        &self,
        max: usize,
    ) -> Result<Vec<PendingAudit>, StateError> {
        let mut out = Vec::new();
        for (k, v) in self
            .store
            .kv_list(KV_GW_AUDIT_PENDING)?
            .into_iter()
            .take(max)
        {
            let entry: AuditEntry = serde_json::from_slice(&v)
                .map_err(|e| StateError::Corrupt(format!("{KV_GW_AUDIT_PENDING}/{k}: {e}")))?;
            out.push(PendingAudit {
                seq: seq_of(&k)?,
                entry,
            });
        }
        Ok(out)
    }

    pub(in crate::gateway::storage) async fn append_pending_now(
        &self,
        node: &str,
        ext: AuditExtension,
        seqs: &[u64],
    ) -> Result<bool, StateError> {
        let _one = self.enrolling.lock().await;
        let ns = ns_audit_entries(node);
        let ends_at_start = self.store.kv_get(&ns, &index_key(ext.start))?.is_none()
            && (ext.start == 0 || self.store.kv_get(&ns, &index_key(ext.start - 1))?.is_some());
        if !ends_at_start {
            return Ok(false);
        }
        let mut batch = Batch::new();
        for seq in seqs {
            if self
                .store
                .kv_get(KV_GW_AUDIT_PENDING, &index_key(*seq))?
                .is_none()
            {
                return Ok(false);
            }
            batch.kv_delete(KV_GW_AUDIT_PENDING, &index_key(*seq));
        }
        for (i, e) in ext.entries.into_iter().enumerate() {
            batch.kv_put(&ns, &index_key(ext.start + i as u64), e);
        }
        batch.kv_put(
            &ns_audit_checkpoints(node),
            &index_key(ext.checkpoint_size),
            ext.checkpoint.into_bytes(),
        );
        self.store.commit(batch).await?;
        Ok(true)
    }
}
