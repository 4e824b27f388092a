//! Gateway events (SPEC §6 `GET /v1/events`): one broadcast channel, fanned out to every
//! Server-Sent-Events subscriber. Also the in-process signal that a result arrived, so a
//! `POST /v1/tool_call` that waits needs no polling.
//!
//! A slow subscriber that falls more than the channel capacity behind loses events
//! (it gets a `lagged` event saying how many); the gateway itself never blocks on one.

use serde::Serialize;
use tokio::sync::broadcast;

/// Capacity of the broadcast ring; see the module docs for what happens past it.
pub const CAPACITY: usize = 1024;

#[derive(Debug, Clone, PartialEq, Serialize)]
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
    NodeOnline {
        node_id: String,
    },
    NodeOffline {
        node_id: String,
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
            Self::NodeOnline { .. } => "node_online",
            Self::NodeOffline { .. } => "node_offline",
        }
    }

    /// One SSE frame: `event: <name>` and the JSON (with `type` and `ts_ms`) as data.
    pub fn sse_frame(&self, ts_ms: u64) -> String {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("ts_ms".into(), ts_ms.into());
        }
        format!("event: {}\ndata: {}\n\n", self.name(), v)
    }
}

/// The sending half, shared by every handler and the sweeper.
#[derive(Debug, Clone)]
pub struct Bus {
    tx: broadcast::Sender<(u64, GatewayEvent)>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl Bus {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Self { tx }
    }

    /// Publish; having no subscriber is normal and not an error.
    pub fn publish(&self, ts_ms: u64, ev: GatewayEvent) {
        tracing::debug!(event = "gateway_event", kind = ev.name());
        let _ = self.tx.send((ts_ms, ev));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<(u64, GatewayEvent)> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_names_event_and_carries_fields() {
        let f = GatewayEvent::Delivered {
            message_id: "m1".into(),
            node_id: "node:a".into(),
            was_stored: true,
        }
        .sse_frame(42);
        assert!(f.starts_with("event: delivered\ndata: {"), "{f}");
        assert!(f.contains("\"was_stored\":true"));
        assert!(f.contains("\"type\":\"delivered\""));
        assert!(f.contains("\"ts_ms\":42"));
        assert!(f.ends_with("\n\n"));
    }
}
