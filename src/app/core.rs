//! `NodeCore`: the node role composed of its services, one per flow —
//! [`ToolCalls`] (token → idempotency → run → audit + result), [`Inbound`] (envelope
//! pipeline → durable inbox or tasks), [`Outbox`] (seal → queue for the sync loop),
//! [`Inbox`] (local consumers), [`Recorder`] (the audit log) — over a shared [`Base`]
//! (config, store, keys, trust, metrics, clock, lifecycle).

use std::sync::Arc;

use serde_json::{json, Value};

use super::auth::Authorizer;
use super::base::Base;
use super::calls::ToolCalls;
use super::error::NodeError;
use super::inbound::Inbound;
use super::inbox::Inbox;
use super::keyfile;
use super::outbox::Outbox;
use super::recorder::Recorder;
use super::state::NodeState;
use crate::clock;
use crate::config::Config;
use crate::envelope::Keys;
use crate::telemetry::status::{AuditStatus, ClockStatus, KeyRotationStatus, QueueStatus, Status};
use crate::telemetry::Metrics;

pub struct NodeCore {
    base: Arc<Base>,
    pub auth: Arc<Authorizer>,
    pub recorder: Arc<Recorder>,
    pub calls: ToolCalls,
    pub inbound: Inbound,
    pub outbox: Outbox,
    pub inbox: Inbox,
    /// Desired and reported state (PROTOCOL §10.4).
    pub state: Arc<NodeState>,
}

/// What the node's upstream link (the sync loop) shows to the rest of the node.
pub trait Upstream: Send + Sync {
    /// `{"state": …}` for `/v1/status`.
    fn status_json(&self) -> Value;
    /// New outbox work: flush soon.
    fn wake(&self);
    /// Local software wrote reported state: report it soon (PROTOCOL §16.5).
    fn report_state(&self);
    /// The gateway said (signed) that this node's time is ahead of its own and the
    /// node's clock does not agree yet: what the node sealed now would be refused.
    fn clock_ahead(&self) -> bool;
}

impl NodeCore {
    pub fn open(cfg: Config) -> anyhow::Result<Self> {
        let clock = clock::system();
        let now_ms = clock.now_ms();
        // A key switch cut short after keys.json and before identity.json: finish it
        // (keys.json only ever changes after the gateway accepted the rotation).
        if let Some(rot) = crate::daemon::rotation::pending(&cfg.data_dir)? {
            let on_disk = Keys::load(&keyfile::keys_path(&cfg.data_dir))?;
            if on_disk.sign_pk().as_bytes().as_slice() == rot.new_doc.sign_pk {
                crate::daemon::rotation::finish(&cfg.data_dir, &rot, now_ms)?;
            }
        }
        let previous = crate::daemon::rotation::load_previous(&cfg.data_dir, now_ms)?;
        let keys = Keys::load(&keyfile::keys_path(&cfg.data_dir))?;
        let identity = keyfile::read_identity(&cfg.data_dir)?;
        if identity.node_id != cfg.node_id
            || identity.sign_pk_b64() != crate::envelope::b64_encode(keys.sign_pk().as_bytes())
        {
            anyhow::bail!(
                "identity.json in {} does not match node_id {} and keys.json",
                cfg.data_dir.display(),
                cfg.node_id
            );
        }
        let store = super::open_store(&cfg, clock.clone())?;
        let trust = crate::daemon::trust::TrustCache::load(&store, &identity, store.now_ms())?;
        if let Some((old, until)) = &previous {
            trust.set_me_previous(old, until.to_owned())?;
        }
        let tools = super::build_registry(&cfg)?;
        let base = Arc::new(Base::new(cfg, store, keys, trust, clock));
        if let Some((old, until)) = previous {
            base.keys.set_previous(old, until);
        }
        let recorder = Arc::new(Recorder::open(base.clone())?);
        let auth = Arc::new(Authorizer::new(base.clone()));
        let state = Arc::new(NodeState::open(base.clone())?);
        Ok(Self {
            calls: ToolCalls::new(base.clone(), auth.clone(), recorder.clone(), tools),
            inbound: Inbound::new(base.clone(), recorder.clone(), state.clone()),
            outbox: Outbox::new(base.clone(), recorder.clone()),
            inbox: Inbox::new(base.clone()),
            state,
            auth,
            recorder,
            base,
        })
    }

    /// The gateway accepted this node's key rotation `rot`: switch the files, then
    /// every flow at once (signing, sealing, opening, checkpoints), keeping the retired
    /// pair to open what was sealed to it; the switch is recorded in the audit log and
    /// covered by a checkpoint signed with the new key. Blocking (file I/O).
    pub fn rotate_keys(&self, rot: &crate::envelope::KeyRotation) -> anyhow::Result<()> {
        let now_ms = self.now_ms();
        let (new, _old, until) =
            crate::daemon::rotation::finish(&self.cfg().data_dir, rot, now_ms)?;
        self.base.keys.rotate(new, until);
        self.base
            .trust
            .rotate_me(rot, now_ms, until.saturating_sub(now_ms))?;
        tracing::info!(
            event = "key_rotated",
            sign_pk = %crate::envelope::b64_encode(&rot.new_doc.sign_pk),
            "this node's key pair was rotated; the gateway switched to the new key"
        );
        Ok(())
    }

