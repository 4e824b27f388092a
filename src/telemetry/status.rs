//! `GET /v1/status` (PROTOCOL §10): one shape for both roles, which `outpost status`
//! reads. Role-specific parts are absent where they do not apply.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Status {
    pub node_id: String,
    pub role: String,
    pub version: String,
    /// The storage engine and where it keeps its data.
    pub store: String,
    pub uptime_s: u64,
    /// The upstream link: `state` plus what that state knows (its URL, last error and
    /// hint, an enrollment in progress); `{"state":"none", "detail"}` without one.
    pub upstream: serde_json::Value,
    pub queues: Vec<QueueStatus>,
    pub audit: AuditStatus,
    /// Gateway: the nodes in its trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_enrolled: Option<usize>,
    /// Node: its current signing key (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign_pk: Option<String>,
    /// Node: a key rotation waiting to be switched to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_rotation: Option<KeyRotationStatus>,
    /// Node: its clocks (the persisted floor and the wall clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockStatus>,
}

/// One queue of one peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct QueueStatus {
    pub queue: String,
    pub peer: String,
    pub depth: u64,
    /// Age of the message at its head, in seconds.
    pub oldest_age_s: u64,
}

impl From<&crate::store::QueueStat> for QueueStatus {
    fn from(s: &crate::store::QueueStat) -> Self {
        Self {
            queue: s.queue.clone(),
            peer: s.peer.clone(),
            depth: s.depth,
            oldest_age_s: s.oldest_age_s,
        }
    }
}

/// Entries in the audit log, and how many of them the gateway confirmed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct AuditStatus {
    pub size: u64,
    pub synced_size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum KeyRotationStatus {
    None,
    /// `outpost identity rotate` prepared this key; the switch waits for the gateway.
    Pending {
        new_sign_pk: String,
    },
    /// The rotation files cannot be read.
    Unreadable {
        error: String,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ClockStatus {
    /// The node's time: the wall clock, never below the persisted floor.
    pub now_ms: u64,
    pub wall_ms: u64,
    /// The wall clock is behind the floor (it was set back, or has no RTC yet).
    pub behind_floor: bool,
    pub max_skew_s: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rotation_states_read_as_before() {
        let j = |k: &KeyRotationStatus| serde_json::to_value(k).unwrap();
        assert_eq!(
            j(&KeyRotationStatus::None),
            serde_json::json!({"state": "none"})
        );
        assert_eq!(
            j(&KeyRotationStatus::Pending {
                new_sign_pk: "k".into()
            }),
            serde_json::json!({"state": "pending", "new_sign_pk": "k"})
        );
        assert_eq!(
            j(&KeyRotationStatus::Unreadable { error: "e".into() }),
            serde_json::json!({"state": "unreadable", "error": "e"})
        );
    }
}
