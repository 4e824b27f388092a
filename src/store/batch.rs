//! [`Batch`]: several changes made durable together (one request, applied all or
//! none inside one group commit) — an audit entry and the tool result it vouches for,
//! an outbox message and the idempotency record of the request that queued it, the
//! acks and rejections of one upload. Callers say what they change; the store's
//! internal operations stay private.

use super::ops::{OpOutcome, WriteOp};
use super::submitted::Submitted;
use super::types::{AckOutcome, EnqueueOutcome, NewMessage};
use super::Store;

/// Changes to commit atomically; see the module documentation.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Batch {
    ops: Vec<WriteOp>,
}

/// What a committed [`Batch`] did, in the order the changes were added.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Committed {
    /// One per [`Batch::enqueue`].
    pub enqueued: Vec<EnqueueOutcome>,
    /// Every id [`Batch::ack`] or [`Batch::reject`] named, and whether it was still
    /// queued.
    pub acked: Vec<AckOutcome>,
}

impl Committed {
    /// An enqueue of the batch found its id already known (nothing of it was written).
    pub fn had_duplicate(&self) -> bool {
        self.enqueued
            .iter()
            .any(|e| matches!(e, EnqueueOutcome::Duplicate))
    }

    /// Ids that left their queue with this batch.
    pub fn removed(&self) -> impl Iterator<Item = &str> {
        self.acked
            .iter()
            .filter(|a| a.was_stored)
            .map(|a| a.message_id.as_str())
    }
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Add every change of `other` after the ones already here.
    pub fn append(&mut self, other: Batch) -> &mut Self {
        self.ops.extend(other.ops);
        self
    }

    /// Queue a message (a known id is [`EnqueueOutcome::Duplicate`], not an error).
    pub fn enqueue(&mut self, msg: NewMessage) -> &mut Self {
        self.ops.push(WriteOp::Enqueue(msg));
        self
    }

    /// Remove delivered messages, leaving a `delivered` tombstone for status queries.
    pub fn ack(&mut self, queue: &str, peer: &str, ids: Vec<String>, now_ms: u64) -> &mut Self {
        if !ids.is_empty() {
            self.ops.push(WriteOp::Ack {
                queue: queue.into(),
                peer: peer.into(),
                ids,
                now_ms,
            });
        }
        self
    }

    /// Remove a message its recipient refused, recording why (status `rejected`).
    pub fn reject(
        &mut self,
        queue: &str,
        peer: &str,
        message_id: &str,
        reason: &str,
        now_ms: u64,
    ) -> &mut Self {
        self.ack(queue, peer, vec![message_id.to_string()], now_ms);
        self.ops.push(WriteOp::Reject {
            queue: queue.into(),
            peer: peer.into(),
            message_id: message_id.into(),
            reason: reason.into(),
            now_ms,
        });
        self
    }

    /// Remember `id` in the dedup window of `scope` until `keep_until_ms`.
    pub fn remember(&mut self, scope: &str, id: &str, keep_until_ms: u64) -> &mut Self {
        self.ops.push(WriteOp::Remember {
            scope: scope.into(),
            id: id.into(),
            keep_until_ms,
        });
        self
    }

    pub fn kv_put(&mut self, ns: &str, key: &str, value: Vec<u8>) -> &mut Self {
        self.ops.push(WriteOp::KvPut {
            ns: ns.into(),
            key: key.into(),
            value,
        });
        self
    }

    pub fn kv_delete(&mut self, ns: &str, key: &str) -> &mut Self {
        self.ops.push(WriteOp::KvDelete {
            ns: ns.into(),
            key: key.into(),
        });
        self
    }

    /// Put `value` in `ns` under the number after the highest one it holds
    /// ([`crate::store::seq_key`]; 0 when it holds none), picked inside the group commit,
    /// under the engine's write lock: two writers, in one process or two on the same
    /// store (the gateway and an `outpost` command next to it), never pick the same key.
    /// A number whose entry was deleted may be picked again once it is the highest.
    pub fn kv_put_next(&mut self, ns: &str, value: Vec<u8>) -> &mut Self {
        self.ops.push(WriteOp::KvPutNext {
            ns: ns.into(),
            value,
        });
        self
    }

    /// Store a tool result under `key` until `keep_until_ms` (job-id idempotency).
    pub fn result_put(&mut self, key: &str, result: Vec<u8>, keep_until_ms: u64) -> &mut Self {
        self.ops.push(WriteOp::ResultPut {
            job_id: key.into(),
            result,
            keep_until_ms,
        });
        self
    }

    /// Append the audit entry at `index` (the log's next index).
    pub fn audit_append(&mut self, index: u64, entry: Vec<u8>) -> &mut Self {
        self.ops.push(WriteOp::AuditAppend { index, entry });
        self
    }
}

fn committed(outcomes: Vec<OpOutcome>) -> Result<Committed, super::StoreError> {
    let mut c = Committed::default();
    for o in outcomes {
        match o {
            OpOutcome::Enqueued(e) => c.enqueued.push(e),
            OpOutcome::Acked(a) => c.acked.extend(a),
            _ => {}
        }
    }
    Ok(c)
}

impl Store {
    /// Make every change of `batch` durable together: the handle resolves once the
    /// group commit holding it is on stable storage, or with the error that undid all
    /// of it.
    pub fn commit(&self, batch: Batch) -> Submitted<Committed> {
        self.submit(batch.ops, committed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reject_is_an_ack_plus_the_reason_and_empty_acks_vanish() {
        let mut b = Batch::new();
        b.ack("q", "p", vec![], 1).reject("q", "p", "m1", "bad", 2);
        assert_eq!(b.ops.len(), 2);
        assert!(matches!(&b.ops[0], WriteOp::Ack { ids, .. } if ids == &["m1".to_string()]));
        assert!(matches!(&b.ops[1], WriteOp::Reject { reason, .. } if reason == "bad"));
    }

    #[test]
    fn committed_sums_outcomes_in_order() {
        let c = committed(vec![
            OpOutcome::Done,
            OpOutcome::Enqueued(EnqueueOutcome::Queued { seq: 1 }),
            OpOutcome::Acked(vec![
                AckOutcome {
                    message_id: "a".into(),
                    was_stored: true,
                },
                AckOutcome {
                    message_id: "b".into(),
                    was_stored: false,
                },
            ]),
            OpOutcome::Enqueued(EnqueueOutcome::Duplicate),
        ])
        .unwrap();
        assert!(c.had_duplicate());
        assert_eq!(c.removed().collect::<Vec<_>>(), vec!["a"]);
    }
}
