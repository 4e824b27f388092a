//! A node's key rotation at the gateway (PROTOCOL §15.7): the statement arrives on the
//! signed node API, signed by the key it retires; the gateway checks both signatures,
//! switches the node's trusted document in one transaction, keeps the retired key for
//! signatures made before the switch during [`ROTATION_GRACE_MS`], and records the
//! change in its own audit log and on the event stream.

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::Gateway;
use crate::audit::{AuditEvent, AuditOutcome, AuditRecord};
use crate::envelope::{b64_encode, KeyRotation, Rotated, RotationError, ROTATION_GRACE_MS};

/// Apply `rot` for the node that signed the request (`node_id`). `Ok(true)`: switched
/// now; `Ok(false)`: the gateway already had the new key (a retry).
pub async fn rotate_node(
    gw: &Gateway,
    node_id: &str,
    rot: &KeyRotation,
) -> Result<bool, GatewayError> {
    if rot.new_doc.node_id != node_id || rot.new_doc.role != "node" {
        return Err(RotationError::OtherPeer.into());
    }
    let outcome = gw
        .state
        .rotate_node(rot, gw.now_ms(), ROTATION_GRACE_MS)
        .await?;
    let rotated = match outcome {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(event = "rotation_refused", node = %node_id, code = e.code(), error = %e);
            return Err(e.into());
        }
    };
    if rotated == Rotated::AlreadyApplied {
        return Ok(false);
    }
    let new_pk = b64_encode(&rot.new_doc.sign_pk);
    tracing::info!(event = "node_rotated", node = %node_id, sign_pk = %new_pk, "node key rotated");
    gw.recheck_trust(node_id).await;
    gw.publish(GatewayEvent::NodeRotated {
        node_id: node_id.to_string(),
        sign_pk: new_pk.clone(),
    });
    let mut a = AuditRecord::new(AuditEvent::Rotate, AuditOutcome::Ok)
        .actor(node_id)
        .detail(format!(
            "{node_id} rotated {} -> {new_pk}",
            b64_encode(&rot.old_sign_pk)
        ));
    a.args_sha256 = Some(crate::audit::sha256_hex(new_pk.as_bytes()));
    super::own_audit::record(gw, vec![a]).await;
    gw.events_committed().await;
    Ok(true)
}
