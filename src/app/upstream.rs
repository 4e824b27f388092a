//! Starting the node's link to its gateway (the sync loop), when `[upstream]` is set.
//!
//! The glue between [`crate::sync`] and [`NodeCore`]: pulled envelopes enter the same
//! receive pipeline as `POST /v1/envelopes`; audit batches come from
//! `AuditLog::sync_batch`; the [`SyncHandle`] shows up in `/v1/status` and is woken when
//! the outbox gets work.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::core::{NodeCore, Upstream};
use super::inbound::Received;
use crate::audit::SyncBatch;
use crate::sync::enroll::{EnrollStatus, Enroller, SharedStatus};
use crate::sync::{BoxFuture, InboundOutcome, NodeLink, SyncDeps, SyncHandle};

/// The node as its sync link sees it; `refused_rotation` is the new key of the last
/// gateway rotation the node refused (said once, not with every pull).
struct Link(Arc<NodeCore>, std::sync::Mutex<Option<Vec<u8>>>);

impl NodeLink for Link {
    fn receive_batch(&self, envelopes: Vec<Vec<u8>>) -> BoxFuture<'_, Vec<InboundOutcome>> {
        Box::pin(async move {
            let outcomes = self.0.inbound.receive_batch(envelopes).await;
            outcomes
                .into_iter()
                .map(|r| match r {
                    Ok(Received::Accepted { .. }) => InboundOutcome::Accepted,
                    Ok(Received::Duplicate { .. }) => InboundOutcome::Duplicate,
                    // Our own trouble (store full, shutting down): keep it queued
                    // upstream.
                    Err(e) if e.is_transient() => InboundOutcome::Retry,
                    Err(e) => InboundOutcome::Rejected {
                        code: e.code().to_string(),
                    },
                })
                .collect()
        })
    }

    fn outbound_failed<'a>(
        &'a self,
        event: &'static str,
        peer: &'a str,
        message_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            crate::telemetry::MessageEvent {
                queue: super::inbound::Q_OUTBOX,
                event,
                peer,
                message_id,
                reason: Some(reason),
            }
            .emit(self.0.metrics());
            let (ev, outcome) = if event == "dead" {
                (
                    crate::audit::AuditEvent::DeadLetter,
                    crate::audit::AuditOutcome::Dead,
                )
            } else {
                (
                    crate::audit::AuditEvent::EnvelopeRejected,
                    crate::audit::AuditOutcome::Rejected,
                )
            };
            self.0
                .recorder
                .audit_event(ev, outcome, message_id, Some(peer), Some(reason))
                .await;
        })
    }

    fn pinned_key(&self, peer: &str) -> Option<ed25519_dalek::VerifyingKey> {
        self.pinned(peer).or_else(|| {
            self.0.base().recheck_trust();
            self.pinned(peer)
        })
    }

    fn pinned_tls(&self, peer: &str) -> Option<[u8; 32]> {
        self.0
            .base()
            .trust()
            .get(peer)
            .and_then(|p| p.doc.tls_pin())
    }

    fn gateway_rotated(&self, rotation: crate::envelope::KeyRotation) -> BoxFuture<'_, ()> {
        let core = self.0.clone();
        Box::pin(async move {
            let base = core.base();
            let gateway = rotation.new_doc.node_id.clone();
            let known = base.trust().get(&gateway).map(|p| p.doc.clone());
            let refused = self.1.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if known.as_ref() == Some(&rotation.new_doc)
                || refused.as_deref() == Some(rotation.new_doc.sign_pk.as_slice())
            {
                return;
            }
            let b = base.clone();
            let rot = rotation.clone();
            let applied = tokio::task::spawn_blocking(move || {
                let mut t = crate::daemon::trust::load(&b.store)?;
                let r = t.rotate(&rot, b.now_ms(), crate::envelope::ROTATION_GRACE_MS)?;
                if r == crate::envelope::Rotated::Applied {
                    crate::daemon::trust::save(&b.store, &t)?;
                }
                anyhow::Ok(r)
            })
            .await;
            match applied {
                Ok(Ok(crate::envelope::Rotated::Applied)) => {
                    base.recheck_trust();
                    let new_pk = crate::envelope::b64_encode(&rotation.new_doc.sign_pk);
                    tracing::info!(
                        event = "gateway_key_rotated",
                        gateway = %gateway,
                        sign_pk = %new_pk,
                        "the gateway rotated its key; this node trusts the new one"
                    );
                    let detail = format!(
                        "{gateway} rotated {} -> {new_pk}",
                        crate::envelope::b64_encode(&rotation.old_sign_pk)
                    );
                    core.recorder
                        .audit_event(
                            crate::audit::AuditEvent::Rotate,
                            crate::audit::AuditOutcome::Ok,
                            "",
                            Some(&gateway),
                            Some(&detail),
                        )
                        .await;
                }
                Ok(Ok(_)) => base.recheck_trust(),
                Ok(Err(e)) => {
                    *self.1.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(rotation.new_doc.sign_pk.clone());
                    tracing::warn!(
                        event = "gateway_rotation_refused",
                        gateway = %gateway,
                        error = %format!("{e:#}")
                    )
                }
                Err(e) => tracing::warn!(event = "gateway_rotation_refused", error = %e),
            }
        })
    }

    fn pending_rotation(&self) -> Option<crate::sync::OwnRotation> {
        let dir = &self.0.cfg().data_dir;
        let pending = crate::daemon::rotation::pending_request(dir).and_then(|p| {
            p.map(
                |crate::daemon::rotation::Request {
                     statement,
                     no_grace,
                     ..
                 }| {
                    let next = match no_grace {
                        true => Some(Arc::new(crate::daemon::rotation::next_keys(dir)?)),
                        false => None,
                    };
                    Ok(crate::sync::OwnRotation {
                        statement,
                        no_grace,
                        next,
                    })
                },
            )
            .transpose()
        });
        match pending {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(event = "rotation_unreadable", error = %format!("{e:#}"));
                None
            }
        }
    }

    fn rotation_accepted(
        &self,
        rotation: crate::envelope::KeyRotation,
    ) -> BoxFuture<'_, Result<(), String>> {
        let core = self.0.clone();
        Box::pin(async move {
            let c = core.clone();
            let rot = rotation.clone();
            tokio::task::spawn_blocking(move || c.rotate_keys(&rot))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("{e:#}"))?;
            let detail = format!(
                "{} -> {}",
                crate::envelope::b64_encode(&rotation.old_sign_pk),
                crate::envelope::b64_encode(&rotation.new_doc.sign_pk)
            );
            let gateway = core.cfg().upstream.as_ref().map(|u| u.gateway_id.clone());
            core.recorder
                .audit_event(
                    crate::audit::AuditEvent::Rotate,
                    crate::audit::AuditOutcome::Ok,
                    "",
                    gateway.as_deref(),
                    Some(&detail),
                )
                .await;
            core.recorder.checkpoint().await;
            Ok(())
        })
    }

    fn state_versions(&self) -> crate::sync::StateVersions {
        let held = self.0.state.held();
        crate::sync::StateVersions {
            desired: held.desired(),
            reported: held.reported(),
        }
    }

    fn reported_state(&self) -> Result<crate::fleet::Versioned, String> {
        self.0.state.reported().map_err(|e| e.to_string())
    }

    fn inventory(&self) -> BoxFuture<'_, crate::fleet::Inventory> {
        let core = self.0.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || super::inventory::read(&core))
                .await
                .unwrap_or_else(|_| super::inventory::minimal())
        })
    }

    fn audit_batch(
        &self,
        confirmed_size: u64,
        max_entries: usize,
    ) -> BoxFuture<'_, Result<Option<SyncBatch>, String>> {
        let core = self.0.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let log = core.recorder.log();
                if log.size() <= confirmed_size {
                    return Ok(None);
                }
                log.sync_batch(
                    confirmed_size,
                    max_entries,
                    core.base().keys.current().signing_key(),
                    &core.cfg().node_id,
                )
                .map(Some)
                .map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())?
        })
    }
}

