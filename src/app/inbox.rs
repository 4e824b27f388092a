//! The local inbox (messages for local consumers: list, acknowledge) and message
//! status.

use std::sync::Arc;

use serde_json::{json, Value};

use super::base::Base;
use super::error::NodeError;
use super::inbound::Q_INBOX;
use crate::sync::wire::InboxRecord;
use crate::telemetry::MessageEvent;

/// Messages for local consumers, and where any message is.
pub struct Inbox {
    base: Arc<Base>,
}

impl Inbox {
    pub(super) fn new(base: Arc<Base>) -> Self {
        Self { base }
    }

    /// Unacknowledged inbox messages, oldest first (per sender FIFO, senders in order).
    pub fn list(&self, from: Option<&str>, limit: usize) -> Result<Vec<Value>, NodeError> {
        let now = self.base.now_ms();
        let page = self
            .base
            .store
            .list(Q_INBOX, from, None, limit)
            .map_err(NodeError::Store)?;
        let mut out: Vec<(u64, Value)> = page
            .items
            .into_iter()
            .filter(|m| m.expires_at_ms > now)
            .filter_map(|m| {
                let r = match InboxRecord::from_bytes(&m.body) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(event = "inbox_record_unreadable", message_id = %m.message_id, error = %e);
                        return None;
                    }
                };
                Some((
                    r.received_at_ms,
                    json!({
                        "message_id": m.message_id,
                        "from": r.from,
                        "payload_type": r.payload_type,
                        "payload": r.payload,
                        "received_at_ms": r.received_at_ms,
                        "expires_at_ms": m.expires_at_ms,
                    }),
                ))
            })
            .collect();
        out.sort_by_key(|(t, _)| *t);
        Ok(out.into_iter().map(|(_, v)| v).collect())
    }

    pub async fn ack(&self, message_id: &str) -> Result<(), NodeError> {
        let Some(st) = self
            .base
            .store
            .status(message_id)
            .map_err(NodeError::Store)?
        else {
            return Err(NodeError::NotFound("no such inbox message"));
        };
        if st.queue != Q_INBOX {
            return Err(NodeError::NotFound("no such inbox message"));
        }
        let out = self
            .base
            .store
            .ack(
                Q_INBOX,
                &st.peer,
                vec![message_id.to_string()],
                self.base.now_ms(),
            )
            .await
            .map_err(NodeError::Store)?;
        if out.iter().any(|a| a.was_stored) {
            MessageEvent {
                queue: Q_INBOX,
                event: "delivered",
                peer: &st.peer,
                message_id,
                reason: None,
            }
            .emit(&self.base.metrics);
        }
        Ok(())
    }

    pub fn message_status(&self, message_id: &str) -> Result<Option<Value>, NodeError> {
        let st = self
            .base
            .store
            .status(message_id)
            .map_err(NodeError::Store)?;
        Ok(st.map(|s| {
            let mut v = json!({
                "message_id": message_id,
                "state": s.state.as_str(),
                "queue": s.queue,
                "peer": s.peer,
                "attempts": s.attempts,
                "next_attempt_at": s.next_attempt_at_ms,
            });
            if let Some(r) = s.reason {
                v["reason"] = json!(r);
            }
            v
        }))
    }
}
