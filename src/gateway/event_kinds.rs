//! What the gateway's events say (`GET /v1/events`, PROTOCOL §11): one variant per kind,
//! its name and SSE frame, and the tenant a message event counts for. The event log
//! that orders and delivers them is `gateway::events`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GatewayEvent {
    Queued {
        message_id: String,
        node_id: String,
        payload_type: String,
        expires_at_ms: u64,
    },
    Delivered {
        message_id: String,
        node_id: String,
        was_stored: bool,
    },
    Expired {
        message_id: String,
        node_id: String,
        reason: String,
    },
    Rejected {
        message_id: String,
        node_id: String,
        code: String,
    },
    Dead {
        message_id: String,
        node_id: String,
    },
    Result {
        message_id: String,
        job_id: String,
        node_id: String,
        ok: bool,
    },
    /// A token id was added to the revocation list (by `POST /v1/revocations` or the
    /// console), by the token subject `by`.
    Revoked {
        jti: String,
        version: u64,
        by: String,
    },
    NodeOnline {
        node_id: String,
    },
    NodeOffline {
        node_id: String,
    },
    /// An enrollment arrived or was decided: `outcome` is `enrolled`, `pending`,
    /// `approved`, `rejected` or `refused`; `detail` the kind (`new`, `rekey`) or the
    /// refusal's code.
    Enrollment {
        node_id: String,
        outcome: String,
        detail: String,
    },
    /// An operator retired the node; `messages` queued for it were refused.
    NodeRevoked {
        node_id: String,
        messages: u64,
    },
    /// The node replaced its key pair (PROTOCOL §15.7); `sign_pk` is the new key.
    NodeRotated {
        node_id: String,
        sign_pk: String,
    },
    /// An audit upload of the node was refused (`audit_gap`, `audit_mismatch`): its log
    /// and the gateway's copy disagree — an alarm until the copy grows past
    /// `confirmed_size` (an upload extended it again).
    AuditRefused {
        node_id: String,
        code: String,
        confirmed_size: u64,
    },
    /// An admin changed the node's labels (PROTOCOL §16.1); `labels` as they are now.
    LabelsChanged {
        node_id: String,
        labels: crate::fleet::Labels,
        by: String,
    },
    /// An admin wrote desired version `version` of the node (PROTOCOL §16.4).
    DesiredSet {
        node_id: String,
        version: u64,
        by: String,
    },
    /// The node reported state version `version`; `in_sync` with its desired state.
    StateReported {
        node_id: String,
        version: u64,
        in_sync: bool,
    },
    /// The node's inventory moved (PROTOCOL §16.3).
    InventoryChanged {
        node_id: String,
        agent_version: String,
    },
    /// A rollout's counts moved (at most one a second per rollout; PROTOCOL §17).
    RolloutProgress {
        rollout_id: String,
        /// The rollout's tenant (absent: the operator's rollout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
        state: crate::gateway::storage::rollouts::State,
        phase: usize,
        counts: crate::gateway::storage::rollouts::Counts,
    },
    /// Failures reached the rollout's error threshold: nothing more is sent.
    RolloutHalted {
        rollout_id: String,
        /// The rollout's tenant (absent: the operator's rollout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
        failed: u64,
        of: u64,
    },
    /// The rollout ended: `completed` or `cancelled`.
    RolloutCompleted {
        rollout_id: String,
        /// The rollout's tenant (absent: the operator's rollout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
        state: crate::gateway::storage::rollouts::State,
    },
}

impl GatewayEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Queued { .. } => "queued",
            Self::Delivered { .. } => "delivered",
            Self::Expired { .. } => "expired",
            Self::Rejected { .. } => "rejected",
            Self::Dead { .. } => "dead",
            Self::Result { .. } => "result",
            Self::Revoked { .. } => "revoked",
            Self::NodeOnline { .. } => "node_online",
            Self::NodeOffline { .. } => "node_offline",
            Self::Enrollment { .. } => "enrollment",
            Self::NodeRevoked { .. } => "node_revoked",
            Self::NodeRotated { .. } => "node_rotated",
            Self::AuditRefused { .. } => "audit_refused",
            Self::LabelsChanged { .. } => "labels_changed",
            Self::DesiredSet { .. } => "desired_set",
            Self::StateReported { .. } => "state_reported",
            Self::InventoryChanged { .. } => "inventory_changed",
            Self::RolloutProgress { .. } => "rollout_progress",
            Self::RolloutHalted { .. } => "rollout_halted",
            Self::RolloutCompleted { .. } => "rollout_completed",
        }
    }

    /// One SSE frame: `event: <name>` and the JSON (with `type` and `ts_ms`) as data.
    /// The event as one SSE frame (`id`, `event`, `data` with `ts_ms` added).
    pub fn sse_frame(&self, id: u64, ts_ms: u64) -> String {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("ts_ms".into(), ts_ms.into());
        }
        format!("id: {id}\nevent: {}\ndata: {}\n\n", self.name(), v)
    }
}

/// `(tenant, event)` of a message event (one that follows a message of a node); `None`
/// for the others.
pub(super) fn message_event(e: &GatewayEvent) -> Option<(String, &'static str)> {
    use GatewayEvent as G;
    let node = match e {
        G::Queued { node_id, .. }
        | G::Delivered { node_id, .. }
        | G::Expired { node_id, .. }
        | G::Rejected { node_id, .. }
        | G::Dead { node_id, .. }
        | G::Result { node_id, .. } => node_id,
        _ => return None,
    };
    Some((crate::fleet::tenant::tenant_of(node).to_string(), e.name()))
}
