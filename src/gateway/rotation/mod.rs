//! A node's key rotation at the gateway (PROTOCOL §15.7): the statement arrives on the
//! signed node API, signed by the key it retires; the gateway checks both signatures,
//! switches the node's trusted document in one transaction, keeps the retired key for
//! signatures made before the switch during [`ROTATION_GRACE_MS`], and records the
//! change in its own audit log (the entry committed with the switch) and on the event
//! stream.

mod grace;

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::Gateway;
use crate::audit::{AuditEvent, AuditOutcome, AuditRecord};
use crate::envelope::{b64_encode, KeyRotation, Rotated, RotationError, ROTATION_GRACE_MS};

impl Rotations<'_> {
    /// Apply `rot` for the node that signed the request (`node_id`). `Ok(true)`: switched
    /// now; `Ok(false)`: the gateway already had the new key (a retry). With `no_grace`
    /// (the retired key is compromised) the retired key is refused at once, a retry
    /// included.
    pub async fn rotate_node(
        &self,
        node_id: &str,
        rot: &KeyRotation,
        no_grace: bool,
    ) -> Result<bool, GatewayError> {
        let gw = self.0;
        // `node_id` is the node's address (PROTOCOL §18.1); the statement names its id.
        if rot.new_doc.node_id != crate::fleet::tenant::node_of(node_id)
            || rot.new_doc.role != "node"
        {
            return Err(RotationError::OtherPeer.into());
        }
        let new_pk = b64_encode(&rot.new_doc.sign_pk);
        let mut entry = AuditRecord::new(AuditEvent::Rotate, AuditOutcome::Ok)
            .actor(node_id)
            .detail(format!(
                "{node_id} rotated {} -> {new_pk}",
                b64_encode(&rot.old_sign_pk)
            ));
        entry.args_sha256 = Some(crate::audit::sha256_hex(new_pk.as_bytes()));
        let outcome = gw
            .state
            .rotate_node(
                node_id,
                rot,
                gw.now_ms(),
                if no_grace { 0 } else { ROTATION_GRACE_MS },
                &entry,
            )
            .await?;
        let rotated = match outcome {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(event = "rotation_refused", node = %node_id, code = e.code(), error = %e);
                return Err(e.into());
            }
        };
        if rotated == Rotated::AlreadyApplied {
            if no_grace {
                self.end_grace(node_id, node_id).await?;
            }
            return Ok(false);
        }
        tracing::info!(event = "node_rotated", node = %node_id, sign_pk = %new_pk, "node key rotated");
        gw.recheck_trust(node_id).await;
        gw.publish(GatewayEvent::NodeRotated {
            node_id: node_id.to_string(),
            sign_pk: new_pk.clone(),
        });
        super::own_audit::append_pending(gw).await;
        gw.events_committed().await;
        Ok(true)
    }
}

/// How often the gateway looks for its own pending rotation (a file read) and, on a
/// database-backed gateway, asks the database for one another replica published.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
const SHARED_EVERY_TICKS: u32 = 5;
/// A replica that cannot follow a published rotation says so at most this often.
const WARN_EVERY_MS: u64 = 60_000;

