//! Inbound envelopes (pushed to `POST /v1/envelopes` or pulled from the gateway): the
//! security pipeline, then one durable write that stores the message and remembers its
//! id for replay protection. `TASK_REQUEST`s go to the `tasks` queue (the task worker
//! runs them), a `DESIRED_STATE` from the node's gateway to the node's state (kept only
//! when newer, [`super::state`]), everything else to the `inbox` for local consumers.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Notify;

use super::base::Base;
use super::error::NodeError;
use super::inbound_open::{open_all, open_envelope, peek_ids, seen_any};
use super::recorder::Recorder;
use super::state::NodeState;
use crate::audit::{AuditEvent as Event, AuditOutcome as Outcome};
use crate::envelope::{OpenError, Opened};
use crate::fleet::Versioned;
use crate::store::names::{KEY_DESIRED, KV_STATE, SCOPE_DESIRED};
use crate::store::{Batch, EnqueueOutcome, NewMessage, StoreError};
use crate::sync::wire::{InboxRecord, DESIRED_STATE};
use crate::telemetry::{EnvelopeReceived, MessageEvent};

pub use crate::store::names::{Q_INBOX, Q_OUTBOX, Q_TASKS};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    Accepted { message_id: String },
    Duplicate { message_id: String },
}

/// Where an opened envelope goes.
#[derive(Debug, Clone)]
enum Stored {
    /// A queue (`tasks` or `inbox`).
    Queued(NewMessage, &'static str),
    /// The node's desired state; its id remembered until `dedup_until_ms`.
    Desired(Versioned, u64),
}

/// Envelopes arriving for this node.
pub struct Inbound {
    base: Arc<Base>,
    recorder: Arc<Recorder>,
    state: Arc<NodeState>,
    /// Woken when a `TASK_REQUEST` lands in the tasks queue.
    tasks_waiting: Notify,
    /// One lock per message id being stored: the replay check and the commit of an
    /// envelope with its audit entry happen under it, so the same envelope arriving
    /// twice at once (pushed and pulled, or twice in one batch) is stored and audited
    /// once.
    storing: crate::keyed_lock::KeyedLocks,
}

impl Inbound {
    pub(super) fn new(base: Arc<Base>, recorder: Arc<Recorder>, state: Arc<NodeState>) -> Self {
        Self {
            base,
            recorder,
            state,
            tasks_waiting: Notify::new(),
            storing: crate::keyed_lock::KeyedLocks::new(),
        }
    }

    /// Notified when a task was queued (the task worker waits on it).
    pub fn tasks_waiting(&self) -> &Notify {
        &self.tasks_waiting
    }

    fn open_envelope(&self, bytes: &[u8]) -> Result<Opened, OpenError> {
        open_envelope(&self.base, bytes)
    }

    pub async fn receive_envelope(&self, bytes: &[u8]) -> Result<Received, NodeError> {
        if !self.base.life.accepting() {
            return Err(NodeError::NotReady(
                "the store is recovering or not writable",
            ));
        }
        let opened = match self.open_envelope(bytes) {
            Ok(o) => o,
            Err(e) => return self.refused(bytes, e).await,
        };
        let stored = stored_message(&self.base, &opened, self.base.now_ms())?;
        self.store_one(opened, stored).await
    }

    /// Store one opened envelope with its audit entry (its own commit), then count it.
    async fn store_one(&self, opened: Opened, stored: Stored) -> Result<Received, NodeError> {
        let mut out = self.store_with_entries(vec![(opened, stored)]).await;
        match out.pop() {
            Some((o, Err(e))) => {
                self.recorder
                    .audit_overflow(&e, &o.message_id, &o.sender_node_id)
                    .await;
                Err(NodeError::Store(e))
            }
            Some((_, Ok(r))) => Ok(r),
            None => Err(NodeError::NotReady("envelope not processed")),
        }
    }

    /// Store opened envelopes and their `envelope_accepted` entries in one commit
    /// ([`Recorder::commit_accepted`]): every envelope stored has its entry, whatever
    /// fails. Under each id's lock, an id already known (or twice in `items`) is a
    /// duplicate and writes nothing; so is a desired state not newer than the one held
    /// (checked under the desired lock, PROTOCOL §16.4). One outcome per item, in order;
    /// on an error every new envelope of the commit gets it (nothing of it was stored).
    async fn store_with_entries(
        &self,
        items: Vec<(Opened, Stored)>,
    ) -> Vec<(Opened, Result<Received, StoreError>)> {
        let mut ids: Vec<String> = items.iter().map(|(o, _)| o.message_id.clone()).collect();
        ids.sort();
        ids.dedup();
        let mut held = Vec::with_capacity(ids.len());
        for id in &ids {
            held.push(self.storing.lock(id).await);
        }
        let has_desired = items.iter().any(|(_, s)| matches!(s, Stored::Desired(..)));
        let desired_guard = match has_desired {
            true => Some(self.state.lock_desired().await),
            false => None,
        };
        let (batch, new_ones, desired_version) = self.new_writes(&items);
        let accepted: Vec<(&str, &str, &str)> = new_ones
            .iter()
            .map(|&i| {
                let o = &items[i].0;
                (
                    o.message_id.as_str(),
                    o.sender_node_id.as_str(),
                    o.payload_type.as_str(),
                )
            })
            .collect();
        let committed = self.recorder.commit_accepted(batch, &accepted).await;
        if let (Ok(_), Some(v)) = (&committed, desired_version) {
            self.state.desired_stored(v);
            tracing::info!(event = "desired_state_stored", version = v);
        }
        drop(desired_guard);
        drop(held);
        let outcome = self.settled(&items, &new_ones, committed);
        items
            .into_iter()
            .zip(outcome)
            .map(|((o, _), r)| (o, r))
            .collect()
    }

