//! Retiring a node (`outpost nodes revoke`, PROTOCOL §15.5): its key leaves the trust
//! store and every key it had is remembered as retired, what was queued for it is
//! refused with reason `node_revoked`, and the gateway's own audit log records it (the
//! entry committed with the retirement).

use super::Enrollment;
use crate::audit::{AuditEvent, AuditOutcome, AuditRecord};
use crate::enroll::codes;
use crate::envelope::{b64_encode, IdentityDocument};
use crate::gateway::error::GatewayError;
use crate::gateway::events::GatewayEvent;
use crate::gateway::storage::QUEUE_TO_NODE;
use crate::telemetry::MessageEvent;

impl Enrollment<'_> {
    /// Retire `node_id`: its key is refused from now on (401 `node_revoked`), what was
    /// queued for it is refused with reason `node_revoked`, an event says so.
    pub async fn revoke_node(
        &self,
        operator: &str,
        node_id: &str,
    ) -> Result<Vec<String>, GatewayError> {
        let gw = self.gw;
        let entry = |retired: &IdentityDocument, refused: usize| {
            let mut a = AuditRecord::new(AuditEvent::Revoke, AuditOutcome::Ok)
                .actor(operator)
                .detail(format!("{node_id} revoked {refused} queued refused"));
            a.args_sha256 = Some(crate::audit::sha256_hex(
                b64_encode(&retired.sign_pk).as_bytes(),
            ));
            a
        };
        let ids = gw
            .state
            .revoke_node(node_id, gw.now_ms(), operator, &entry)
            .await?
            .ok_or_else(|| GatewayError::UnknownNode(node_id.to_string()))?;
        tracing::warn!(event = "node_revoked", node = %node_id, messages = ids.len());
        for id in &ids {
            MessageEvent {
                queue: QUEUE_TO_NODE,
                event: "rejected",
                peer: node_id,
                message_id: id,
                reason: Some(codes::NODE_REVOKED),
            }
            .emit(&gw.metrics);
            gw.publish(GatewayEvent::Rejected {
                message_id: id.clone(),
                node_id: node_id.to_string(),
                code: codes::NODE_REVOKED.into(),
            });
        }
        gw.publish(GatewayEvent::NodeRevoked {
            node_id: node_id.to_string(),
            messages: ids.len() as u64,
        });
        gw.recheck_trust(node_id).await;
        crate::gateway::own_audit::append_pending(gw).await;
        gw.events_committed().await;
        Ok(ids)
    }
}
