//! Queue semantics as write operations, evaluated by the writer inside one group.
//!
//! Every op reads through the request's overlay ([`Tx`]), so checks (cap, budget,
//! duplicates, audit index) see the writes of earlier requests in the same group.

use super::blobs::sha256;
use super::codec::*;
use super::tx::Tx;
use super::types::*;
use super::{backoff, StoreError};

/// Reason recorded when the sweeper expires a message.
pub const REASON_TIMEOUT: &str = "timeout_in_queue";
/// Reason recorded when a message ran out of attempts.
pub const REASON_MAX_ATTEMPTS: &str = "max_attempts";

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

fn invalid(what: impl Into<String>) -> StoreError {
    StoreError::Invalid(what.into())
}

fn check_name(what: &str, v: &str) -> Result<(), StoreError> {
    if v.is_empty() || v.len() > 255 || v.contains('\0') {
        return Err(invalid(format!("{what} must be 1..=255 bytes without NUL")));
    }
    Ok(())
}

pub fn apply(tx: &mut Tx<'_>, op: WriteOp) -> Result<OpOutcome, StoreError> {
    match op {
        WriteOp::Enqueue(m) => enqueue(tx, m).map(OpOutcome::Enqueued),
        WriteOp::MarkDelivering { queue, peer, ids } => {
            for id in ids {
                if let Some((key, _, mut rec)) = load_live(tx, &queue, &peer, &id, true)? {
                    rec.state = MessageState::Delivering;
                    tx.put(T_MSG, key, rec.encode());
                }
            }
            Ok(OpOutcome::Done)
        }
        WriteOp::RecordFailure {
            queue,
            peer,
            ids,
            now_ms,
            jitter,
        } => record_failure(tx, &queue, &peer, ids, now_ms, jitter).map(OpOutcome::Dead),
        WriteOp::Ack {
            queue,
            peer,
            ids,
            now_ms,
        } => {
            let mut out = Vec::with_capacity(ids.len());
            let mut leaving = Leaving::default();
            for id in ids {
                let was_stored = match load_live(tx, &queue, &peer, &id, false)? {
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
            leaving.settle(tx, &queue, &peer)?;
            Ok(OpOutcome::Acked(out))
        }
        WriteOp::SweepExpired { now_ms, limit } => sweep(tx, now_ms, limit).map(OpOutcome::Expired),
        WriteOp::Prune { now_ms, limit } => prune(tx, now_ms, limit).map(OpOutcome::Count),
        WriteOp::Requeue { message_id, now_ms } => {
            requeue(tx, &message_id, now_ms).map(|_| OpOutcome::Done)
        }
        WriteOp::PurgeDead { limit } => purge_dead(tx, limit).map(OpOutcome::Count),
        WriteOp::Reject {
            queue,
            peer,
            message_id,
            reason,
            now_ms,
        } => {
            check_name("message_id", &message_id)?;
            let live = matches!(
                tx.get(T_BYID, &id_key(&message_id))?.map(IdEntry::parse),
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
                write_status(tx, &message_id, &st)?;
            }
            Ok(OpOutcome::Done)
        }
        WriteOp::Remember {
            scope,
            id,
            keep_until_ms,
        } => {
            remember(tx, &scope, &id, keep_until_ms)?;
            Ok(OpOutcome::Done)
        }
        WriteOp::KvPut { ns, key, value } => {
            check_name("kv namespace", &ns)?;
            tx.put(T_KV, scoped_key(&ns, &key), value);
            Ok(OpOutcome::Done)
        }
        WriteOp::KvDelete { ns, key } => {
            tx.delete(T_KV, scoped_key(&ns, &key));
            Ok(OpOutcome::Done)
        }
        WriteOp::ResultPut {
            job_id,
            result,
            keep_until_ms,
        } => {
            check_name("job_id", &job_id)?;
            if let Some(old) = tx.get(T_RESULT, job_id.as_bytes())? {
                if let Some(t) = old.get(..8).and_then(parse_u64) {
                    tx.delete(T_RESULT_EXP, time_key(t, job_id.as_bytes()));
                }
            }
            let mut v = u64_val(keep_until_ms);
            v.extend_from_slice(&result);
            tx.put(T_RESULT, job_id.as_bytes().to_vec(), v);
            tx.put(
                T_RESULT_EXP,
                time_key(keep_until_ms, job_id.as_bytes()),
                Vec::new(),
            );
            Ok(OpOutcome::Done)
        }
        WriteOp::AuditAppend { index, entry } => {
            let len = get_u64(tx, T_META, META_AUDIT_LEN)?;
            if index != len {
                return Err(StoreError::AuditIndex {
                    expected: len,
                    got: index,
                });
            }
            tx.put(T_AUDIT, index.to_be_bytes().to_vec(), entry);
            tx.put(T_META, META_AUDIT_LEN.to_vec(), u64_val(len + 1));
            Ok(OpOutcome::Done)
        }
        WriteOp::CheckpointPut { size, note } => {
            tx.put(T_CKPT, size.to_be_bytes().to_vec(), note.into_bytes());
            Ok(OpOutcome::Done)
        }
        WriteOp::Quarantine { tree, key, reason } => {
            quarantine(tx, tree, key, &reason)?;
            Ok(OpOutcome::Done)
        }
        WriteOp::Touch => Ok(OpOutcome::Done),
    }
}

pub fn get_u64(tx: &Tx<'_>, tree: u8, key: &[u8]) -> Result<u64, StoreError> {
    Ok(tx
        .get(tree, key)?
        .as_deref()
        .and_then(parse_u64)
        .unwrap_or(0))
}

fn add_total(tx: &mut Tx<'_>, delta: i64) -> Result<(), StoreError> {
    let cur = get_u64(tx, T_META, META_BYTES)?;
    let next = if delta >= 0 {
        cur.saturating_add(delta as u64)
    } else {
        cur.saturating_sub(delta.unsigned_abs())
    };
    tx.put(T_META, META_BYTES.to_vec(), u64_val(next));
    Ok(())
}

/// Reads a recipient's counter, lets `f` change it, and stores it (or deletes it once
/// the queue is empty, which also starts the next message's lane afresh).
fn adjust_counter(
    tx: &mut Tx<'_>,
    queue: &str,
    peer: &str,
    f: impl FnOnce(&mut Counter),
) -> Result<(), StoreError> {
    let mut c = counter(tx, queue, peer)?;
    f(&mut c);
    put_counter(tx, queue, peer, &c);
    Ok(())
}

fn put_counter(tx: &mut Tx<'_>, queue: &str, peer: &str, c: &Counter) {
    let key = count_key(queue, peer);
    if c.depth == 0 {
        tx.delete(T_COUNT, key);
    } else {
        tx.put(T_COUNT, key, c.encode());
    }
}

pub fn counter(tx: &Tx<'_>, queue: &str, peer: &str) -> Result<Counter, StoreError> {
    Ok(match tx.get(T_COUNT, &count_key(queue, peer))? {
        Some(v) => Counter::decode(&v).unwrap_or_default(),
        None => Counter::default(),
    })
}

/// Bytes a message is charged against the budget: its key and record, plus a blob body.
fn charge(key: &[u8], value: &[u8], rec: &MsgRecord) -> i64 {
    let blob = match rec.body {
        Body::Blob { len, .. } => len,
        Body::Inline(_) => 0,
    };
    (key.len() + value.len()) as i64 + blob as i64 + 64
}

fn enqueue(tx: &mut Tx<'_>, m: NewMessage) -> Result<EnqueueOutcome, StoreError> {
    check_name("queue", &m.queue)?;
    check_name("peer", &m.peer)?;
    check_name("message_id", &m.message_id)?;
    if m.body.len() as u64 > tx.opts.max_message_bytes {
        return Err(StoreError::TooLarge {
            size: m.body.len() as u64,
            max: tx.opts.max_message_bytes,
        });
    }
    if m.expires_at_ms <= tx.now_ms {
        return Err(StoreError::Expired);
    }
    let id = id_key(&m.message_id);
    // The id tree holds live messages and tombstones alike (see `IdEntry`).
    if tx.get(T_BYID, &id)?.is_some()
        || tx
            .get(T_SEEN, &scoped_key(&m.queue, &m.message_id))?
            .is_some()
    {
        return Ok(EnqueueOutcome::Duplicate);
    }
    let mut c = counter(tx, &m.queue, &m.peer)?;
    if c.depth >= tx.opts.max_messages_per_recipient {
        return Err(StoreError::QueueFull {
            retry_after_s: tx.opts.queue_full_retry_after_s,
        });
    }
    let seq = *tx.next_seq;
    let key = msg_key(&m.queue, &m.peer, m.priority, seq);
    let is_blob = m.body.len() as u64 > tx.opts.blob_threshold_bytes;
    let blob_hash = if is_blob { Some(sha256(&m.body)) } else { None };
    let mut rec = MsgRecord {
        seq,
        queue: m.queue.clone(),
        peer: m.peer.clone(),
        message_id: m.message_id.clone(),
        payload_type: m.payload_type.clone(),
        priority: m.priority,
        created_at_ms: m.created_at_ms,
        expires_at_ms: m.expires_at_ms,
        attempts: 0,
        max_attempts: m.max_attempts.unwrap_or(tx.opts.max_attempts),
        next_attempt_at_ms: 0,
        state: MessageState::Queued,
        body: match blob_hash {
            Some(h) => Body::Blob {
                sha256: h,
                len: m.body.len() as u64,
            },
            None => Body::Inline(Vec::new()),
        },
        // `c` is a copy: nothing is stored if this enqueue fails further down.
        in_lane: c.lane.admit(c.depth, seq, m.priority, m.expires_at_ms),
    };
    // The body goes into the record, or (large) into a blob file below.
    let blob_body = if is_blob {
        Some(m.body)
    } else {
        rec.body = Body::Inline(m.body);
        None
    };
    let value = rec.encode();
    let cost = charge(&key, &value, &rec);
    let total = get_u64(tx, T_META, META_BYTES)?;
    if total.saturating_add(cost as u64) > tx.opts.max_store_bytes {
        return Err(StoreError::StorageFull);
    }
    if let (Some(h), Some(body)) = (blob_hash, &blob_body) {
        // Written by the writer itself, so no concurrent collection can race it.
        tx.blobs
            .put(&h, body)
            .map_err(|e| StoreError::from_io("write blob", &e))?;
        let refs = get_u64(tx, T_BLOBREF, &h)?;
        tx.put(T_BLOBREF, h.to_vec(), u64_val(refs + 1));
    }
    *tx.next_seq += 1;
    tx.put(T_META, META_NEXT_SEQ.to_vec(), u64_val(*tx.next_seq));
    tx.put(T_BYID, id, key.clone());
    if !rec.in_lane {
        tx.put(
            T_EXP,
            time_key(m.expires_at_ms, &seq.to_be_bytes()),
            key.clone(),
        );
    }
    tx.put(T_MSG, key, value);
    if rec.in_lane && c.lane.members == 1 {
        let due = super::lanes::due_key(c.lane.due_ms, &count_key(&m.queue, &m.peer));
        tx.put(T_LANE_DUE, due, Vec::new());
    }
    c.adjust(1, cost);
    put_counter(tx, &m.queue, &m.peer, &c);
    add_total(tx, cost)?;
    if let Some(until) = m.dedup_until_ms {
        remember(tx, &m.queue, &m.message_id, until)?;
    }
    Ok(EnqueueOutcome::Queued { seq })
}

/// Finds a live (queued/delivering) message of `(queue, peer)` by id: its key, the
/// stored record's length and the record (without an inline body unless `with_body`).
/// A record that no longer decodes is quarantined on the spot and treated as absent.
fn load_live(
    tx: &mut Tx<'_>,
    queue: &str,
    peer: &str,
    id: &str,
    with_body: bool,
) -> Result<Option<(Vec<u8>, usize, MsgRecord)>, StoreError> {
    let key = match tx.get(T_BYID, &id_key(id))?.map(IdEntry::parse) {
        Some(IdEntry::Live(k)) => k,
        _ => return Ok(None),
    };
    if !key.starts_with(&recipient_prefix(queue, peer)) {
        return Ok(None);
    }
    let value = match tx.get(T_MSG, &key)? {
        Some(v) => v,
        None => {
            tx.delete(T_BYID, id_key(id));
            return Ok(None);
        }
    };
    let rec = if with_body {
        MsgRecord::decode(&value)
    } else {
        MsgRecord::decode_meta(&value)
    };
    match rec {
        Ok(rec) => Ok(Some((key, value.len(), rec))),
        Err(e) => {
            quarantine(tx, T_MSG, key, &e.0)?;
            Ok(None)
        }
    }
}

/// Removes a live message and everything that points at it; keeps the counters right.
/// Its id entry goes too; callers that leave a tombstone overwrite that delete in the
/// same transaction (one write at commit).
fn remove_live(tx: &mut Tx<'_>, key: Vec<u8>, rec: &MsgRecord) -> Result<(), StoreError> {
    let mut leaving = Leaving::default();
    unlink_live(tx, key, rec.encoded_len(), rec, &mut leaving)?;
    leaving.settle(tx, &rec.queue, &rec.peer)
}

/// What messages leaving one recipient's queue take off its counter and the store's
/// total: settled once per request (an ack of 50 reads and writes the counter once,
/// not 50 times).
#[derive(Default)]
struct Leaving {
    messages: i64,
    bytes: i64,
    /// Of them, lane members. Every lane member carries its lane's priority (`admit`
    /// sets it, a lane restarts only when its queue is empty, a rebuild takes it from the
    /// members), so no per-message priority check is needed.
    lane_members: u64,
    /// Of them, indexed ones (priority, seq): strays of the lane if in its range.
    indexed: Vec<(u8, u64)>,
}

impl Leaving {
    fn settle(self, tx: &mut Tx<'_>, queue: &str, peer: &str) -> Result<(), StoreError> {
        if self.messages == 0 {
            return Ok(());
        }
        let mut c = counter(tx, queue, peer)?;
        c.adjust(-self.messages, -self.bytes);
        let strays = self
            .indexed
            .iter()
            .filter(|(prio, seq)| c.lane.is_stray(false, *prio, *seq))
            .count() as u64;
        c.lane.strays = c.lane.strays.saturating_sub(strays);
        if self.lane_members > 0 && c.lane.members > 0 {
            c.lane.members = c.lane.members.saturating_sub(self.lane_members);
            if c.lane.members == 0 {
                let due = super::lanes::due_key(c.lane.due_ms, &count_key(queue, peer));
                tx.delete(T_LANE_DUE, due);
            }
        }
        put_counter(tx, queue, peer, &c);
        add_total(tx, -self.bytes)
    }
}

/// Removes a live message (`value_len`: its stored record's length) and everything that
/// points at it, and notes what it takes off the counters in `leaving`.
fn unlink_live(
    tx: &mut Tx<'_>,
    key: Vec<u8>,
    value_len: usize,
    rec: &MsgRecord,
    leaving: &mut Leaving,
) -> Result<(), StoreError> {
    let cost = (key.len() + value_len) as i64 + blob_len(rec) as i64 + 64;
    tx.delete(T_BYID, id_key(&rec.message_id));
    if !rec.in_lane {
        tx.delete(T_EXP, time_key(rec.expires_at_ms, &rec.seq.to_be_bytes()));
    }
    tx.delete(T_MSG, key);
    leaving.messages += 1;
    leaving.bytes += cost;
    leaving.lane_members += u64::from(rec.in_lane);
    if !rec.in_lane {
        leaving.indexed.push((rec.priority, rec.seq));
    }
    deref_blob(tx, rec)
}

fn blob_len(rec: &MsgRecord) -> u64 {
    match rec.body {
        Body::Blob { len, .. } => len,
        Body::Inline(_) => 0,
    }
}

fn deref_blob(tx: &mut Tx<'_>, rec: &MsgRecord) -> Result<(), StoreError> {
    if let Body::Blob { sha256, .. } = &rec.body {
        let refs = get_u64(tx, T_BLOBREF, sha256)?;
        if refs <= 1 {
            tx.delete(T_BLOBREF, sha256.to_vec());
            tx.unreferenced_blobs.push(*sha256);
        } else {
            tx.put(T_BLOBREF, sha256.to_vec(), u64_val(refs - 1));
        }
    }
    Ok(())
}

/// Writes the terminal status of a message. `was_live`: the message was queued until
/// now, so it has no status record yet (enqueue refuses ids that have one, requeue
/// removes it) and the old-record lookup is skipped — an ack's hottest read.
fn put_status(
    tx: &mut Tx<'_>,
    id: &str,
    rec: &MsgRecord,
    state: MessageState,
    reason: &str,
    now_ms: u64,
    was_live: bool,
) {
    let st = StatusRecord {
        state,
        queue: rec.queue.clone(),
        peer: rec.peer.clone(),
        attempts: rec.attempts,
        next_attempt_at_ms: rec.next_attempt_at_ms,
        reason: reason.to_owned(),
        keep_until_ms: now_ms.saturating_add(tx.opts.status_retention_ms),
        dead_seq: 0,
    };
    if was_live {
        put_status_record(tx, id, &st);
        return;
    }
    // Only fails on an engine read; a lost tombstone is preferable to a failed ack.
    if let Err(e) = write_status(tx, id, &st) {
        tracing::warn!(error = %e, message_id = id, "status tombstone not written");
    }
}

fn write_status(tx: &mut Tx<'_>, id: &str, st: &StatusRecord) -> Result<(), StoreError> {
    if let Some(IdEntry::Finished(Ok(old))) = tx.get(T_BYID, &id_key(id))?.map(IdEntry::parse) {
        tx.delete(T_STATUS_EXP, time_key(old.keep_until_ms, id.as_bytes()));
    }
    put_status_record(tx, id, st);
    Ok(())
}

/// The tombstone (in place of the id's live entry) and its expiry entry (a stale expiry
/// entry of an older record is harmless: pruning checks it still matches before deleting).
fn put_status_record(tx: &mut Tx<'_>, id: &str, st: &StatusRecord) {
    tx.put(T_BYID, id_key(id), st.tombstone());
    if st.keep_until_ms != u64::MAX {
        tx.put(
            T_STATUS_EXP,
            time_key(st.keep_until_ms, id.as_bytes()),
            Vec::new(),
        );
    }
}

fn record_failure(
    tx: &mut Tx<'_>,
    queue: &str,
    peer: &str,
    ids: Vec<String>,
    now_ms: u64,
    jitter: f64,
) -> Result<Vec<String>, StoreError> {
    let mut dead = Vec::new();
    for id in ids {
        let (key, _, mut rec) = match load_live(tx, queue, peer, &id, true)? {
            Some(x) => x,
            None => continue,
        };
        rec.attempts = rec.attempts.saturating_add(1);
        rec.state = MessageState::Queued;
        if rec.max_attempts != 0 && rec.attempts >= rec.max_attempts {
            remove_live(tx, key, &rec)?;
            // Still occupies disk as a dead letter: charge it back to the total.
            let mut drec = rec.clone();
            drec.state = MessageState::Dead;
            let v = drec.encode();
            add_total(tx, (8 + v.len()) as i64 + blob_len(&drec) as i64 + 64)?;
            if let Body::Blob { sha256, .. } = &drec.body {
                let refs = get_u64(tx, T_BLOBREF, sha256)?;
                tx.put(T_BLOBREF, sha256.to_vec(), u64_val(refs + 1));
                tx.unreferenced_blobs.retain(|h| h != sha256);
            }
            tx.put(T_DEAD, rec.seq.to_be_bytes().to_vec(), v);
            let st = StatusRecord {
                state: MessageState::Dead,
                queue: rec.queue.clone(),
                peer: rec.peer.clone(),
                attempts: rec.attempts,
                next_attempt_at_ms: 0,
                reason: REASON_MAX_ATTEMPTS.to_owned(),
                keep_until_ms: u64::MAX,
                dead_seq: rec.seq,
            };
            write_status(tx, &id, &st)?;
            dead.push(id);
        } else {
            let delay = backoff::delay_ms(rec.attempts.saturating_add(1), jitter);
            rec.next_attempt_at_ms = now_ms.saturating_add(delay);
            tx.put(T_MSG, key, rec.encode());
        }
    }
    Ok(dead)
}

/// Expires what is due: messages in the expiry index, then lane messages (which have no
/// index entry, see `types::Lane`), at most `limit` of each.
fn sweep(tx: &mut Tx<'_>, now_ms: u64, limit: usize) -> Result<Vec<ExpiredMessage>, StoreError> {
    let mut hits = Vec::new();
    let end = time_key(now_ms.saturating_add(1), &[]);
    tx.view.scan(T_EXP, &[], Some(&end), &mut |k, v| {
        hits.push((Some(k.to_vec()), v.to_vec()));
        hits.len() < limit
    })?;
    // Lanes due by now: read each from its head, and move its due time on.
    let mut from_lanes = 0;
    for (due, ck) in super::lanes::due(tx.view, now_ms, limit)? {
        let counter = tx.get(T_COUNT, &ck)?;
        let Some(mut c) = counter.and_then(|v| super::lanes::current_in(&v, due)) else {
            // The lane emptied or moved on since this entry was written (a lane's own
            // entry always has its current due time as key).
            tx.delete(T_LANE_DUE, super::lanes::due_key(due, &ck));
            continue;
        };
        // The read below sees committed state; members that joined earlier in this group
        // are bounded by the committed tail — if the committed lane is this same lane.
        let seen = tx
            .view
            .get(T_COUNT, &ck)?
            .and_then(|v| Counter::decode(&v).ok())
            .filter(|s| s.lane.start_seq == c.lane.start_seq);
        let Some(seen) = seen else {
            // The lane started in this group: its members are all unseen; next sweep.
            continue;
        };
        let look = super::lanes::look(
            tx.view,
            &ck,
            &c.lane,
            seen.lane.tail_ms,
            now_ms,
            limit - from_lanes,
        )?;
        from_lanes += look.expired.len();
        hits.extend(look.expired.into_iter().map(|k| (None, k)));
        if look.next_due_ms != due {
            tx.delete(T_LANE_DUE, super::lanes::due_key(due, &ck));
            tx.put(
                T_LANE_DUE,
                super::lanes::due_key(look.next_due_ms, &ck),
                Vec::new(),
            );
            c.lane.due_ms = look.next_due_ms;
            tx.put(T_COUNT, ck, c.encode());
        }
        if from_lanes >= limit {
            break;
        }
    }
    let mut out = Vec::new();
    for (ek, mk) in hits {
        // Read through the group: an earlier request may have acked it already.
        let value = match tx.get(T_MSG, &mk)? {
            Some(v) => v,
            None => {
                if let Some(ek) = ek {
                    tx.delete(T_EXP, ek);
                }
                continue;
            }
        };
        let rec = match MsgRecord::decode(&value) {
            Ok(r) => r,
            Err(e) => {
                if let Some(ek) = ek {
                    tx.delete(T_EXP, ek);
                }
                quarantine(tx, T_MSG, mk, &e.0)?;
                continue;
            }
        };
        if rec.expires_at_ms > now_ms {
            continue;
        }
        let id = rec.message_id.clone();
        remove_live(tx, mk, &rec)?;
        put_status(
            tx,
            &id,
            &rec,
            MessageState::Expired,
            REASON_TIMEOUT,
            now_ms,
            true,
        );
        out.push(ExpiredMessage {
            message_id: id,
            queue: rec.queue,
            peer: rec.peer,
            payload_type: rec.payload_type,
            expires_at_ms: rec.expires_at_ms,
        });
    }
    Ok(out)
}

fn prune(tx: &mut Tx<'_>, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
    let end = time_key(now_ms.saturating_add(1), &[]);
    let mut n = 0;
    for (exp_tree, main_tree) in [
        (T_SEEN_EXP, T_SEEN),
        (T_RESULT_EXP, T_RESULT),
        (T_STATUS_EXP, T_BYID),
    ] {
        let mut hits = Vec::new();
        tx.view.scan(exp_tree, &[], Some(&end), &mut |k, _| {
            hits.push(k.to_vec());
            hits.len() < limit
        })?;
        for k in hits {
            if let Some((t, rest)) = split_time_key(&k) {
                // Expiry keys hold the id as text; the id tree's own key may be packed.
                let main_key = match (main_tree, std::str::from_utf8(rest)) {
                    (T_BYID, Ok(id)) => id_key(id),
                    _ => rest.to_vec(),
                };
                // Only remove the main entry if it still belongs to this expiry entry.
                let current = tx.get(main_tree, &main_key)?;
                let still_same = match (main_tree, current) {
                    // A live message with this id (requeued dead letter) is not pruned.
                    (T_BYID, Some(v)) => match IdEntry::parse(v) {
                        IdEntry::Live(_) => false,
                        IdEntry::Finished(Ok(s)) => s.keep_until_ms == t,
                        IdEntry::Finished(Err(_)) => true,
                    },
                    (_, Some(v)) => v
                        .get(..8)
                        .and_then(parse_u64)
                        .map(|x| x == t)
                        .unwrap_or(true),
                    (_, None) => false,
                };
                if still_same {
                    tx.delete(main_tree, main_key);
                }
            }
            tx.delete(exp_tree, k);
            n += 1;
        }
    }
    Ok(n)
}

fn remember(tx: &mut Tx<'_>, scope: &str, id: &str, keep_until_ms: u64) -> Result<(), StoreError> {
    check_name("dedup scope", scope)?;
    let key = scoped_key(scope, id);
    if let Some(old) = tx.get(T_SEEN, &key)? {
        if let Some(t) = parse_u64(&old) {
            if t >= keep_until_ms {
                return Ok(());
            }
            tx.delete(T_SEEN_EXP, time_key(t, &key));
        }
    }
    tx.put(T_SEEN_EXP, time_key(keep_until_ms, &key), Vec::new());
    tx.put(T_SEEN, key, u64_val(keep_until_ms));
    Ok(())
}

fn requeue(tx: &mut Tx<'_>, id: &str, now_ms: u64) -> Result<(), StoreError> {
    let st = match tx.get(T_BYID, &id_key(id))?.map(IdEntry::parse) {
        Some(IdEntry::Finished(st)) => st.map_err(|e| StoreError::Corrupt(e.0))?,
        _ => return Err(StoreError::NotFound),
    };
    if st.state != MessageState::Dead {
        return Err(StoreError::NotFound);
    }
    let dkey = st.dead_seq.to_be_bytes().to_vec();
    let v = tx.get(T_DEAD, &dkey)?.ok_or(StoreError::NotFound)?;
    let mut rec = MsgRecord::decode(&v).map_err(|e| StoreError::Corrupt(e.0))?;
    if rec.expires_at_ms <= now_ms {
        return Err(StoreError::Expired);
    }
    let c = counter(tx, &rec.queue, &rec.peer)?;
    if c.depth >= tx.opts.max_messages_per_recipient {
        return Err(StoreError::QueueFull {
            retry_after_s: tx.opts.queue_full_retry_after_s,
        });
    }
    let dead_cost = (8 + v.len()) as i64 + blob_len(&rec) as i64 + 64;
    tx.delete(T_DEAD, dkey);
    add_total(tx, -dead_cost)?;
    rec.attempts = 0;
    rec.next_attempt_at_ms = 0;
    rec.state = MessageState::Queued;
    // Back in the middle of its queue, it cannot be in an expiry-ordered lane.
    rec.in_lane = false;
    // Back into its original place: FIFO is by arrival, and it arrived then.
    let key = msg_key(&rec.queue, &rec.peer, rec.priority, rec.seq);
    let value = rec.encode();
    let cost = charge(&key, &value, &rec);
    // Replaces the dead tombstone.
    tx.put(T_BYID, id_key(id), key.clone());
    tx.put(
        T_EXP,
        time_key(rec.expires_at_ms, &rec.seq.to_be_bytes()),
        key.clone(),
    );
    tx.put(T_MSG, key, value);
    adjust_counter(tx, &rec.queue, &rec.peer, |c| {
        c.adjust(1, cost);
        if c.lane.is_stray(false, rec.priority, rec.seq) {
            c.lane.strays += 1;
        }
    })?;
    add_total(tx, cost)
}

fn purge_dead(tx: &mut Tx<'_>, limit: usize) -> Result<usize, StoreError> {
    let mut hits = Vec::new();
    tx.view.scan(T_DEAD, &[], None, &mut |k, v| {
        hits.push((k.to_vec(), v.to_vec()));
        hits.len() < limit
    })?;
    let n = hits.len();
    for (k, v) in hits {
        match MsgRecord::decode(&v) {
            Ok(rec) => {
                add_total(tx, -((8 + v.len()) as i64 + blob_len(&rec) as i64 + 64))?;
                deref_blob(tx, &rec)?;
                let now = tx.now_ms;
                put_status(
                    tx,
                    &rec.message_id,
                    &rec,
                    MessageState::Dead,
                    "purged",
                    now,
                    false,
                );
            }
            Err(_) => add_total(tx, -((8 + v.len()) as i64 + 64))?,
        }
        tx.delete(T_DEAD, k);
    }
    Ok(n)
}

/// Moves `tree/key` into the quarantine tree with the reason; fixes queue counters for a
/// message record (whose key still tells us the recipient even if the value is junk).
pub fn quarantine(tx: &mut Tx<'_>, tree: u8, key: Vec<u8>, reason: &str) -> Result<(), StoreError> {
    let value = match tx.get(tree, &key)? {
        Some(v) => v,
        None => return Ok(()),
    };
    tracing::warn!(tree, reason, "quarantining undecodable record");
    let mut qk = vec![tree];
    qk.extend_from_slice(&key);
    let mut w = W::default();
    w.str(reason).bytes(&value);
    tx.put(T_QUAR, qk, w.0);
    if tree == T_MSG {
        let cost = (key.len() + value.len()) as i64 + 64;
        if let Some((q, p, _, _)) = parse_msg_key(&key) {
            let mut c = counter(tx, &q, &p)?;
            c.adjust(-1, -cost);
            // The record no longer says whether it was a lane member. Every member is
            // queued, so keep members ≤ depth: the lane leaves the due tree with its
            // last real member instead of waiting on one that is gone.
            if c.lane.members > c.depth {
                c.lane.members = c.depth;
                if c.depth == 0 {
                    let due = super::lanes::due_key(c.lane.due_ms, &count_key(&q, &p));
                    tx.delete(T_LANE_DUE, due);
                }
            }
            put_counter(tx, &q, &p, &c);
        }
        add_total(tx, -cost)?;
    }
    tx.delete(tree, key);
    Ok(())
}
