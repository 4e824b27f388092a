//! The reads the trait asks of every engine in bulk, and trust writes through the seam
//! (with their pending audit entries), on the embedded store. (It has no [`crate::gateway::storage::SharedState`]: one
//! process writes it, so events, liveness and the replay window are the gateway's own.)

use std::collections::{HashMap, HashSet};

use super::Embedded;
use crate::audit::AuditRecord;
use crate::envelope::TrustStore;
use crate::gateway::storage::{GatewayState, StateError};

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

    pub(super) async fn save_trust_now(
        &self,
        t: &TrustStore,
        audit: &[AuditRecord],
    ) -> Result<(), StateError> {
        let mut batch = crate::store::Batch::new();
        crate::daemon::trust::put(&mut batch, t);
        let now = self.store.now_ms();
        for a in audit {
            self.pend(&mut batch, now, a);
        }
        self.store.commit(batch).await?;
        Ok(())
    }
}
