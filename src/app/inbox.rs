//! The local inbox (messages for local consumers: list, acknowledge) and message
//! status.

use std::sync::Arc;

use super::base::Base;
use super::error::NodeError;
use super::inbound::Q_INBOX;
use crate::store::MessageStatus;
use crate::sync::wire::InboxRecord;
use crate::telemetry::MessageEvent;

/// An unacknowledged inbox message: the stored record, under the id and expiry the store
/// keeps it by.
#[derive(Debug, Clone)]
pub struct Inboxed {
    pub message_id: String,
    pub expires_at_ms: u64,
    pub record: InboxRecord,
}

/// Messages for local consumers, and where any message is.
pub struct Inbox {
    base: Arc<Base>,
}

impl Inbox {
    pub(super) fn new(base: Arc<Base>) -> Self {
        Self { base }
    }

    /// Unacknowledged inbox messages, oldest first (per sender FIFO, senders in order).
    pub fn list(&self, from: Option<&str>, limit: usize) -> Result<Vec<Inboxed>, NodeError> {
        let now = self.base.now_ms();
        let page = self
            .base
            .store
            .list(Q_INBOX, from, None, limit)
            .map_err(NodeError::Store)?;
        let mut out: Vec<Inboxed> = page
            .items
            .into_iter()
            .filter(|m| m.expires_at_ms > now)
            .filter_map(|m| {
                let record = match InboxRecord::from_bytes(&m.body) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(event = "inbox_record_unreadable", message_id = %m.message_id, error = %e);
                        return None;
                    }
                };
                Some(Inboxed {
                    message_id: m.message_id,
                    expires_at_ms: m.expires_at_ms,
                    record,
                })
            })
            .collect();
        out.sort_by_key(|m| m.record.received_at_ms);
        Ok(out)
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

    /// Where message `message_id` is (in any queue), if the store knows it.
    pub fn message_status(&self, message_id: &str) -> Result<Option<MessageStatus>, NodeError> {
        self.base.store.status(message_id).map_err(NodeError::Store)
    }
}