impl Link {
    fn pinned(&self, peer: &str) -> Option<ed25519_dalek::VerifyingKey> {
        self.0.base().trust().get(peer).map(|p| p.keys.sign)
    }
}

impl Upstream for SyncHandle {
    fn status_json(&self) -> Value {
        SyncHandle::status_json(self)
    }
    fn wake(&self) {
        SyncHandle::wake(self)
    }
    fn report_state(&self) {
        SyncHandle::report_state(self)
    }
    fn clock_ahead(&self) -> bool {
        SyncHandle::clock_ahead(self)
    }
}

pub fn start(core: &Arc<NodeCore>, tracker: &TaskTracker, shutdown: CancellationToken) {
    let Some(up) = core.cfg().upstream.clone() else {
        return;
    };
    let trusted = core
        .base()
        .trust()
        .get(&up.gateway_id)
        .is_some_and(|p| p.doc.role == "gateway");
    if up.enroll_token_file.is_none() || trusted {
        let status = up
            .enroll_token_file
            .is_some()
            .then(|| enrolled_status(&core.cfg().data_dir, &up.gateway_id));
        spawn_sync(core, tracker, shutdown, status);
        return;
    }
    // Not enrolled yet: enroll first (retrying), then sync.
    let status: SharedStatus = Arc::new(std::sync::Mutex::new(EnrollStatus {
        state: "enrolling".into(),
        gateway_id: up.gateway_id.clone(),
        ..EnrollStatus::default()
    }));
    core.outbox.set_upstream(Arc::new(WithEnrollment {
        status: status.clone(),
        sync: None,
    }));
    let enroller = Enroller {
        cfg: core.base().cfg.clone(),
        keys: core.base().keys.current(),
        store: core.base().store.clone(),
        status: status.clone(),
        // Read once: what an approver matches against a delivery note does not change
        // while the device waits.
        device: crate::fleet::Inventory {
            tools: Vec::new(),
            ..super::inventory::read(core)
        },
    };
    let (core, tracker2) = (core.clone(), tracker.clone());
    tracker.spawn(async move {
        if enroller.run(&shutdown).await {
            core.base().recheck_trust();
            spawn_sync(&core, &tracker2, shutdown, Some(status));
        }
    });
}

