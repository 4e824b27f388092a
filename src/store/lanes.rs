//! Reading expiry-ordered lanes (see [`Lane`]): the sweeper's way to the expired lane
//! messages, which have no entry in the expiry index, and the next lane expiry for its
//! sleep. Both read a lane from its head and stop as soon as the lane's order says
//! nothing further can qualify, so a pass costs one seek per lane plus the messages it
//! returns. Generic over the reader so the engine (`dyn Engine`) can be passed without
//! trait upcasting, which the MSRV (1.85) does not have.

use super::codec::{prefix_end, T_COUNT, T_MSG};
use super::engine::{EngineError, Reader};
use super::types::{Counter, Lane, MsgRecord, LANE_SLACK_MS};

/// Every recipient whose lane has members: its counter key (`queue 0 peer`) and lane.
pub fn with_members<R: Reader + ?Sized>(r: &R) -> Result<Vec<(Vec<u8>, Lane)>, EngineError> {
    let mut out = Vec::new();
    r.scan(T_COUNT, &[], None, &mut |k, v| {
        if let Ok(c) = Counter::decode(v) {
            if c.lane.members > 0 {
                out.push((k.to_vec(), c.lane));
            }
        }
        true
    })?;
    Ok(out)
}

/// Calls `f` with the key and record of each lane message, in queue order, until `f`
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

/// Queue keys of lane messages that expired by `now_ms`, at most `limit`.
pub fn expired<R: Reader + ?Sized>(
    r: &R,
    now_ms: u64,
    limit: usize,
) -> Result<Vec<Vec<u8>>, EngineError> {
    let mut hits = Vec::new();
    let past_slack = now_ms.saturating_add(LANE_SLACK_MS);
    for (key, lane) in with_members(r)? {
        if hits.len() >= limit {
            break;
        }
        walk(r, &key, &lane, &mut |k, rec| {
            if rec.expires_at_ms <= now_ms {
                hits.push(k.to_vec());
                return hits.len() < limit;
            }
            // Later lane messages expire no earlier than this one minus the slack.
            rec.expires_at_ms <= past_slack
        })?;
    }
    Ok(hits)
}

/// The earliest expiry of any lane message.
pub fn next_expiry<R: Reader + ?Sized>(r: &R) -> Result<Option<u64>, EngineError> {
    let mut next: Option<u64> = None;
    for (key, lane) in with_members(r)? {
        let mut first: Option<u64> = None;
        walk(r, &key, &lane, &mut |_, rec| {
            let e = rec.expires_at_ms;
            let min = first.map_or(e, |m| m.min(e));
            first = Some(min);
            // Past min + slack, every later lane message expires after `min`.
            e <= min.saturating_add(LANE_SLACK_MS)
        })?;
        next = match (next, first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(next)
}