    /// One outcome per item of a commit ([`Self::store_with_entries`]): `new_ones`
    /// accepted (or the commit's error), the rest duplicates.
    fn settled(
        &self,
        items: &[(Opened, Stored)],
        new_ones: &[usize],
        committed: Result<crate::store::Committed, StoreError>,
    ) -> Vec<Result<Received, StoreError>> {
        let mut outcome: Vec<Result<Received, StoreError>> = items
            .iter()
            .map(|(o, _)| {
                Ok(Received::Duplicate {
                    message_id: o.message_id.clone(),
                })
            })
            .collect();
        match committed {
            Ok(done) => {
                let mut enqueued = done.enqueued.iter();
                for &i in new_ones {
                    let (o, stored) = &items[i];
                    let queue = match stored {
                        Stored::Queued(_, q) => *q,
                        Stored::Desired(..) => KV_STATE,
                    };
                    if queue != KV_STATE
                        && matches!(enqueued.next(), Some(EnqueueOutcome::Duplicate))
                    {
                        // Not reachable while every inbound write takes the id's lock:
                        // say so loudly if it ever is (the entry then vouches for a copy
                        // stored earlier).
                        tracing::error!(event = "audit_duplicate_entry", message_id = %o.message_id, "an envelope found stored at commit has an envelope_accepted entry twice");
                        continue;
                    }
                    self.stored(o, queue);
                    outcome[i] = Ok(Received::Accepted {
                        message_id: o.message_id.clone(),
                    });
                }
                if new_ones
                    .iter()
                    .any(|&i| matches!(items[i].1, Stored::Queued(_, Q_TASKS)))
                {
                    self.tasks_waiting.notify_one();
                }
            }
            Err(e) => {
                for &i in new_ones {
                    outcome[i] = Err(e.clone());
                }
            }
        }
        outcome
    }

    /// The writes of `items` that are new (the caller holds each id's lock, and the
    /// desired lock when there is a desired state): the batch, which items it stores,
    /// and the desired version it stores, if any.
    fn new_writes(&self, items: &[(Opened, Stored)]) -> (Batch, Vec<usize>, Option<u64>) {
        let mut fresh = std::collections::HashSet::new();
        let mut batch = Batch::new();
        let mut new_ones = Vec::new();
        let mut desired_held = self.state.held().desired();
        let mut desired_version = None;
        for (i, (o, stored)) in items.iter().enumerate() {
            if seen_any(&self.base, &o.message_id) || !fresh.insert(o.message_id.as_str()) {
                continue;
            }
            match stored {
                Stored::Queued(msg, _) => {
                    batch.enqueue(msg.clone());
                }
                // Older or equal: acked as a duplicate, nothing written.
                Stored::Desired(d, _) if d.version <= desired_held => continue,
                Stored::Desired(d, dedup_until_ms) => {
                    desired_held = d.version;
                    desired_version = Some(d.version);
                    batch.remember(SCOPE_DESIRED, &o.message_id, *dedup_until_ms);
                    batch.kv_put(KV_STATE, KEY_DESIRED, super::state::record(d));
                }
            }
            new_ones.push(i);
        }
        (batch, new_ones, desired_version)
    }

