//! Queue semantics as write operations, evaluated by the writer inside one group.
//!
//! Every op reads through the request's overlay ([`Tx`]), so checks (cap, budget,
//! duplicates, audit index) see the writes of earlier requests in the same group.
//!
//! This file holds the ops' vocabulary ([`WriteOp`], [`OpOutcome`]) and [`apply`], which
//! runs the small ones inline; [`queue`] and [`sweep`] hold the larger ones, and
//! [`books`] the bookkeeping they share (counters, totals, tombstones, quarantine).

mod books;
mod queue;
mod sweep;

use crate::store::codec::*;
use crate::store::error::StoreError;
use crate::store::records::*;
use crate::store::tx::Tx;
use crate::store::types::*;
use books::*;

pub use books::{REASON_MAX_ATTEMPTS, REASON_TIMEOUT};

/// One durable change. Public so a caller can put several (an audit append and a tool
/// result) into ONE atomic request with [`super::Store::write`].
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    Enqueue(NewMessage),
    MarkDelivering {
        queue: String,
        peer: String,
        ids: Vec<String>,
    },
    RecordFailure {
        queue: String,
        peer: String,
        ids: Vec<String>,
        now_ms: u64,
        jitter: f64,
    },
    Ack {
        queue: String,
        peer: String,
        ids: Vec<String>,
        now_ms: u64,
    },
    /// Removes up to `limit` messages with `expires_at <= now_ms`.
    SweepExpired {
        now_ms: u64,
        limit: usize,
    },
    /// Prunes dedup entries, results and status tombstones whose keep-until passed.
    Prune {
        now_ms: u64,
        limit: usize,
    },
    Requeue {
        message_id: String,
        now_ms: u64,
    },
    PurgeDead {
        limit: usize,
    },
    Reject {
        queue: String,
        peer: String,
        message_id: String,
        reason: String,
        now_ms: u64,
    },
    Remember {
        scope: String,
        id: String,
        keep_until_ms: u64,
    },
    KvPut {
        ns: String,
        key: String,
        value: Vec<u8>,
    },
    KvDelete {
        ns: String,
        key: String,
    },
    /// Put `value` under the namespace's next number ([`super::Batch::kv_put_next`]).
    KvPutNext {
        ns: String,
        value: Vec<u8>,
    },
    ResultPut {
        job_id: String,
        result: Vec<u8>,
        keep_until_ms: u64,
    },
    AuditAppend {
        index: u64,
        entry: Vec<u8>,
    },
    CheckpointPut {
        size: u64,
        note: String,
    },
    /// Moves a damaged record aside (tree + key) so it is reported, not delivered.
    Quarantine {
        tree: u8,
        key: Vec<u8>,
        reason: String,
    },
    /// Writes nothing but the time floor.
    Touch,
    /// Remembers a correction of the store's time (`time::TimeCorrection`); the group
    /// also writes the lowered floor.
    TimeCorrected {
        high_water_ms: u64,
        corrected_at_ms: u64,
        seen_created_max_ms: u64,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum OpOutcome {
    Done,
    Enqueued(EnqueueOutcome),
    Acked(Vec<AckOutcome>),
    /// Ids moved to the dead-letter queue.
    Dead(Vec<String>),
    Expired(Vec<ExpiredMessage>),
    Count(usize),
}

/// Applies one op to the request's view; an error leaves the whole request to be
/// rolled back by the writer.
pub(super) fn apply(tx: &mut Tx<'_>, op: WriteOp) -> Result<OpOutcome, StoreError> {
    match op {
        WriteOp::Enqueue(m) => queue::enqueue(tx, m).map(OpOutcome::Enqueued),
        WriteOp::MarkDelivering { queue, peer, ids } => {
            mark_delivering(tx, &queue, &peer, ids).map(|()| OpOutcome::Done)
        }
        WriteOp::RecordFailure {
            queue,
            peer,
            ids,
            now_ms,
            jitter,
        } => queue::record_failure(tx, &queue, &peer, ids, now_ms, jitter).map(OpOutcome::Dead),
        WriteOp::Ack {
            queue,
            peer,
            ids,
            now_ms,
        } => ack(tx, &queue, &peer, ids, now_ms).map(OpOutcome::Acked),
        WriteOp::SweepExpired { now_ms, limit } => {
            sweep::sweep(tx, now_ms, limit).map(OpOutcome::Expired)
        }
        WriteOp::Prune { now_ms, limit } => sweep::prune(tx, now_ms, limit).map(OpOutcome::Count),
        WriteOp::Requeue { message_id, now_ms } => {
            queue::requeue(tx, &message_id, now_ms).map(|_| OpOutcome::Done)
        }
        WriteOp::PurgeDead { limit } => queue::purge_dead(tx, limit).map(OpOutcome::Count),
        WriteOp::Reject {
            queue,
            peer,
            message_id,
            reason,
            now_ms,
        } => reject(tx, queue, peer, &message_id, reason, now_ms).map(|()| OpOutcome::Done),
        WriteOp::Remember {
            scope,
            id,
            keep_until_ms,
        } => {
            remember(tx, &scope, &id, keep_until_ms)?;
            Ok(OpOutcome::Done)
        }
        WriteOp::KvPut { ns, key, value } => kv_put(tx, &ns, Some(&key), value),
        WriteOp::KvDelete { ns, key } => {
            tx.delete(T_KV, scoped_key(&ns, &key));
            Ok(OpOutcome::Done)
        }
        WriteOp::KvPutNext { ns, value } => kv_put(tx, &ns, None, value),
        WriteOp::ResultPut {
            job_id,
            result,
            keep_until_ms,
        } => result_put(tx, &job_id, &result, keep_until_ms).map(|()| OpOutcome::Done),
        WriteOp::AuditAppend { index, entry } => {
            audit_append(tx, index, entry).map(|()| OpOutcome::Done)
        }
        WriteOp::CheckpointPut { size, note } => {
            tx.put(T_CKPT, size.to_be_bytes().to_vec(), note.into_bytes());
            Ok(OpOutcome::Done)
        }
        WriteOp::Quarantine { tree, key, reason } => {
            quarantine(tx, tree, key, &reason)?;
            Ok(OpOutcome::Done)
        }
        WriteOp::Touch => {
            // A write, so the group commits (and the writer sets the floor it persists).
            tx.put(T_META, META_TIME_FLOOR.to_vec(), u64_val(tx.now_ms));
            Ok(OpOutcome::Done)
        }
        WriteOp::TimeCorrected {
            high_water_ms,
            corrected_at_ms,
            seen_created_max_ms,
        } => {
            time_corrected(tx, high_water_ms, corrected_at_ms, seen_created_max_ms);
            Ok(OpOutcome::Done)
        }
    }
}

/// Put `value` in `ns` under `key`, or under the namespace's next number.
fn kv_put(
    tx: &mut Tx<'_>,
    ns: &str,
    key: Option<&str>,
    value: Vec<u8>,
) -> Result<OpOutcome, StoreError> {
    check_name("kv namespace", ns)?;
    let key = match key {
        Some(k) => scoped_key(ns, k),
        None => next_numbered_key(tx, ns)?,
    };
    tx.put(T_KV, key, value);
    Ok(OpOutcome::Done)
}

/// The key after the highest numbered key of `ns`, committed or written earlier in this
/// group (0 in an empty namespace). Keys that are not [`seq_key`] numbers are passed over.
///
/// The search starts at the number this writer took last in `ns` (the whole namespace
/// only the first time): a namespace that keeps thousands of entries (the trust log) is
/// not read whole for each one added. Numbers only grow at the top, so nothing below
/// that number can be the highest; when it was not kept (its request or group failed)
/// the search finds nothing from it and takes it again, so no number is skipped.
fn next_numbered_key(tx: &mut Tx<'_>, ns: &str) -> Result<Vec<u8>, StoreError> {
    let prefix = scoped_key(ns, "");
    let hint = tx.kv_numbers.get(ns).copied();
    let mut next = hint.unwrap_or(0);
    let start = match hint {
        Some(n) => scoped_key(ns, &seq_key(n)),
        None => prefix.clone(),
    };
    let end = prefix_end(&prefix);
    tx.view.scan(T_KV, &start, end.as_deref(), &mut |k, _| {
        let n = std::str::from_utf8(&k[prefix.len()..])
            .ok()
            .filter(|t| t.len() == 20)
            .and_then(|t| t.parse::<u64>().ok());
        if let Some(n) = n {
            next = next.max(n.saturating_add(1));
        }
        true
    })?;
    // The scan reads committed state; numbers taken earlier in this group are found
    // one by one through the group's overlay.
    loop {
        let key = scoped_key(ns, &seq_key(next));
        if tx.get(T_KV, &key)?.is_none() {
            tx.kv_numbers.insert(ns.to_string(), next);
            return Ok(key);
        }
        next += 1;
    }
}

/// Marks the live messages among `ids` as handed to a transport; ids no longer
/// queued are skipped.
fn mark_delivering(
    tx: &mut Tx<'_>,
    queue: &str,
    peer: &str,
    ids: Vec<String>,
) -> Result<(), StoreError> {
    for id in ids {
        if let Some((key, _, mut rec)) = load_live(tx, queue, peer, &id, true)? {
            rec.state = MessageState::Delivering;
            tx.put(T_MSG, key, rec.encode());
        }
    }
    Ok(())
}

/// Remembers a correction of the store's time: the newest envelope creation time seen
/// when it happened, the floor it lowered from, and when.
fn time_corrected(
    tx: &mut Tx<'_>,
    high_water_ms: u64,
    corrected_at_ms: u64,
    seen_created_max_ms: u64,
) {
    for (key, v) in [
        (META_TIME_SEEN_AT_CORRECTION, seen_created_max_ms),
        (META_TIME_HIGH_WATER, high_water_ms),
        (META_TIME_CORRECTED_AT, corrected_at_ms),
    ] {
        tx.put(T_META, key.to_vec(), u64_val(v));
    }
}

/// Appends an audit entry at `index`, which must be the log's length: a gap or a
/// rewrite is refused.
fn audit_append(tx: &mut Tx<'_>, index: u64, entry: Vec<u8>) -> Result<(), StoreError> {
    let len = get_u64(tx, T_META, META_AUDIT_LEN)?;
    if index != len {
        return Err(StoreError::AuditIndex {
            expected: len,
            got: index,
        });
    }
    tx.put(T_AUDIT, index.to_be_bytes().to_vec(), entry);
    tx.put(T_META, META_AUDIT_LEN.to_vec(), u64_val(len + 1));
    Ok(())
}

/// Remove delivered messages, leaving a `delivered` tombstone for status queries.
fn ack(
    tx: &mut Tx<'_>,
    queue: &str,
    peer: &str,
    ids: Vec<String>,
    now_ms: u64,
) -> Result<Vec<AckOutcome>, StoreError> {
    let mut out = Vec::with_capacity(ids.len());
    let mut leaving = Leaving::default();
    for id in ids {
        let was_stored = match load_live(tx, queue, peer, &id, false)? {
            Some((key, value_len, rec)) => {
                unlink_live(tx, key, value_len, &rec, &mut leaving)?;
                put_status(tx, &id, &rec, MessageState::Delivered, "", now_ms, true);
                true
            }
            None => false,
        };
        out.push(AckOutcome {
            message_id: id,
            was_stored,
        });
    }
    leaving.settle(tx, queue, peer)?;
    Ok(out)
}

/// The reason a recipient refused a message (status `rejected`), unless it is queued
/// again under that id.
fn reject(
    tx: &mut Tx<'_>,
    queue: String,
    peer: String,
    message_id: &str,
    reason: String,
    now_ms: u64,
) -> Result<(), StoreError> {
    check_name("message_id", message_id)?;
    let live = matches!(
        tx.get(T_BYID, &id_key(message_id))?.map(IdEntry::parse),
        Some(IdEntry::Live(_))
    );
    if !live {
        let st = StatusRecord {
            state: MessageState::Rejected,
            queue,
            peer,
            attempts: 0,
            next_attempt_at_ms: 0,
            reason,
            keep_until_ms: now_ms.saturating_add(tx.opts.status_retention_ms),
            dead_seq: 0,
        };
        write_status(tx, message_id, &st)?;
    }
    Ok(())
}

/// Keep a tool result under `job_id` until `keep_until_ms`, within the results' own
/// budget (refused before it is passed; a replaced result gives its bytes back).
fn result_put(
    tx: &mut Tx<'_>,
    job_id: &str,
    result: &[u8],
    keep_until_ms: u64,
) -> Result<(), StoreError> {
    check_name("job_id", job_id)?;
    let mut freed = 0;
    if let Some(old) = tx.get(T_RESULT, job_id.as_bytes())? {
        if let Some(t) = old.get(..8).and_then(parse_u64) {
            tx.delete(T_RESULT_EXP, time_key(t, job_id.as_bytes()));
        }
        freed = result_cost(job_id.len(), old.len());
    }
    let mut v = u64_val(keep_until_ms);
    v.extend_from_slice(result);
    let held = get_u64(tx, T_META, META_RESULT_BYTES)?.saturating_sub(freed);
    let total = held.saturating_add(result_cost(job_id.len(), v.len()));
    if total > tx.opts.max_result_store_bytes {
        return Err(StoreError::StorageFull);
    }
    tx.put(T_META, META_RESULT_BYTES.to_vec(), u64_val(total));
    tx.put(T_RESULT, job_id.as_bytes().to_vec(), v);
    tx.put(
        T_RESULT_EXP,
        time_key(keep_until_ms, job_id.as_bytes()),
        Vec::new(),
    );
    Ok(())
}
