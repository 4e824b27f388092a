//! Housekeeping by time: expiring messages (the expiry index and the expiry-ordered
//! lanes) and pruning dedup entries, results and tombstones past their keep-until.

use super::books::*;
use crate::store::codec::*;
use crate::store::counter::*;
use crate::store::error::StoreError;
use crate::store::lanes;
use crate::store::records::*;
use crate::store::tx::Tx;
use crate::store::types::*;

/// Expires what is due: messages in the expiry index, then lane messages (which have no
/// index entry, see `counter::Lane`), at most `limit` of each.
pub(super) fn sweep(
    tx: &mut Tx<'_>,
    now_ms: u64,
    limit: usize,
) -> Result<Vec<ExpiredMessage>, StoreError> {
    let mut hits = Vec::new();
    let end = time_key(now_ms.saturating_add(1), &[]);
    tx.view.scan(T_EXP, &[], Some(&end), &mut |k, v| {
        hits.push((Some(k.to_vec()), v.to_vec()));
        hits.len() < limit
    })?;
    due_in_lanes(tx, now_ms, limit, &mut hits)?;
    let mut out = Vec::new();
    for (ek, mk) in hits {
        if let Some(expired) = expire(tx, ek, mk, now_ms)? {
            out.push(expired);
        }
    }
    Ok(out)
}

/// Lanes due by now: reads each from its head, adds up to `limit` of its expired
/// members to `hits` (with no expiry-index key), and moves its due time on.
fn due_in_lanes(
    tx: &mut Tx<'_>,
    now_ms: u64,
    limit: usize,
    hits: &mut Vec<(Option<Vec<u8>>, Vec<u8>)>,
) -> Result<(), StoreError> {
    let mut from_lanes = 0;
    for (due, ck) in lanes::due(tx.view, now_ms, limit)? {
        let counter = tx.get(T_COUNT, &ck)?;
        let Some(mut c) = counter.and_then(|v| lanes::current_in(&v, due)) else {
            // The lane emptied or moved on since this entry was written (a lane's own
            // entry always has its current due time as key).
            tx.delete(T_LANE_DUE, lanes::due_key(due, &ck));
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
        let look = lanes::look(
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
            tx.delete(T_LANE_DUE, lanes::due_key(due, &ck));
            tx.put(
                T_LANE_DUE,
                lanes::due_key(look.next_due_ms, &ck),
                Vec::new(),
            );
            c.lane.due_ms = look.next_due_ms;
            tx.put(T_COUNT, ck, c.encode());
        }
        if from_lanes >= limit {
            break;
        }
    }
    Ok(())
}

/// Expires the message at `mk` if it is still there and due, leaving an `expired`
/// tombstone; a gone message only drops its expiry-index key `ek`, a damaged one is
/// quarantined.
fn expire(
    tx: &mut Tx<'_>,
    ek: Option<Vec<u8>>,
    mk: Vec<u8>,
    now_ms: u64,
) -> Result<Option<ExpiredMessage>, StoreError> {
    // Read through the group: an earlier request may have acked it already.
    let value = match tx.get(T_MSG, &mk)? {
        Some(v) => v,
        None => {
            if let Some(ek) = ek {
                tx.delete(T_EXP, ek);
            }
            return Ok(None);
        }
    };
    let rec = match MsgRecord::decode(&value) {
        Ok(r) => r,
        Err(e) => {
            if let Some(ek) = ek {
                tx.delete(T_EXP, ek);
            }
            quarantine(tx, T_MSG, mk, &e.0)?;
            return Ok(None);
        }
    };
    if rec.expires_at_ms > now_ms {
        return Ok(None);
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
    Ok(Some(ExpiredMessage {
        message_id: id,
        queue: rec.queue,
        peer: rec.peer,
        payload_type: rec.payload_type,
        expires_at_ms: rec.expires_at_ms,
    }))
}

pub(super) fn prune(tx: &mut Tx<'_>, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
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
                    if main_tree == T_RESULT {
                        if let Some(v) = tx.get(T_RESULT, &main_key)? {
                            let cost = result_cost(main_key.len(), v.len());
                            let held = get_u64(tx, T_META, META_RESULT_BYTES)?;
                            tx.put(
                                T_META,
                                META_RESULT_BYTES.to_vec(),
                                u64_val(held.saturating_sub(cost)),
                            );
                        }
                    }
                    tx.delete(main_tree, main_key);
                }
            }
            tx.delete(exp_tree, k);
            n += 1;
        }
    }
    Ok(n)
}
