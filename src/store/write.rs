//! Write calls of [`Store`]: each submits one request (usually one [`WriteOp`]) to the
//! writer thread and returns a [`Submitted`] handle that resolves once the group holding
//! it is durable.

use super::error::StoreError;
use super::ops::{OpOutcome, WriteOp};
use super::submitted::Submitted;
use super::types::{AckOutcome, EnqueueOutcome, ExpiredMessage, NewMessage};
use super::Store;

fn unexpected<T>(what: &str) -> Result<T, StoreError> {
    Err(StoreError::Engine(format!(
        "writer answered {what} unexpectedly"
    )))
}

impl Store {
    /// Applies `ops` atomically in one request (all or none) inside the next group
    /// commit. Use it to make e.g. an audit append and a tool result one transaction.
    #[cfg(test)]
    pub(crate) fn write(&self, ops: Vec<WriteOp>) -> Submitted<Vec<OpOutcome>> {
        self.submit(ops, Ok)
    }

    pub fn enqueue(&self, msg: NewMessage) -> Submitted<EnqueueOutcome> {
        self.submit(vec![WriteOp::Enqueue(msg)], |o| {
            match o.into_iter().next() {
                Some(OpOutcome::Enqueued(e)) => Ok(e),
                _ => unexpected("enqueue"),
            }
        })
    }

    /// Marks messages as handed to a transport (status `delivering`); they stay queued.
    pub fn mark_delivering(&self, queue: &str, peer: &str, ids: Vec<String>) -> Submitted<()> {
        self.submit(
            vec![WriteOp::MarkDelivering {
                queue: queue.into(),
                peer: peer.into(),
                ids,
            }],
            |_| Ok(()),
        )
    }

    /// Counts a failed attempt for each id and schedules the next one by
    /// `backoff::delay_ms` with `jitter` in `[-1, 1]`. Returns the ids that ran out of
    /// attempts and moved to the dead-letter queue.
    pub fn record_failure(
        &self,
        queue: &str,
        peer: &str,
        ids: Vec<String>,
        now_ms: u64,
        jitter: f64,
    ) -> Submitted<Vec<String>> {
        self.submit(
            vec![WriteOp::RecordFailure {
                queue: queue.into(),
                peer: peer.into(),
                ids,
                now_ms,
                jitter,
            }],
            |o| match o.into_iter().next() {
                Some(OpOutcome::Dead(d)) => Ok(d),
                _ => unexpected("record_failure"),
            },
        )
    }

    /// Removes delivered messages; leaves a `delivered` tombstone for `status()`.
    pub fn ack(
        &self,
        queue: &str,
        peer: &str,
        ids: Vec<String>,
        now_ms: u64,
    ) -> Submitted<Vec<AckOutcome>> {
        self.submit(
            vec![WriteOp::Ack {
                queue: queue.into(),
                peer: peer.into(),
                ids,
                now_ms,
            }],
            |o| match o.into_iter().next() {
                Some(OpOutcome::Acked(a)) => Ok(a),
                _ => unexpected("ack"),
            },
        )
    }

    /// Removes messages whose `expires_at <= now_ms` (status `expired`, reason
    /// `timeout_in_queue`) and prunes dedup entries, results and tombstones past their
    /// keep-until. Returns what expired, for the event/metric/audit the caller emits.
    pub fn sweep_expired(&self, now_ms: u64) -> Submitted<Vec<ExpiredMessage>> {
        self.submit(
            vec![
                WriteOp::SweepExpired {
                    now_ms,
                    limit: 10_000,
                },
                WriteOp::Prune {
                    now_ms,
                    limit: 10_000,
                },
            ],
            |o| match o.into_iter().next() {
                Some(OpOutcome::Expired(e)) => Ok(e),
                _ => unexpected("sweep"),
            },
        )
    }

    /// Moves a dead letter back to its original place in its queue with attempts reset.
    pub fn requeue(&self, message_id: &str) -> Submitted<()> {
        let now_ms = self.now_ms();
        self.submit(
            vec![WriteOp::Requeue {
                message_id: message_id.into(),
                now_ms,
            }],
            |_| Ok(()),
        )
    }

    /// Deletes up to 10,000 dead letters per call; returns how many.
    pub fn purge_dead(&self) -> Submitted<usize> {
        self.submit(vec![WriteOp::PurgeDead { limit: 10_000 }], |o| {
            match o.into_iter().next() {
                Some(OpOutcome::Count(n)) => Ok(n),
                _ => unexpected("purge"),
            }
        })
    }

    /// Records a `rejected` status for a message that was refused (kept for status()).
    pub fn reject(&self, queue: &str, peer: &str, message_id: &str, reason: &str) -> Submitted<()> {
        let now_ms = self.now_ms();
        self.submit(
            vec![WriteOp::Reject {
                queue: queue.into(),
                peer: peer.into(),
                message_id: message_id.into(),
                reason: reason.into(),
                now_ms,
            }],
            |_| Ok(()),
        )
    }

    /// Remembers `id` in the dedup window of `scope` until `keep_until_ms` (durable).
    pub fn remember(&self, scope: &str, id: &str, keep_until_ms: u64) -> Submitted<()> {
        self.submit(
            vec![WriteOp::Remember {
                scope: scope.into(),
                id: id.into(),
                keep_until_ms,
            }],
            |_| Ok(()),
        )
    }

    pub fn kv_put(&self, ns: &str, key: &str, value: Vec<u8>) -> Submitted<()> {
        self.submit(
            vec![WriteOp::KvPut {
                ns: ns.into(),
                key: key.into(),
                value,
            }],
            |_| Ok(()),
        )
    }

    pub fn kv_delete(&self, ns: &str, key: &str) -> Submitted<()> {
        self.submit(
            vec![WriteOp::KvDelete {
                ns: ns.into(),
                key: key.into(),
            }],
            |_| Ok(()),
        )
    }

    /// Stores a tool result for `job_id` idempotency until `keep_until_ms`.
    pub fn result_put(&self, job_id: &str, result: Vec<u8>, keep_until_ms: u64) -> Submitted<()> {
        self.submit(
            vec![WriteOp::ResultPut {
                job_id: job_id.into(),
                result,
                keep_until_ms,
            }],
            |_| Ok(()),
        )
    }

    /// Appends an audit entry at `index`, which must equal the current length.
    pub fn audit_append(&self, index: u64, entry: Vec<u8>) -> Submitted<()> {
        self.submit(vec![WriteOp::AuditAppend { index, entry }], |_| Ok(()))
    }

    pub fn checkpoint_put(&self, size: u64, note: String) -> Submitted<()> {
        self.submit(vec![WriteOp::CheckpointPut { size, note }], |_| Ok(()))
    }

    /// Durably advances the time floor to `now_ms()`. Every commit carries the floor
    /// anyway; the daemons call this only once the floor is
    /// [`super::FLOOR_EVERY_MS`] stale ([`super::Store::time_floor_lag_ms`]), so an
    /// idle store still remembers roughly how late it has been.
    pub fn touch_time(&self) -> Submitted<()> {
        self.submit(vec![WriteOp::Touch], |_| Ok(()))
    }
}