/// This gateway's own key rotation (`outpost identity rotate` on its host): apply it
/// when it appears, and on a database-backed gateway follow one another replica
/// published. Runs until shutdown.
pub async fn watch(gw: std::sync::Arc<Gateway>) {
    let mut tick: u32 = 0;
    let mut warned_at: Option<u64> = None;
    loop {
        if let Err(e) = own_tick(&gw, tick, &mut warned_at).await {
            tracing::warn!(event = "gateway_rotation_failed", error = %format!("{e:#}"));
        }
        tick = tick.wrapping_add(1);
        tokio::select! {
            _ = gw.shutdown.cancelled() => return,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}

async fn own_tick(gw: &Gateway, tick: u32, warned_at: &mut Option<u64>) -> anyhow::Result<()> {
    let dir = gw.cfg.data_dir.clone();
    let mine = gw.keys.current().sign_pk().to_bytes();
    if let Some(req) = crate::daemon::rotation::pending_request(&dir)? {
        if req.statement.old_sign_pk == mine {
            let by = req.requested_by.unwrap_or_else(|| gw.cfg.node_id.clone());
            return apply_own(gw, req.statement, &by).await;
        }
    }
    // The published one: at start, then every few ticks (another replica may have
    // rotated; on the embedded store this gateway is the only writer and the read, one
    // record, finds what it wrote).
    if tick > 0 && tick % SHARED_EVERY_TICKS != 0 {
        return Ok(());
    }
    let Some((rot, until)) = gw.state.gateway_rotation().await? else {
        return Ok(());
    };
    *gw.rotation.write().unwrap_or_else(|p| p.into_inner()) = Some((rot.clone(), until));
    if rot.new_doc.sign_pk == mine || rot.old_sign_pk != mine {
        return Ok(());
    }
    // Another replica switched: follow it with the new pair copied here.
    let next = crate::daemon::rotation::next_keys_path(&dir);
    let have = crate::envelope::Keys::load(&next)
        .is_ok_and(|k| k.sign_pk().as_bytes().as_slice() == rot.new_doc.sign_pk);
    if have {
        // Who asked is in the entry of the replica that rotated first.
        let me = gw.cfg.node_id.clone();
        return apply_own(gw, rot, &me).await;
    }
    let now = gw.now_ms();
    if warned_at.is_none_or(|t| now.saturating_sub(t) >= WARN_EVERY_MS) {
        *warned_at = Some(now);
        tracing::error!(
            event = "gateway_rotation_not_followed",
            new_sign_pk = %b64_encode(&rot.new_doc.sign_pk),
            path = %next.display(),
            "another replica rotated this gateway's key and this replica has not got the new \
             key pair: copy keys.next.json from the replica that made it (`outpost identity \
             rotate --prepare`) to this path; until then this replica signs with the retired \
             key, which nodes accept only until the grace ends"
        );
    }
    Ok(())
}

/// Switch this gateway to the keys of `rot`: publish the statement first (so nodes
/// learn the new key even if this replica stops right after), then the files (crash
/// safe, [`crate::daemon::rotation::finish`]), then every flow at once. `by` names who
/// asked in the audit entry: the local user who ran `outpost identity rotate`, or the
/// gateway when it follows another replica's rotation.
async fn apply_own(gw: &Gateway, rot: KeyRotation, by: &str) -> anyhow::Result<()> {
    let now = gw.now_ms();
    let until = match gw.state.gateway_rotation().await? {
        Some((r, until)) if r == rot => until,
        _ => now.saturating_add(ROTATION_GRACE_MS),
    };
    let new_pk = b64_encode(&rot.new_doc.sign_pk);
    let mut entry = AuditRecord::new(AuditEvent::Rotate, AuditOutcome::Ok)
        .actor(by)
        .detail(format!(
            "{} rotated {} -> {new_pk}",
            gw.cfg.node_id,
            b64_encode(&rot.old_sign_pk)
        ));
    entry.args_sha256 = Some(crate::audit::sha256_hex(new_pk.as_bytes()));
    gw.state.put_gateway_rotation(&rot, until, &entry).await?;
    let (dir, r) = (gw.cfg.data_dir.clone(), rot.clone());
    let (new, _old, _) =
        tokio::task::spawn_blocking(move || crate::daemon::rotation::finish(&dir, &r, now))
            .await??;
    gw.set_identity(&new);
    gw.keys.rotate(new, until);
    gw.trust_cache()
        .rotate_me(&rot, now, until.saturating_sub(now))?;
    *gw.rotation.write().unwrap_or_else(|p| p.into_inner()) = Some((rot.clone(), until));
    tracing::info!(
        event = "gateway_key_rotated",
        sign_pk = %new_pk,
        "this gateway's key pair was rotated; nodes learn the new key on their next pull"
    );
    gw.publish(GatewayEvent::NodeRotated {
        node_id: gw.cfg.node_id.clone(),
        sign_pk: new_pk.clone(),
    });
    super::own_audit::append_pending(gw).await;
    gw.events_committed().await;
    Ok(())
}

/// Nodes' key rotations (PROTOCOL §15.7).
pub struct Rotations<'g>(pub(super) &'g Gateway);

impl Gateway {
    pub fn rotations(&self) -> Rotations<'_> {
        Rotations(self)
    }
}