fn enrolled_status(data_dir: &std::path::Path, gateway_id: &str) -> SharedStatus {
    let with: Option<crate::config::EnrolledWith> =
        std::fs::read(crate::config::enrollment_path(data_dir))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
    Arc::new(std::sync::Mutex::new(EnrollStatus {
        state: "enrolled".into(),
        gateway_id: gateway_id.to_string(),
        token_id: with.map(|w| w.token_id),
        ..EnrollStatus::default()
    }))
}

fn spawn_sync(
    core: &Arc<NodeCore>,
    tracker: &TaskTracker,
    shutdown: CancellationToken,
    enrollment: Option<SharedStatus>,
) {
    let deps = SyncDeps {
        cfg: core.base().cfg.clone(),
        store: core.base().store.clone(),
        keys: core.base().keys.clone(),
        metrics: core.base().metrics.clone(),
        node: Arc::new(Link(core.clone(), std::sync::Mutex::new(None))),
    };
    match crate::sync::spawn(deps, tracker, shutdown) {
        Ok(Some(h)) => match enrollment {
            Some(status) => core.outbox.set_upstream(Arc::new(WithEnrollment {
                status,
                sync: Some(h),
            })),
            None => core.outbox.set_upstream(Arc::new(h)),
        },
        Ok(None) => {}
        Err(e) => tracing::error!(event = "upstream_setup_failed", error = %e),
    }
}

/// The upstream of a node that enrolls itself: its enrollment under
/// `upstream.enrollment`, and the sync link once enrolled.
struct WithEnrollment {
    status: SharedStatus,
    sync: Option<SyncHandle>,
}

impl Upstream for WithEnrollment {
    fn status_json(&self) -> Value {
        let enrollment = self
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut v = match &self.sync {
            Some(h) => h.status_json(),
            None => serde_json::json!({
                "state": "enrolling",
                "connected": false,
                "hint": "the node is enrolling with its gateway (see enrollment)",
            }),
        };
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "enrollment".into(),
                serde_json::to_value(enrollment).unwrap_or(Value::Null),
            );
        }
        v
    }
    fn wake(&self) {
        if let Some(h) = &self.sync {
            h.wake();
        }
    }
    fn report_state(&self) {
        if let Some(h) = &self.sync {
            h.report_state();
        }
    }
    fn clock_ahead(&self) -> bool {
        self.sync.as_ref().is_some_and(|h| h.clock_ahead())
    }
}
