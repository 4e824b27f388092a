//! The token revocation list on the embedded store: ids under KV [`KV_GW_REVOCATIONS`],
//! keyed by their version (zero-padded), assigned one at a time; each committed with
//! its gateway audit entry, pending.

use super::{index_key, Embedded};
use crate::audit::AuditRecord;
use crate::gateway::storage::{RevocationList, Revoked, StateError};
use crate::store::names::KV_GW_REVOCATIONS;
use crate::store::Batch;

impl Embedded {
    pub(super) fn revocation_rows(&self) -> Result<Vec<(u64, String)>, StateError> {
        Ok(self
            .store
            .kv_list(KV_GW_REVOCATIONS)?
            .into_iter()
            .map(|(k, v)| {
                (
                    k.parse().unwrap_or(0),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect())
    }

    pub(super) async fn revoke_now(
        &self,
        jti: &str,
        audit: &AuditRecord,
    ) -> Result<Revoked, StateError> {
        let _one_at_a_time = self.revoking.lock().await;
        let rows = self.revocation_rows()?;
        if rows.iter().any(|(_, j)| j == jti) {
            return Ok(Revoked::Duplicate);
        }
        let version = rows.iter().map(|(v, _)| *v).max().unwrap_or(0) + 1;
        let mut batch = Batch::new();
        batch.kv_put(
            KV_GW_REVOCATIONS,
            &index_key(version),
            jti.as_bytes().to_vec(),
        );
        self.pend(&mut batch, self.store.now_ms(), audit);
        self.store.commit(batch).await?;
        Ok(Revoked::Added { version })
    }

    pub(super) fn revocations_now(&self, since: u64) -> Result<RevocationList, StateError> {
        let mut list = RevocationList::default();
        for (v, jti) in self.revocation_rows()? {
            list.version = list.version.max(v);
            if v > since {
                list.revoked.push(jti);
            }
        }
        Ok(list)
    }
}
