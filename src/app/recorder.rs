//! Audit records for what the node does, written through the store's group commit:
//! the entry (and, for a successful tool call, its stored result) go in one atomic
//! request, and the caller waits for durability without holding the audit lock.

use std::sync::{Arc, Mutex};

use super::base::{Base, KV_META};
use super::error::NodeError;
use super::refusals::RefusalBudget;
use super::store_audit::StoreAudit;
use crate::audit::{leaf_hash, to_hex, AuditEvent, AuditLog, AuditOutcome, AuditRecord};
use crate::store::{Batch, Committed, StoreError};

use super::calls::{Evidence, StoredResult, ToolCallDone, RESULT_KEEP_MS};

/// The node's audit log and what may be written to it: tool calls, envelopes,
/// expiries, overflows, refusals (within their budget), checkpoints.
pub struct Recorder {
    base: Arc<Base>,
    log: Arc<AuditLog<StoreAudit>>,
    /// What refused requests may cost in audit entries.
    refusals: Mutex<RefusalBudget>,
    /// Audit appends failed since the last one that succeeded (one log line an episode).
    append_failures: Mutex<u64>,
}

impl Recorder {
    pub(super) fn open(base: Arc<Base>) -> anyhow::Result<Self> {
        let log = Arc::new(AuditLog::open(StoreAudit::new(base.store.clone()))?);
        let refusals = Mutex::new(RefusalBudget::new(base.life.started_ms));
        Ok(Self {
            base,
            log,
            refusals,
            append_failures: Mutex::new(0),
        })
    }

    /// The log itself (the sync link uploads from it).
    pub fn log(&self) -> &Arc<AuditLog<StoreAudit>> {
        &self.log
    }

    /// Entries in the log (durable frontier).
    pub fn size(&self) -> u64 {
        self.log.size()
    }

