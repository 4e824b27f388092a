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
use crate::envelope::{open, OpenContext, OpenError, Opened, PrunedAhead};
use crate::store::{Batch, EnqueueOutcome, NewMessage, StoreError};
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
    /// One lock per message id being stored: the replay check and the commit of an
    /// envelope with its audit entry happen under it, so the same envelope arriving
    /// twice at once (pushed and pulled, or twice in one batch) is stored and audited
    /// once.
    storing: crate::keyed_lock::KeyedLocks,
}

impl Inbound {
    pub(super) fn new(base: Arc<Base>, recorder: Arc<Recorder>) -> Self {
        Self {
            base,
            recorder,
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
        let (msg, queue) = stored_message(&self.base, &opened, self.base.now_ms())?;
        self.store_one(opened, msg, queue).await
    }

    /// Store one opened envelope with its audit entry (its own commit), then count it.
    async fn store_one(
        &self,
        opened: Opened,
        msg: NewMessage,
        queue: &'static str,
    ) -> Result<Received, NodeError> {
        let mut out = self.store_with_entries(vec![(opened, msg, queue)]).await;
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
    /// duplicate and writes nothing. One outcome per item, in order; on an error every
    /// new envelope of the commit gets it (nothing of it was stored).
    async fn store_with_entries(
        &self,
        items: Vec<(Opened, NewMessage, &'static str)>,
    ) -> Vec<(Opened, Result<Received, StoreError>)> {
        let mut ids: Vec<String> = items.iter().map(|(o, _, _)| o.message_id.clone()).collect();
        ids.sort();
        ids.dedup();
        let mut held = Vec::with_capacity(ids.len());
        for id in &ids {
            held.push(self.storing.lock(id).await);
        }
        let mut fresh = std::collections::HashSet::new();
        let mut batch = Batch::new();
        let mut new_ones = Vec::new();
        for (i, (o, msg, _)) in items.iter().enumerate() {
            let known = [Q_INBOX, Q_TASKS]
                .iter()
                .any(|q| self.base.store.seen(q, &o.message_id).unwrap_or(false));
            if !known && fresh.insert(o.message_id.as_str()) {
                batch.enqueue(msg.clone());
                new_ones.push(i);
            }
        }
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
        drop(held);
        let mut outcome: Vec<Result<Received, StoreError>> = items
            .iter()
            .map(|(o, _, _)| {
                Ok(Received::Duplicate {
                    message_id: o.message_id.clone(),
                })
            })
            .collect();
        match committed {
            Ok(done) => {
                for (&i, e) in new_ones.iter().zip(&done.enqueued) {
                    let (o, _, queue) = &items[i];
                    if matches!(e, EnqueueOutcome::Duplicate) {
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
                if new_ones.iter().any(|&i| items[i].2 == Q_TASKS) {
                    self.tasks_waiting.notify_one();
                }
            }
            Err(e) => {
                for &i in &new_ones {
                    outcome[i] = Err(e.clone());
                }
            }
        }
        items
            .into_iter()
            .zip(outcome)
            .map(|((o, _, _), r)| (o, r))
            .collect()
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
        let mut pending: Vec<(usize, Opened, NewMessage, &'static str)> = Vec::new();
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
                    Ok((msg, queue)) => {
                        pending.push((i, o, msg, queue));
                        out.push(None);
                    }
                },
            }
        }
        let slots: Vec<usize> = pending.iter().map(|(i, _, _, _)| *i).collect();
        let items: Vec<(Opened, NewMessage, &'static str)> = pending
            .into_iter()
            .map(|(_, o, msg, q)| (o, msg, q))
            .collect();
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
                        Ok((msg, queue)) => self.store_one(o, msg, queue).await,
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

/// What the inbox or tasks queue keeps for an opened envelope: the decrypted payload
/// plus who sent it, deduplicated until its expiry (plus the skew on both sides).
/// `received_at_ms` orders the inbox's listing (`Inbox::list`): one value per batch.
fn stored_message(
    base: &Base,
    opened: &Opened,
    received_at_ms: u64,
) -> Result<(NewMessage, &'static str), NodeError> {
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
        dedup_until_ms: Some(opened.expires_at_ms.saturating_add(2 * base.skew_ms())),
    };
    Ok((msg, queue))
}

/// Below this many envelopes a batch is opened on the calling thread.
const PARALLEL_FROM: usize = 8;

/// Open every envelope (signature, recipient, expiry, replay, decrypt) on all cores
/// ([`crate::daemon::spread`]); results in the input's order, each with its bytes.
/// `None` marks an envelope that was not processed (its worker failed): the caller must
/// not go past it.
async fn open_all(
    base: &Arc<Base>,
    envelopes: Vec<Vec<u8>>,
) -> Vec<(Vec<u8>, Option<Result<Opened, OpenError>>)> {
    let base = base.clone();
    let (bytes, opened) =
        crate::daemon::spread::on_all_cores(envelopes, PARALLEL_FROM, move |b: &Vec<u8>| {
            open_envelope(&base, b)
        })
        .await;
    bytes.into_iter().zip(opened).collect()
}

/// The security pipeline for one envelope (pure CPU plus dedup reads): callable from
/// any thread, so a batch can be opened on all cores.
pub(super) fn open_envelope(base: &Base, bytes: &[u8]) -> Result<Opened, OpenError> {
    let now_ms = base.now_ms();
    let (keys, previous) = (base.keys.current(), base.keys.previous(now_ms));
    let attempt = |trust: &crate::envelope::TrustStore| {
        let ctx = OpenContext {
            me: &base.cfg.node_id,
            keys: &keys,
            previous_keys: previous.as_deref(),
            trust,
            now_ms,
            skew_ms: base.skew_ms(),
            max_bytes: base.cfg.queue.max_message_bytes as usize,
            max_ttl_ms: base.cfg.queue.max_ttl_s * 1000,
            pruned_ahead: pruned_ahead(base),
        };
        // Dedup scopes are the receiving queues; ids are unique per sender and in
        // practice globally (UUIDv7/ULID), so either queue having it is a replay.
        let seen = |_sender: &str, id: &str| {
            [Q_INBOX, Q_TASKS]
                .iter()
                .any(|q| base.store.seen(q, id).unwrap_or(false))
        };
        open(bytes, &ctx, &seen)
    };
    let opened = match attempt(&base.trust()) {
        Err(OpenError::UnknownSender) => {
            base.recheck_trust();
            attempt(&base.trust())
        }
        other => other,
    }?;
    learn_time(base, &opened);
    // Before it is stored: the commit that remembers its id also persists this.
    base.store.note_seen_created(opened.created_at_ms);
    Ok(opened)
}

/// The window of replay memory the node may have lost while its time was ahead, if its
/// time was ever moved back (RELIABILITY F2; `store::time`).
fn pruned_ahead(base: &Base) -> Option<PrunedAhead> {
    base.store.time_correction().map(|c| PrunedAhead {
        corrected_at_ms: c.corrected_at_ms,
        high_water_ms: c.high_water_ms,
        seen_created_max_ms: c.seen_created_max_ms,
    })
}

/// An authenticated envelope sealed by this node's own gateway was created no later
/// than now. After a boot without a real-time clock the node's time resumes from the
/// persisted floor and runs behind by the downtime until NTP answers; while its clock
/// is that wrong, the envelope's `created_at` moves it forward, never back
/// (RELIABILITY F6; `store::time`). Only the gateway's word counts (the node already
/// trusts it for trust documents and revocations), only within what `open` accepted
/// (`created_at` at most the clock skew ahead, so a gateway whose own clock is far
/// ahead cannot drag its nodes with it), and never while the node's clock is sane.
fn learn_time(base: &Base, opened: &Opened) {
    let Some(up) = base.cfg.upstream.as_ref() else {
        return;
    };
    if opened.sender_node_id != up.gateway_id {
        return;
    }
    let moved = base.store.time_not_before(opened.created_at_ms);
    if moved >= 1_000 {
        tracing::info!(
            event = "time_moved_forward",
            by_ms = moved,
            source = %up.gateway_id,
            detail = "the node's clock was behind a signed timestamp from its gateway"
        );
    }
}

/// Best-effort sender and id of a refused envelope, for logs only (never trusted).
pub(super) fn peek_ids(bytes: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let s = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .map(|x| x.chars().take(100).collect())
            .unwrap_or_default()
    };
    (s("sender_node_id"), s("message_id"))
}
