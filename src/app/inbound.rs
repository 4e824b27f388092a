//! Inbound envelopes (pushed to `POST /v1/envelopes` or pulled from the gateway): the
//! security pipeline, then one durable write that stores the message and remembers its
//! id for replay protection. `TASK_REQUEST`s go to the `tasks` queue (the task worker
//! runs them), everything else to the `inbox` for local consumers.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Notify;

use super::base::Base;
use super::error::NodeError;
use super::recorder::Recorder;
use crate::audit::{AuditEvent as Event, AuditOutcome as Outcome};
use crate::envelope::{open, OpenContext, OpenError, Opened};
use crate::store::{EnqueueOutcome, NewMessage};
use crate::sync::wire::InboxRecord;
use crate::telemetry::{EnvelopeReceived, MessageEvent};

pub use crate::store::names::{Q_INBOX, Q_OUTBOX, Q_TASKS};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    Accepted { message_id: String },
    Duplicate { message_id: String },
}

/// Envelopes arriving for this node.
pub struct Inbound {
    base: Arc<Base>,
    recorder: Arc<Recorder>,
    /// Woken when a `TASK_REQUEST` lands in the tasks queue.
    tasks_waiting: Notify,
}

impl Inbound {
    pub(super) fn new(base: Arc<Base>, recorder: Arc<Recorder>) -> Self {
        Self {
            base,
            recorder,
            tasks_waiting: Notify::new(),
        }
    }

    /// Notified when a task was queued (the task worker waits on it).
    pub fn tasks_waiting(&self) -> &Notify {
        &self.tasks_waiting
    }

    fn open_envelope(&self, bytes: &[u8]) -> Result<Opened, OpenError> {
        let attempt = |trust: &crate::envelope::TrustStore| {
            let ctx = OpenContext {
                me: &self.base.cfg.node_id,
                keys: &self.base.keys,
                trust,
                now_ms: self.base.now_ms(),
                skew_ms: self.base.skew_ms(),
                max_bytes: self.base.cfg.queue.max_message_bytes as usize,
                max_ttl_ms: self.base.cfg.queue.max_ttl_s * 1000,
            };
            // Dedup scopes are the receiving queues; ids are unique per sender and in
            // practice globally (UUIDv7/ULID), so either queue having it is a replay.
            let seen = |_sender: &str, id: &str| {
                [Q_INBOX, Q_TASKS]
                    .iter()
                    .any(|q| self.base.store.seen(q, id).unwrap_or(false))
            };
            open(bytes, &ctx, &seen)
        };
        match attempt(&self.base.trust()) {
            Err(OpenError::UnknownSender) => {
                self.base.reload_trust_if_stale();
                attempt(&self.base.trust())
            }
            other => other,
        }
    }

    pub async fn receive_envelope(&self, bytes: &[u8]) -> Result<Received, NodeError> {
        if !self.base.life.accepting() {
            return Err(NodeError::NotReady(
                "the store is recovering or not writable",
            ));
        }
        let opened = match self.open_envelope(bytes) {
            Ok(o) => o,
            Err(OpenError::Duplicate) => {
                let (sender, id) = peek_ids(bytes);
                MessageEvent {
                    queue: Q_INBOX,
                    event: "duplicate",
                    peer: &sender,
                    message_id: &id,
                    reason: None,
                }
                .emit(&self.base.metrics);
                return Ok(Received::Duplicate { message_id: id });
            }
            Err(e) => {
                let (sender, id) = peek_ids(bytes);
                EnvelopeReceived {
                    result: e.code(),
                    sender: &sender,
                    message_id: &id,
                }
                .emit(&self.base.metrics);
                self.recorder
                    .audit_event(
                        Event::EnvelopeRejected,
                        Outcome::Rejected,
                        &id,
                        Some(&sender),
                        Some(e.code()),
                    )
                    .await;
                return Err(NodeError::Envelope(e));
            }
        };
        let payload: Value = serde_json::from_slice(&opened.plaintext)
            .map_err(|_| NodeError::bad_request("payload is not JSON"))?;
        let now = self.base.now_ms();
        let queue = if opened.payload_type == "TASK_REQUEST" {
            Q_TASKS
        } else {
            Q_INBOX
        };
        // What the inbox / tasks queues keep: the decrypted payload plus who sent it.
        let record = InboxRecord::new(&opened, payload, now);
        let skew_ms = self.base.skew_ms();
        let msg = NewMessage {
            queue: queue.to_string(),
            peer: opened.sender_node_id.clone(),
            message_id: opened.message_id.clone(),
            payload_type: opened.payload_type.clone(),
            priority: opened.priority.min(255) as u8,
            created_at_ms: opened.created_at_ms,
            expires_at_ms: opened.expires_at_ms,
            body: record.to_bytes(),
            max_attempts: None,
            dedup_until_ms: Some(opened.expires_at_ms.saturating_add(2 * skew_ms)),
        };
        match self.base.store.enqueue(msg).await {
            Ok(EnqueueOutcome::Duplicate) => Ok(Received::Duplicate {
                message_id: opened.message_id,
            }),
            Ok(_) => {
                EnvelopeReceived {
                    result: "accepted",
                    sender: &opened.sender_node_id,
                    message_id: &opened.message_id,
                }
                .emit(&self.base.metrics);
                MessageEvent {
                    queue,
                    event: "enqueued",
                    peer: &opened.sender_node_id,
                    message_id: &opened.message_id,
                    reason: None,
                }
                .emit(&self.base.metrics);
                self.recorder
                    .audit_event(
                        Event::EnvelopeAccepted,
                        Outcome::Ok,
                        &opened.message_id,
                        Some(&opened.sender_node_id),
                        Some(&opened.payload_type),
                    )
                    .await;
                if queue == Q_TASKS {
                    self.tasks_waiting.notify_one();
                }
                Ok(Received::Accepted {
                    message_id: opened.message_id,
                })
            }
            Err(e) => {
                self.recorder
                    .audit_overflow(&e, &opened.message_id, &opened.sender_node_id)
                    .await;
                Err(NodeError::Store(e))
            }
        }
    }
}

/// Best-effort sender and id of a refused envelope, for logs only (never trusted).
fn peek_ids(bytes: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let s = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .map(|x| x.chars().take(100).collect())
            .unwrap_or_default()
    };
    (s("sender_node_id"), s("message_id"))
}
