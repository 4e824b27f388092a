//! The reads the trait asks of every engine in bulk, and trust writes through the seam
//! (with their pending audit entries), on the embedded store. (It has no
//! [`crate::gateway::storage::SharedState`]: one process writes it, so liveness and the
//! replay window are the gateway's own.)

use std::collections::{HashMap, HashSet};

use super::Embedded;
use crate::audit::AuditRecord;
use crate::gateway::storage::{GatewayState, StateError, TrustEdit};

impl Embedded {
    pub(super) async fn uploads_seen_now(
        &self,
        message_ids: &[String],
    ) -> Result<HashSet<String>, StateError> {
        let mut seen = HashSet::new();
        for id in message_ids {
            if self.upload_seen(id).await? {
                seen.insert(id.clone());
            }
        }
        Ok(seen)
    }

    pub(super) async fn audit_sizes_now(
        &self,
        nodes: &[String],
    ) -> Result<HashMap<String, u64>, StateError> {
        let mut out = HashMap::new();
        for n in nodes {
            out.insert(n.clone(), self.audit_entries(n).await?.len() as u64);
        }
        Ok(out)
    }

    /// The edit applied to the peers as they are now, under `enrolling` (this process's
    /// enrollment decisions write the same rows): a row per peer the edit changes, no
    /// other. Another process's write of the same peer between this read and the commit
    /// is the one window left (PROTOCOL §15.6's note).
    pub(super) async fn save_trust_now(
        &self,
        edit: &TrustEdit,
        audit: &[AuditRecord],
    ) -> Result<(), StateError> {
        use crate::daemon::trust::{self, Change};
        let _one = self.enrolling.lock().await;
        let corrupt = super::trust_corrupt;
        let mut changes = Vec::new();
        for p in &edit.put {
            if trust::peer(&self.store, &p.address())
                .map_err(corrupt)?
                .as_ref()
                != Some(p)
            {
                changes.push(Change::put(p.clone()));
            }
        }
        for id in &edit.remove {
            if trust::peer(&self.store, id).map_err(corrupt)?.is_some() {
                changes.push(Change::remove(id));
            }
        }
        let mut batch = crate::store::Batch::new();
        trust::stage(&self.store, &mut batch, &changes).map_err(corrupt)?;
        let now = self.store.now_ms();
        for a in audit {
            self.pend(&mut batch, now, a);
        }
        self.store.commit(batch).await?;
        Ok(())
    }
}
