//! What the gateway's records become in the embedded store: queue messages, KV rows.

use super::super::{FiledResult, ForNode, InboxMessage, StateError};
use super::Embedded;
use crate::store::names::{KV_GW_RESULTS, Q_GATEWAY_INBOX, Q_TO_NODE, SCOPE_RESULTS};
use crate::store::{Batch, NewMessage};

impl Embedded {
    /// The message id is known (queued or finished). Asked before a batch that writes
    /// something with the message (a job binding, an idempotency key): a batch's
    /// duplicate enqueue leaves its other changes in place, and a duplicate writes
    /// nothing. Nothing else writes the id meanwhile: the caller holds its lock (keyed
    /// commands) or made it just now (a job's), and this engine has one process.
    pub(super) fn id_taken(&self, message_id: &str) -> Result<bool, StateError> {
        Ok(self.store.status(message_id)?.is_some())
    }

    pub(super) fn inbox_message(m: InboxMessage) -> NewMessage {
        NewMessage {
            queue: Q_GATEWAY_INBOX.into(),
            peer: m.from_node,
            message_id: m.message_id,
            payload_type: m.payload_type,
            priority: m.priority,
            created_at_ms: m.created_at_ms,
            expires_at_ms: m.expires_at_ms,
            body: m.record,
            max_attempts: Some(0),
            dedup_until_ms: Some(m.remember_until_ms),
        }
    }

    pub(super) fn file(batch: &mut Batch, r: FiledResult) {
        batch
            .kv_put(KV_GW_RESULTS, &r.request_id, r.plaintext)
            .remember(SCOPE_RESULTS, &r.result_message_id, r.remember_until_ms);
    }

    pub(super) fn new_message(&self, m: ForNode) -> NewMessage {
        NewMessage {
            queue: Q_TO_NODE.into(),
            peer: m.node_id,
            message_id: m.message_id,
            payload_type: m.payload_type,
            priority: m.priority,
            created_at_ms: m.created_at_ms,
            expires_at_ms: m.expires_at_ms,
            body: m.envelope,
            max_attempts: Some(m.max_attempts),
            dedup_until_ms: None,
        }
    }
}
