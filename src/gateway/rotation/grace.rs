//! Ending the grace of a node's retired key (PROTOCOL §15.7): after a rotation the
//! gateway accepts signatures by the retired key for [`ROTATION_GRACE_MS`]; when that
//! key was stolen, an operator (`outpost nodes end-grace`, `POST /v1/node_grace_ends`)
//! or the node's own `identity rotate --compromised` ends it at once, so the thief can
//! no longer pull, ack or upload as the node.
//!
//! [`ROTATION_GRACE_MS`]: crate::envelope::ROTATION_GRACE_MS

use super::Rotations;
use crate::audit::{AuditEvent, AuditOutcome, AuditRecord};
use crate::gateway::error::GatewayError;

impl Rotations<'_> {
    /// End the grace of `node_id`'s retired key now: `Ok(true)` when one was running,
    /// `Ok(false)` when none was (never rotated, or already over).
    pub async fn end_grace(&self, actor: &str, node_id: &str) -> Result<bool, GatewayError> {
        let gw = self.0;
        // Committed with the grace's end, only when one was running.
        let entry = AuditRecord::new(AuditEvent::Rotate, AuditOutcome::Ok)
            .actor(actor)
            .detail(format!("{node_id} retired key grace ended"));
        let ended = gw
            .state
            .end_node_grace(node_id, gw.now_ms(), &entry)
            .await?
            .ok_or_else(|| GatewayError::UnknownNode(node_id.to_string()))?;
        gw.recheck_trust(node_id).await;
        if ended {
            tracing::warn!(
                event = "node_grace_ended",
                node = %node_id,
                actor = %actor,
                "the retired key of this node is refused from now on"
            );
            crate::gateway::own_audit::append_pending(gw).await;
        }
        Ok(ended)
    }
}
