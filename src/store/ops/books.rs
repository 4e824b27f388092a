//! The books every operation keeps: the recipient counters and the store's byte total,
//! blob reference counts, status tombstones, the dedup window, quarantine, and finding
//! and unlinking a live message. The operations in [`super::queue`] and
//! [`super::sweep`] are written in these terms.

use crate::store::codec::*;
use crate::store::counter::*;
use crate::store::error::StoreError;
use crate::store::lanes;
use crate::store::records::*;
use crate::store::tx::Tx;
use crate::store::types::*;

/// Reason recorded when the sweeper expires a message.
pub const REASON_TIMEOUT: &str = "timeout_in_queue";
/// Reason recorded when a message ran out of attempts.
pub const REASON_MAX_ATTEMPTS: &str = "max_attempts";

pub(super) fn invalid(what: impl Into<String>) -> StoreError {
    StoreError::Invalid(what.into())
}

pub(super) fn check_name(what: &str, v: &str) -> Result<(), StoreError> {
    if v.is_empty() || v.len() > 255 || v.contains('\0') {
        return Err(invalid(format!("{what} must be 1..=255 bytes without NUL")));
    }
    Ok(())
}

pub(super) fn get_u64(tx: &Tx<'_>, tree: u8, key: &[u8]) -> Result<u64, StoreError> {
    Ok(tx
        .get(tree, key)?
        .as_deref()
        .and_then(parse_u64)
        .unwrap_or(0))
}

pub(super) fn add_total(tx: &mut Tx<'_>, delta: i64) -> Result<(), StoreError> {
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
pub(super) fn adjust_counter(
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

pub(super) fn put_counter(tx: &mut Tx<'_>, queue: &str, peer: &str, c: &Counter) {
    let key = count_key(queue, peer);
    if c.depth == 0 {
        tx.delete(T_COUNT, key);
    } else {
        tx.put(T_COUNT, key, c.encode());
    }
}

pub(super) fn counter(tx: &Tx<'_>, queue: &str, peer: &str) -> Result<Counter, StoreError> {
    Ok(match tx.get(T_COUNT, &count_key(queue, peer))? {
        Some(v) => Counter::decode(&v).unwrap_or_default(),
        None => Counter::default(),
    })
}

/// Bytes a message is charged against the budget: its key and record, plus a blob body.
pub(super) fn charge(key: &[u8], value: &[u8], rec: &MsgRecord) -> i64 {
    let blob = match rec.body {
        Body::Blob { len, .. } => len,
        Body::Inline(_) => 0,
    };
    (key.len() + value.len()) as i64 + blob as i64 + 64
}

/// Finds a live (queued/delivering) message of `(queue, peer)` by id: its key, the
/// stored record's length and the record (without an inline body unless `with_body`).
/// A record that no longer decodes is quarantined on the spot and treated as absent.
pub(super) fn load_live(
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
pub(super) fn remove_live(
    tx: &mut Tx<'_>,
    key: Vec<u8>,
    rec: &MsgRecord,
) -> Result<(), StoreError> {
    let mut leaving = Leaving::default();
    unlink_live(tx, key, rec.encoded_len(), rec, &mut leaving)?;
    leaving.settle(tx, &rec.queue, &rec.peer)
}

/// What messages leaving one recipient's queue take off its counter and the store's
/// total: settled once per request (an ack of 50 reads and writes the counter once,
/// not 50 times).
#[derive(Default)]
pub(super) struct Leaving {
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
    pub(super) fn settle(self, tx: &mut Tx<'_>, queue: &str, peer: &str) -> Result<(), StoreError> {
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
                let due = lanes::due_key(c.lane.due_ms, &count_key(queue, peer));
                tx.delete(T_LANE_DUE, due);
            }
        }
        put_counter(tx, queue, peer, &c);
        add_total(tx, -self.bytes)
    }
}

/// Removes a live message (`value_len`: its stored record's length) and everything that
/// points at it, and notes what it takes off the counters in `leaving`.
pub(super) fn unlink_live(
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

pub(super) fn blob_len(rec: &MsgRecord) -> u64 {
    match rec.body {
        Body::Blob { len, .. } => len,
        Body::Inline(_) => 0,
    }
}

pub(super) fn deref_blob(tx: &mut Tx<'_>, rec: &MsgRecord) -> Result<(), StoreError> {
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
pub(super) fn put_status(
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

pub(super) fn write_status(tx: &mut Tx<'_>, id: &str, st: &StatusRecord) -> Result<(), StoreError> {
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

pub(super) fn remember(
    tx: &mut Tx<'_>,
    scope: &str,
    id: &str,
    keep_until_ms: u64,
) -> Result<(), StoreError> {
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

/// Moves `tree/key` into the quarantine tree with the reason; fixes queue counters for a
/// message record (whose key still tells us the recipient even if the value is junk).
pub(super) fn quarantine(
    tx: &mut Tx<'_>,
    tree: u8,
    key: Vec<u8>,
    reason: &str,
) -> Result<(), StoreError> {
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
                    let due = lanes::due_key(c.lane.due_ms, &count_key(&q, &p));
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
