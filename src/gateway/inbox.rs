//! The gateway's inbox: what nodes sent upstream other than results (PROTOCOL §12.4),
//! kept until an operator acknowledges it.

use super::error::GatewayError;
use super::state::Gateway;
use super::storage::QUEUE_INBOX;
use crate::sync::wire::InboxRecord;
use crate::telemetry::MessageEvent;

/// How many messages one listing holds at most.
pub const PAGE: usize = 500;

impl Inbox<'_> {
    /// The oldest messages first, after `from` (a message id) when given; a record that
    /// cannot be read is logged and left out, never answered as something else.
    pub async fn list(&self, from: Option<&str>) -> Result<Vec<InboxRecord>, GatewayError> {
        let gw = self.0;
        let rows = gw.state.inbox_list(from, PAGE).await?;
        Ok(rows
            .iter()
            .filter_map(|b| match InboxRecord::from_bytes(b) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(event = "inbox_record_unreadable", error = %e);
                    None
                }
            })
            .collect())
    }
}

impl Inbox<'_> {
    /// Acknowledge (remove) message `id`; whether it was taken now (false: already).
    pub async fn ack(&self, id: &str) -> Result<bool, GatewayError> {
        let gw = self.0;
        let removed =
            gw.state.inbox_ack(id).await?.ok_or_else(|| {
                GatewayError::NotFound("not_found", "no such inbox message".into())
            })?;
        if removed {
            MessageEvent {
                queue: QUEUE_INBOX,
                event: "delivered",
                // The ack names the message only; the sender is in the inbox listing.
                peer: "",
                message_id: id,
                reason: None,
            }
            .emit(&gw.metrics);
        }
        Ok(removed)
    }
}

/// Messages nodes sent to the gateway itself (other than results).
pub struct Inbox<'g>(pub(super) &'g Gateway);

impl Gateway {
    pub fn inbox(&self) -> Inbox<'_> {
        Inbox(self)
    }
}