    /// What every service shares.
    pub fn base(&self) -> &Arc<Base> {
        &self.base
    }

    /// The resolved configuration.
    pub fn cfg(&self) -> &Config {
        &self.base.cfg
    }

    /// The metrics registry (rendered by `GET /metrics`).
    pub fn metrics(&self) -> &Metrics {
        &self.base.metrics
    }

    pub fn now_ms(&self) -> u64 {
        self.base.now_ms()
    }

    /// Started: `/readyz` answers ready from now on.
    pub fn set_ready(&self) {
        self.base.life.set_ready();
    }

    /// Shutdown begins: new work is refused (`not_ready`), work in flight finishes.
    pub fn stop_accepting(&self) {
        self.base.life.stop_accepting();
    }

    /// One more HTTP request answered (the sweeper trims memory once this stops moving).
    pub fn note_served(&self) {
        self.base.life.note_served();
    }

    /// Ready for traffic: started, not shutting down, and the store takes writes.
    pub fn is_ready(&self) -> bool {
        self.base.life.is_ready() && self.base.life.store_writable()
    }

    pub fn close(&self) {
        self.base.store.close_keeping_time();
    }

    pub fn upstream_status(&self) -> Value {
        match self.outbox.upstream().as_ref() {
            Some(h) => h.status_json(),
            None => {
                json!({"state": "none", "detail": "no [upstream] configured: fully offline node"})
            }
        }
    }

    /// One line for systemd's `STATUS=`.
    pub fn status_line(&self) -> String {
        let now = self.now_ms();
        let stats = self.base.store.queue_stats(now).unwrap_or_default();
        let mut parts: Vec<String> = stats
            .iter()
            .filter(|s| s.depth > 0)
            .map(|s| format!("{}/{}={}", s.queue, s.peer, s.depth))
            .collect();
        if parts.is_empty() {
            parts.push("all queues empty".into());
        }
        format!(
            "queues: {}; audit {}",
            parts.join(" "),
            self.recorder.size()
        )
    }

    /// Mirror store state into gauges just before `/metrics` renders.
    pub fn refresh_gauges(&self) {
        let (store, metrics) = (&self.base.store, &self.base.metrics);
        if let Ok(stats) = store.queue_stats(self.now_ms()) {
            metrics.set_queue_stats(&stats);
        }
        let size = self.recorder.size();
        metrics.audit_size.set(&[], size as f64);
        metrics
            .audit_unsynced_entries
            .set(&[], size.saturating_sub(self.recorder.synced_size()) as f64);
        metrics.store_bytes.set(&[], store.held_bytes() as f64);
        metrics
            .store_result_bytes
            .set(&[], store.result_bytes().unwrap_or(0) as f64);
    }

    /// `GET /v1/status`.
    pub fn status(&self) -> Result<Status, NodeError> {
        let now = self.now_ms();
        let stats = self.base.store.queue_stats(now).map_err(NodeError::Store)?;
        let wall = self.base.clock.now_ms();
        let cfg = &self.base.cfg;
        // `none`, or the key a pending `outpost identity rotate` waits to switch to.
        let key_rotation = match crate::daemon::rotation::pending(&cfg.data_dir) {
            Ok(Some(r)) => KeyRotationStatus::Pending {
                new_sign_pk: crate::envelope::b64_encode(&r.new_doc.sign_pk),
            },
            Ok(None) => KeyRotationStatus::None,
            Err(e) => KeyRotationStatus::Unreadable {
                error: format!("{e:#}"),
            },
        };
        Ok(Status {
            node_id: cfg.node_id.clone(),
            role: cfg.role.as_str().into(),
            version: env!("CARGO_PKG_VERSION").into(),
            store: cfg.store_description(),
            uptime_s: now.saturating_sub(self.base.life.started_ms) / 1000,
            upstream: self.upstream_status(),
            queues: stats.iter().map(QueueStatus::from).collect(),
            audit: AuditStatus {
                size: self.recorder.size(),
                synced_size: self.recorder.synced_size(),
            },
            nodes_enrolled: None,
            sign_pk: Some(crate::envelope::b64_encode(
                self.base.keys.current().sign_pk().as_bytes(),
            )),
            key_rotation: Some(key_rotation),
            clock: Some(ClockStatus {
                now_ms: now,
                wall_ms: wall,
                behind_floor: wall < now,
                max_skew_s: cfg.max_clock_skew_s,
            }),
        })
    }
}
