//! The life of a queued message: enqueue, failed attempts and dead-lettering, requeue
//! of a dead letter, purge of the dead-letter queue.

use super::books::*;
use crate::store::backoff;
use crate::store::blobs::sha256;
use crate::store::codec::*;
use crate::store::counter::Counter;
use crate::store::error::StoreError;
use crate::store::lanes;
use crate::store::records::*;
use crate::store::tx::Tx;
use crate::store::types::*;

/// Queues a new message within the recipient's cap and the store's budget; an id
/// already stored, tombstoned or remembered is a duplicate, not an error.
pub(super) fn enqueue(tx: &mut Tx<'_>, m: NewMessage) -> Result<EnqueueOutcome, StoreError> {
    admissible(tx, &m)?;
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
    // `c` is a copy: nothing is stored if this enqueue fails further down.
    let in_lane = c.lane.admit(c.depth, seq, m.priority, m.expires_at_ms);
    let mut rec = new_record(tx, &m, seq, blob_hash, in_lane);
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
        put_blob(tx, &h, body)?;
    }
    link(tx, id, key, value, &rec, &mut c, cost)?;
    if let Some(until) = m.dedup_until_ms {
        remember(tx, &m.queue, &m.message_id, until)?;
    }
    Ok(EnqueueOutcome::Queued { seq })
}

/// Refuses a message with a bad name, a body over the size limit, or an expiry that
/// has passed.
fn admissible(tx: &Tx<'_>, m: &NewMessage) -> Result<(), StoreError> {
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
    Ok(())
}

/// The stored record of `m` at `seq`, its body a blob reference when `blob_hash` is
/// set and an empty inline body otherwise (the caller moves the body in).
fn new_record(
    tx: &Tx<'_>,
    m: &NewMessage,
    seq: u64,
    blob_hash: Option<[u8; 32]>,
    in_lane: bool,
) -> MsgRecord {
    MsgRecord {
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
        in_lane,
    }
}

/// Writes a large body's blob file and counts one more reference to it.
fn put_blob(tx: &mut Tx<'_>, h: &[u8; 32], body: &[u8]) -> Result<(), StoreError> {
    // Written by the writer itself, so no concurrent collection can race it.
    tx.blobs
        .put(h, body)
        .map_err(|e| StoreError::from_io("write blob", &e))?;
    let refs = get_u64(tx, T_BLOBREF, h)?;
    tx.put(T_BLOBREF, h.to_vec(), u64_val(refs + 1));
    Ok(())
}

/// Stores an admitted record under `key` with every index that finds it (the id, the
/// expiry index or its lane's due entry) and charges it to its recipient's counter
/// `c` and to the store's total.
fn link(
    tx: &mut Tx<'_>,
    id: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
    rec: &MsgRecord,
    c: &mut Counter,
    cost: i64,
) -> Result<(), StoreError> {
    *tx.next_seq += 1;
    tx.put(T_META, META_NEXT_SEQ.to_vec(), u64_val(*tx.next_seq));
    tx.put(T_BYID, id, key.clone());
    if !rec.in_lane {
        tx.put(
            T_EXP,
            time_key(rec.expires_at_ms, &rec.seq.to_be_bytes()),
            key.clone(),
        );
    }
    tx.put(T_MSG, key, value);
    if rec.in_lane && c.lane.members == 1 {
        let due = lanes::due_key(c.lane.due_ms, &count_key(&rec.queue, &rec.peer));
        tx.put(T_LANE_DUE, due, Vec::new());
    }
    c.adjust(1, cost);
    put_counter(tx, &rec.queue, &rec.peer, c);
    add_total(tx, cost)
}

pub(super) fn record_failure(
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

pub(super) fn requeue(tx: &mut Tx<'_>, id: &str, now_ms: u64) -> Result<(), StoreError> {
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

pub(super) fn purge_dead(tx: &mut Tx<'_>, limit: usize) -> Result<usize, StoreError> {
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