    /// An envelope the pipeline refused: a replay is a duplicate (counted), anything
    /// else is counted, audited (within the refusal budget) and returned as the error.
    async fn refused(&self, bytes: &[u8], e: OpenError) -> Result<Received, NodeError> {
        let (sender, id) = peek_ids(bytes);
        if e == OpenError::Duplicate {
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
        Err(NodeError::Envelope(e))
    }

    /// A batch of envelopes (a pull from the gateway), each through the same pipeline
    /// as [`Inbound::receive_envelope`], with the same outcome per envelope, in order —
    /// but opened on all cores and stored with their audit entries in one commit.
    ///
    /// If the commit fails (queue or disk full), the envelopes are stored one by one as
    /// before, and the first that cannot be stored ends the batch: it and every later
    /// one come back as a transient error, so the caller leaves them queued upstream
    /// and per-sender order holds.
    pub async fn receive_batch(&self, envelopes: Vec<Vec<u8>>) -> Vec<Result<Received, NodeError>> {
        if !self.base.life.accepting() {
            return envelopes
                .iter()
                .map(|_| {
                    Err(NodeError::NotReady(
                        "the store is recovering or not writable",
                    ))
                })
                .collect();
        }
        let n = envelopes.len();
        let opened = open_all(&self.base, envelopes).await;
        let mut out: Vec<Option<Result<Received, NodeError>>> = Vec::with_capacity(opened.len());
        let mut pending: Vec<(usize, Opened, Stored)> = Vec::new();
        // One time for the batch: the inbox lists by it, so the batch keeps its order.
        let received_at_ms = self.base.now_ms();
        for (i, (bytes, r)) in opened.into_iter().enumerate() {
            let Some(r) = r else {
                // Not processed: no later envelope may be stored before it.
                break;
            };
            match r.map_err(|e| (bytes, e)) {
                Err((bytes, e)) => out.push(Some(self.refused(&bytes, e).await)),
                Ok(o) => match stored_message(&self.base, &o, received_at_ms) {
                    Err(e) => out.push(Some(Err(e))),
                    Ok(stored) => {
                        pending.push((i, o, stored));
                        out.push(None);
                    }
                },
            }
        }
        let slots: Vec<usize> = pending.iter().map(|(i, _, _)| *i).collect();
        let items: Vec<(Opened, Stored)> = pending.into_iter().map(|(_, o, s)| (o, s)).collect();
        let stored = self.store_with_entries(items).await;
        if stored.iter().all(|(_, r)| r.is_ok()) {
            for (i, (_, r)) in slots.iter().zip(stored) {
                out[*i] = Some(r.map_err(NodeError::Store));
            }
        } else {
            // The commit failed (queue or disk full): one by one, in order; the first
            // failure ends the batch.
            let mut stop = false;
            for (i, (o, _)) in slots.into_iter().zip(stored) {
                out[i] = Some(if stop {
                    Err(NodeError::NotReady(
                        "an earlier envelope of the batch could not be stored",
                    ))
                } else {
                    // Made again (the batch took the first): rare, and cheap.
                    let r = match stored_message(&self.base, &o, received_at_ms) {
                        Ok(stored) => self.store_one(o, stored).await,
                        Err(e) => Err(e),
                    };
                    stop = r.is_err();
                    r
                });
            }
        }
        out.resize_with(n, || None);
        out.into_iter()
            .map(|r| r.unwrap_or(Err(NodeError::NotReady("envelope not processed"))))
            .collect()
    }

    /// Metrics for an envelope that is now durable.
    fn stored(&self, o: &Opened, queue: &str) {
        EnvelopeReceived {
            result: "accepted",
            sender: &o.sender_node_id,
            message_id: &o.message_id,
        }
        .emit(&self.base.metrics);
        if queue == KV_STATE {
            return;
        }
        MessageEvent {
            queue,
            event: "enqueued",
            peer: &o.sender_node_id,
            message_id: &o.message_id,
            reason: None,
        }
        .emit(&self.base.metrics);
    }
}

/// What the node keeps for an opened envelope, deduplicated until its expiry (plus the
/// skew on both sides): for the inbox or tasks queue the decrypted payload plus who sent
/// it (`received_at_ms` orders the inbox's listing, `Inbox::list`: one value per batch),
/// for a `DESIRED_STATE` the document.
fn stored_message(base: &Base, opened: &Opened, received_at_ms: u64) -> Result<Stored, NodeError> {
    let dedup_until_ms = opened.expires_at_ms.saturating_add(2 * base.skew_ms());
    if opened.payload_type == DESIRED_STATE {
        let desired = super::state::desired_from_payload(&opened.plaintext)?;
        return Ok(Stored::Desired(desired, dedup_until_ms));
    }
    // Parsed, not only checked: what is stored must read back (`InboxRecord::from_bytes`
    // refuses what a syntax check lets through: a lone surrogate escape, a number out of
    // range).
    let payload: Value = serde_json::from_slice(&opened.plaintext)
        .map_err(|_| NodeError::bad_request("payload is not JSON"))?;
    let body = InboxRecord::new(opened, payload, received_at_ms).to_bytes();
    let queue = if opened.payload_type == "TASK_REQUEST" {
        Q_TASKS
    } else {
        Q_INBOX
    };
    let msg = NewMessage {
        queue: queue.to_string(),
        peer: opened.sender_node_id.clone(),
        message_id: opened.message_id.clone(),
        payload_type: opened.payload_type.clone(),
        priority: opened.priority.min(255) as u8,
        created_at_ms: opened.created_at_ms,
        expires_at_ms: opened.expires_at_ms,
        body,
        max_attempts: None,
        dedup_until_ms: Some(dedup_until_ms),
    };
    Ok(Stored::Queued(msg, queue))
}