    /// How much of the log the gateway confirmed (0 before the first sync).
    pub fn synced_size(&self) -> u64 {
        self.base
            .store
            .kv_get(KV_META, "audit_synced_size")
            .ok()
            .flatten()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// Sign and store a checkpoint if the log grew since the last one (blocking work,
    /// off the runtime threads).
    pub async fn checkpoint(&self) {
        let log = self.log.clone();
        let base = self.base.clone();
        let res = tokio::task::spawn_blocking(move || {
            let size = log.size();
            let latest = log.latest_checkpoint().ok().flatten().map(|(s, _)| s);
            if size == 0 || latest == Some(size) {
                return Ok(());
            }
            log.checkpoint(base.keys.current().signing_key(), &base.cfg.node_id)
                .map(|_| ())
        })
        .await;
        match res {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(event = "audit_checkpoint_failed", error = %e),
            Err(e) => tracing::warn!(event = "audit_checkpoint_failed", error = %e),
        }
    }

    /// Append `record` plus what `extra` adds to the batch, atomically; returns
    /// `(index, leaf_hash_hex)`.
    async fn append_durable(
        &self,
        record: AuditRecord,
        extra: impl FnOnce(u64, &str, &mut Batch),
    ) -> Result<(u64, String), StoreError> {
        self.append_all(vec![record], extra)
            .await
            .map(|(first, _)| first)
    }

    /// Append `records` (in order, one batch) plus what `extra` adds; returns the first
    /// entry's `(index, leaf_hash_hex)` and what the batch did.
    async fn append_all(
        &self,
        records: Vec<AuditRecord>,
        extra: impl FnOnce(u64, &str, &mut Batch),
    ) -> Result<((u64, String), Committed), StoreError> {
        let now = self.base.now_ms();
        let store = &self.base.store;
        let submitted = self.log.append_submit(records, now, |first, entries| {
            let leaf = entries
                .first()
                .map(|e| to_hex(&leaf_hash(e)))
                .unwrap_or_default();
            let mut batch = Batch::new();
            for (i, entry) in entries.into_iter().enumerate() {
                batch.audit_append(first + i as u64, entry);
            }
            extra(first, &leaf, &mut batch);
            store.commit(batch)
        });
        let (hashes, handle, ticket) = match submitted {
            Ok(x) => x,
            Err(e) => return Err(StoreError::Corrupt(e.to_string())),
        };
        // The outcome is reported to the log by a task of its own, so that a caller that
        // goes away (a client that hung up) cannot leave the batch unconfirmed.
        let audit = self.log.clone();
        let settled = tokio::spawn(async move {
            let r = handle.await;
            match &r {
                Ok(_) => audit.confirm(ticket),
                Err(_) => audit.mark_failed(ticket),
            }
            r
        });
        let out = settled.await;
        self.note_append(out.as_ref().map(|r| r.is_ok()).unwrap_or(false));
        match out {
            Ok(Ok(done)) => {
                let (index, leaf) = hashes[0];
                Ok(((index, to_hex(&leaf)), done))
            }
            Ok(Err(e)) => Err(e),
            Err(e) => Err(StoreError::Engine(format!("audit append task: {e}"))),
        }
    }

    /// A successful tool call: audit entry and (under `result_key`, when it is kept for
    /// `job_id` idempotency) the stored result in one durable batch.
    #[allow(clippy::too_many_arguments)]
    pub async fn record_tool_success(
        &self,
        result_key: Option<&str>,
        actor: &str,
        args_sha: &str,
        result_sha: &str,
        mut done: ToolCallDone,
    ) -> Result<ToolCallDone, NodeError> {
        let mut rec = AuditRecord::new(AuditEvent::ToolCall, AuditOutcome::Ok);
        rec.job_id = Some(done.job_id.clone());
        rec.tool_name = Some(done.tool_name.clone());
        rec.actor = Some(actor.into());
        rec.args_sha256 = Some(args_sha.into());
        rec.result_sha256 = Some(result_sha.into());
        // The answer carries the entry's index and leaf hash, known only under the
        // audit lock: fill them in there, and store the result in the same batch.
        let keep = self.base.now_ms() + RESULT_KEEP_MS;
        self.append_durable(rec, |index, leaf, batch| {
            done.evidence = Evidence {
                audit_index: index,
                audit_leaf_hash: leaf.to_string(),
            };
            let Some(result_key) = result_key else {
                return;
            };
            let stored = StoredResult {
                subject: actor.to_string(),
                tool_name: done.tool_name.clone(),
                args_sha256: args_sha.to_string(),
                done: done.clone(),
            };
            batch.result_put(
                result_key,
                serde_json::to_vec(&stored).unwrap_or_default(),
                keep,
            );
        })
        .await
        .map_err(NodeError::Store)?;
        Ok(done)
    }

    /// A refused, failed or timed-out call. Best effort: the refusal is answered even
    /// if the disk is full (see [`Recorder::note_append`] for the log line). Refusals go
    /// through the refusal budget ([`super::refusals`]).
    pub async fn audit_call_outcome(
        &self,
        job_id: &str,
        tool: &str,
        actor: &str,
        args_sha: &str,
        outcome: AuditOutcome,
        detail: &str,
    ) {
        let mut rec = AuditRecord::new(AuditEvent::ToolCall, outcome);
        rec.job_id = Some(job_id.into());
        rec.tool_name = Some(tool.into());
        rec.actor = Some(actor.into());
        rec.args_sha256 = Some(args_sha.into());
        rec.detail = Some(detail.into());
        if outcome == AuditOutcome::Refused && !self.admit_refusal(detail) {
            return;
        }
        self.append_answered_anyway(rec).await;
    }

    /// A write refused for lack of room (queue cap or byte budget / full disk). On a full
    /// disk this entry may not make it either; the refusal is still answered.
    pub async fn audit_overflow(&self, e: &StoreError, message_id: &str, peer: &str) {
        let detail = match e {
            StoreError::QueueFull { .. } => "queue_full",
            StoreError::StorageFull => "storage_full",
            _ => return,
        };
        self.audit_event(
            AuditEvent::Overflow,
            AuditOutcome::Overflow,
            message_id,
            Some(peer),
            Some(detail),
        )
        .await;
    }

    /// Envelope accepted/rejected, expiry, dead letter, overflow. Rejections and
    /// overflows are refusals: they go through the refusal budget.
    pub async fn audit_event(
        &self,
        event: AuditEvent,
        outcome: AuditOutcome,
        message_id: &str,
        actor: Option<&str>,
        detail: Option<&str>,
    ) {
        let mut rec = AuditRecord::new(event, outcome);
        rec.message_id = (!message_id.is_empty()).then(|| message_id.to_string());
        rec.actor = actor.filter(|a| !a.is_empty()).map(str::to_string);
        rec.detail = detail.map(str::to_string);
        let refusal = matches!(event, AuditEvent::EnvelopeRejected | AuditEvent::Overflow);
        if refusal && !self.admit_refusal(&format!("{}:{}", event.as_str(), detail.unwrap_or(""))) {
            return;
        }
        self.append_answered_anyway(rec).await;
    }

    /// Envelopes to store (`enqueues`, one [`Batch::enqueue`] each) and their
    /// `envelope_accepted` entries (`accepted`: message id, sender, payload type, in the
    /// same order), committed together: the envelopes and their entries are durable
    /// together or not at all, so no envelope is ever acknowledged without its entry —
    /// not on a full disk, not across a crash. The caller makes sure no enqueue of the
    /// batch is a duplicate (an entry would then vouch for an envelope not stored).
    pub async fn commit_accepted(
        &self,
        enqueues: Batch,
        accepted: &[(&str, &str, &str)],
    ) -> Result<Committed, StoreError> {
        if accepted.is_empty() {
            return self.base.store.commit(enqueues).await;
        }
        let records = accepted
            .iter()
            .map(|(message_id, sender, payload_type)| {
                let mut rec = AuditRecord::new(AuditEvent::EnvelopeAccepted, AuditOutcome::Ok);
                rec.message_id = Some(message_id.to_string());
                rec.actor = Some(sender.to_string());
                rec.detail = Some(payload_type.to_string());
                rec
            })
            .collect();
        self.append_all(records, |_, _, batch| {
            batch.append(enqueues);
        })
        .await
        .map(|(_, done)| done)
    }

    /// An entry for something that already happened or is answered whatever becomes of
    /// the entry (a refusal, an expiry, a failed call). If it cannot be stored it is not
    /// dropped silently: the failure is logged (once an episode, [`Self::note_append`])
    /// and counted in `outpost_audit_append_failures_total`.
    async fn append_answered_anyway(&self, rec: AuditRecord) {
        if self.append_durable(rec, |_, _, _| {}).await.is_err() {
            self.base.metrics.audit_append_failures_total.inc(&[]);
        }
    }

    fn admit_refusal(&self, reason: &str) -> bool {
        let now = self.base.now_ms();
        let mut b = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        b.admit(now, reason)
    }

    /// Writes the summary of refusals over the budget when one is due (every minute, from
    /// the sweeper) or `force` (at shutdown). A summary that cannot be written keeps its
    /// counts for the next one.
    pub async fn flush_refusal_summary(&self, force: bool) {
        let now = self.base.now_ms();
        let due = {
            let mut b = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
            b.take_summary(now, force)
        };
        let Some(counts) = due else { return };
        let mut rec = AuditRecord::new(AuditEvent::RefusalSummary, AuditOutcome::Refused);
        rec.detail = Some(super::refusals::summary_detail(&counts));
        if self.append_durable(rec, |_, _, _| {}).await.is_err() {
            let mut b = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
            b.restore(counts);
        }
    }

    /// Logs audit append failures once per episode (the journal usually shares the full
    /// disk): the first failure, then nothing until an append succeeds again, which logs
    /// how many failed in between.
    fn note_append(&self, ok: bool) {
        let mut ep = self
            .append_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match (ok, *ep) {
            (true, 0) => {}
            (true, failed) => {
                tracing::warn!(
                    event = "audit_append_recovered",
                    failed,
                    "audit appends work again after {failed} failed"
                );
                *ep = 0;
            }
            (false, 0) => {
                tracing::error!(event = "audit_append_failed", "an audit entry could not be stored (disk full or failing?); the request was answered with an error or without its entry; further failures are counted, not logged, until an append succeeds");
                *ep = 1;
            }
            (false, n) => *ep = n + 1,
        }
    }
}
