//! Reading expiry-ordered lanes (see [`Lane`]): the sweeper's way to the expired lane
//! members, which have no entry in the expiry index, and the next lane expiry for its
//! sleep.
//!
//! A lane is read from its head and the read stops as soon as the lane's order says
//! nothing further can qualify. Which lanes are read at all comes from the due tree
//! ([`T_LANE_DUE`], `due_ms(BE) | counter key`, one entry per lane with members): `due_ms`
//! is a time before which no member — present or still to come — expires, so a sweep
//! costs one range scan of the due lanes plus what they return, however many recipients
//! there are. Functions are generic over the reader so the engine (`dyn Engine`) can be
//! passed without trait upcasting, which the MSRV (1.85) does not have.

use super::codec::{prefix_end, split_time_key, time_key, T_COUNT, T_LANE_DUE, T_MSG};
use super::counter::{Counter, Lane, LANE_SLACK_MS};
use super::engine::{EngineError, Reader};
use super::records::MsgRecord;

/// A lane's key in the due tree.
pub fn due_key(due_ms: u64, count_key: &[u8]) -> Vec<u8> {
    time_key(due_ms, count_key)
}

/// Lanes due by `now_ms` (`due_ms <= now_ms`), earliest first, at most `limit`: their
/// due time and counter key (`queue 0 peer`). Entries may be stale (the lane emptied or
/// moved on in the same group); the caller checks against the counter.
pub fn due<R: Reader + ?Sized>(
    r: &R,
    now_ms: u64,
    limit: usize,
) -> Result<Vec<(u64, Vec<u8>)>, EngineError> {
    let mut out = Vec::new();
    let end = time_key(now_ms.saturating_add(1), &[]);
    r.scan(T_LANE_DUE, &[], Some(&end), &mut |k, _| {
        if let Some((t, ck)) = split_time_key(k) {
            out.push((t, ck.to_vec()));
        }
        out.len() < limit
    })?;
    Ok(out)
}

/// The lane of the counter stored under `count_key`, if the due entry `due_ms` is its
/// current one.
pub fn current<R: Reader + ?Sized>(
    r: &R,
    due_ms: u64,
    count_key: &[u8],
) -> Result<Option<Counter>, EngineError> {
    Ok(r.get(T_COUNT, count_key)?
        .and_then(|v| current_in(&v, due_ms)))
}

/// The counter in `v`, if its lane still has members and `due_ms` is its due entry.
pub fn current_in(v: &[u8], due_ms: u64) -> Option<Counter> {
    Counter::decode(v)
        .ok()
        .filter(|c| c.lane.members > 0 && c.lane.due_ms == due_ms)
}

/// Calls `f` with the key and record of each lane member, in queue order, until `f`
/// returns false or the lane ends (its priority's last message, or `closed_at_seq`).
/// Indexed messages of the same priority in between (requeued dead letters) are
/// skipped; so are records that do not decode (the expiry index and `doctor` deal with
/// those).
fn walk<R: Reader + ?Sized>(
    r: &R,
    count_key: &[u8],
    lane: &Lane,
    f: &mut dyn FnMut(&[u8], MsgRecord) -> bool,
) -> Result<(), EngineError> {
    // `queue 0 peer 0 (255 - priority)`: the queue keys of one priority (codec::msg_key).
    let mut start = Vec::with_capacity(count_key.len() + 2);
    start.extend_from_slice(count_key);
    start.push(0);
    start.push(255 - lane.prio);
    let end = prefix_end(&start);
    r.scan(T_MSG, &start, end.as_deref(), &mut |k, v| {
        let Ok(rec) = MsgRecord::decode_meta(v) else {
            return true;
        };
        if rec.seq >= lane.closed_at_seq {
            return false;
        }
        !rec.in_lane || f(k, rec)
    })
}

/// What one look at a due lane found.
pub struct Look {
    /// Queue keys of members that expired by now (at most the limit asked for).
    pub expired: Vec<Vec<u8>>,
    /// When the lane is next due: no member still queued, nor any that may join, expires
    /// before this. Always after now.
    pub next_due_ms: u64,
}

/// Reads a lane from its head at `now_ms`. `seen_tail_ms` is the lane's tail as of the
/// state `r` reads: every member `r` does not show (joined since, e.g. earlier in the
/// writer's group) expires no earlier than that minus the slack.
pub fn look<R: Reader + ?Sized>(
    r: &R,
    count_key: &[u8],
    lane: &Lane,
    seen_tail_ms: u64,
    now_ms: u64,
    limit: usize,
) -> Result<Look, EngineError> {
    let mut expired = Vec::new();
    let after_now = now_ms.saturating_add(1);
    // Members not seen join no earlier than tail - slack (`Lane::admit`; the tail only
    // grows), and a message that has not expired on arrival cannot expire before now + 1.
    let mut next = seen_tail_ms.saturating_sub(LANE_SLACK_MS).max(after_now);
    let past_slack = now_ms.saturating_add(LANE_SLACK_MS);
    walk(r, count_key, lane, &mut |k, rec| {
        let e = rec.expires_at_ms;
        if e <= now_ms {
            expired.push(k.to_vec());
            if expired.len() >= limit {
                // Not finished: stay due.
                next = after_now;
                return false;
            }
            return true;
        }
        if e <= past_slack {
            next = next.min(e);
            return true;
        }
        // Later members expire no earlier than this one minus the slack.
        next = next.min(e - LANE_SLACK_MS);
        false
    })?;
    Ok(Look {
        expired,
        next_due_ms: next,
    })
}

/// The earliest expiry of any lane member, if it is before `before` (exact: lanes are
/// taken in due order, and a lane due at or after the best found so far cannot beat it,
/// so typically one lane is read).
pub fn next_expiry<R: Reader + ?Sized>(
    r: &R,
    before: Option<u64>,
) -> Result<Option<u64>, EngineError> {
    const BATCH: usize = 64;
    let mut best = before;
    let mut found = None;
    let mut from = Vec::new();
    loop {
        // Due entries a batch at a time (no reads nested inside a scan).
        let mut batch = Vec::with_capacity(BATCH);
        r.scan(T_LANE_DUE, &from, None, &mut |k, _| {
            if k != from.as_slice() {
                batch.push(k.to_vec());
            }
            batch.len() < BATCH
        })?;
        for k in &batch {
            let Some((t, ck)) = split_time_key(k) else {
                continue;
            };
            if best.is_some_and(|b| t >= b) {
                return Ok(found);
            }
            let Some(c) = current(r, t, ck)? else {
                continue;
            };
            let mut first: Option<u64> = None;
            walk(r, ck, &c.lane, &mut |_, rec| {
                let e = rec.expires_at_ms;
                let min = first.map_or(e, |m| m.min(e));
                first = Some(min);
                // Past min + slack, every later member expires after `min`.
                e <= min.saturating_add(LANE_SLACK_MS)
            })?;
            if let Some(e) = first.filter(|e| best.is_none_or(|b| *e < b)) {
                best = Some(e);
                found = Some(e);
            }
        }
        match batch.pop() {
            Some(last) if batch.len() + 1 == BATCH => from = last,
            _ => return Ok(found),
        }
    }
}
