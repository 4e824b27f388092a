//! Schema version and migrations, run on open before the writer starts.
//!
//! - v1: message records, indexes, tombstones — but no per-recipient counters.
//! - v2: persisted per-recipient counters and the global byte total, so depth and
//!   budget checks need no scan. Migrating v1 → v2 rebuilds them with one streaming
//!   pass (the same pass repairs counters if they are ever suspected wrong).
//! - v3: tombstones (the status of delivered, expired, dead and rejected messages) move
//!   from their own tree into the id tree, next to the ids of live messages (see
//!   [`IdEntry`]), so an ack rewrites one entry instead of touching two trees. Migrating
//!   moves them a chunk per transaction ([`move_tombstones`]).
//! - v4: the id tree keys a canonical UUID id by its 16 bytes instead of its 36-byte
//!   text (`codec::id_key`), which takes ~60 bytes off each message's share of a group
//!   commit's writes (DECISIONS D3, "Packed UUID ids"). Migrating re-keys the
//!   entries a chunk per transaction ([`pack_ids`]).
//!
//! A store newer than this binary is refused: silently writing an old format into a
//! newer store could lose data the newer version relies on.

use std::collections::BTreeMap;

use super::blobs::Blobs;
use super::codec::*;
use super::counter::{Counter, Lane, LANE_SLACK_MS};
use super::engine::{BatchOp, Engine};
use super::error::StoreError;
use super::records::{Body, IdEntry, MsgRecord, TOMBSTONE};

/// Current on-disk schema version (see this file for the migrations).
pub const SCHEMA_VERSION: u64 = 4;

pub struct Opened {
    pub next_seq: u64,
    pub time_floor_ms: u64,
    pub time_history: super::time::History,
    pub quarantined: Vec<String>,
}

fn meta(engine: &dyn Engine, key: &[u8]) -> Result<Option<u64>, StoreError> {
    Ok(engine.get(T_META, key)?.as_deref().and_then(parse_u64))
}

fn is_empty(engine: &dyn Engine) -> Result<bool, StoreError> {
    let mut any = false;
    for tree in [T_META, T_MSG, T_KV, T_AUDIT, T_DEAD] {
        engine.scan(tree, &[], None, &mut |_, _| {
            any = true;
            false
        })?;
        if any {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Brings the store to this binary's schema on open (refusing a newer one), moves
/// damaged records aside when `verify`, and reads what the writer starts from.
pub fn prepare(engine: &dyn Engine, blobs: &Blobs, verify: bool) -> Result<Opened, StoreError> {
    let mut quarantined = Vec::new();
    let version = version(engine)?;
    migrate(engine, version)?;
    let mut rebuild = version < 2;
    if !rebuild && verify {
        rebuild = quarantine_damage(engine, blobs, &mut quarantined)?;
    }
    if rebuild {
        rebuild_counters(engine, &mut quarantined)?;
    } else if version < SCHEMA_VERSION {
        engine.apply(&[BatchOp::Put {
            tree: T_META,
            key: META_SCHEMA.to_vec(),
            value: u64_val(SCHEMA_VERSION),
        }])?;
    }
    if meta(engine, META_RESULT_BYTES)?.is_none() {
        count_result_bytes(engine)?;
    }
    collect_orphan_blobs(engine, blobs);
    Ok(Opened {
        next_seq: meta(engine, META_NEXT_SEQ)?.unwrap_or(1).max(1),
        time_floor_ms: meta(engine, META_TIME_FLOOR)?.unwrap_or(0),
        time_history: time_history(engine)?,
        quarantined,
    })
}

/// The store's schema version: a new store is stamped current, data without a version
/// key predates versioning (the first format).
fn version(engine: &dyn Engine) -> Result<u64, StoreError> {
    Ok(match meta(engine, META_SCHEMA)? {
        Some(v) => v,
        None if is_empty(engine)? => {
            engine.apply(&[
                BatchOp::Put {
                    tree: T_META,
                    key: META_SCHEMA.to_vec(),
                    value: u64_val(SCHEMA_VERSION),
                },
                // A new store has remembered no envelope yet.
                BatchOp::Put {
                    tree: T_META,
                    key: META_SEEN_CREATED_MAX.to_vec(),
                    value: u64_val(0),
                },
            ])?;
            SCHEMA_VERSION
        }
        None => 1,
    })
}

/// Refuses a store newer than this binary and runs the chunked migrations an older
/// one needs (v3's tombstones, v4's packed ids); the counters of v2 are rebuilt apart.
fn migrate(engine: &dyn Engine, version: u64) -> Result<(), StoreError> {
    if version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < SCHEMA_VERSION {
        tracing::info!(
            from = version,
            to = SCHEMA_VERSION,
            "migrating store schema"
        );
    }
    if version < 3 {
        let moved = move_tombstones(engine)?;
        tracing::info!(moved, "tombstones moved into the id tree");
    }
    if version < 4 {
        let packed = pack_ids(engine)?;
        tracing::info!(packed, "id tree keys packed");
    }
    Ok(())
}

/// Moves damaged records aside before anything can deliver them, noting each in
/// `quarantined`; whether any was, so the counters must be rebuilt.
fn quarantine_damage(
    engine: &dyn Engine,
    blobs: &Blobs,
    quarantined: &mut Vec<String>,
) -> Result<bool, StoreError> {
    let mut live = 0;
    let damage = match super::damage::scan_damage(engine, blobs, &mut live) {
        Ok(d) => d,
        Err(e) => {
            // Page-level damage the engine itself cannot read past: open anyway (so
            // the daemon is not stuck in a crash loop), report it, let doctor say more.
            tracing::error!(error = %e, "store damaged below record level");
            quarantined.push(format!("engine: {e}"));
            Vec::new()
        }
    };
    if damage.is_empty() {
        return Ok(false);
    }
    let lines = super::damage::quarantine_now(engine, damage)?;
    for l in &lines {
        tracing::warn!(record = %l, "quarantined damaged record on open");
    }
    quarantined.extend(lines);
    Ok(true)
}

/// The time correction and the newest `created_at` in replay memory (`time`).
fn time_history(engine: &dyn Engine) -> Result<super::time::History, StoreError> {
    let floor = meta(engine, META_TIME_FLOOR)?.unwrap_or(0);
    // A store from before this key: whatever it remembered was accepted by the floor's
    // time at the latest, so created at most the largest allowed skew (1 h) after it.
    let seen_created_max_ms = meta(engine, META_SEEN_CREATED_MAX)?
        .unwrap_or_else(|| floor.saturating_add(super::time::MAX_SKEW_MS));
    let correction = match (
        meta(engine, META_TIME_HIGH_WATER)?,
        meta(engine, META_TIME_CORRECTED_AT)?,
        meta(engine, META_TIME_SEEN_AT_CORRECTION)?,
    ) {
        (Some(high_water_ms), Some(corrected_at_ms), seen) => Some(super::time::TimeCorrection {
            high_water_ms,
            corrected_at_ms,
            seen_created_max_ms: seen.unwrap_or(u64::MAX),
        }),
        _ => None,
    };
    Ok(super::time::History {
        correction,
        seen_created_max_ms,
    })
}

/// Tombstones per transaction when migrating to v3.
const MOVE_CHUNK: usize = 4096;

/// v2 → v3: every tombstone of the old status tree (`T_STATUS`) becomes the id tree's
/// entry for its id. A chunk moves whole (put and delete in one batch), so memory stays
/// bounded however many tombstones there are, and a crash midway leaves a store that is
/// still v2 and whose next open moves the rest. Returns how many moved.
fn move_tombstones(engine: &dyn Engine) -> Result<usize, StoreError> {
    let mut moved = 0;
    loop {
        let mut chunk = Vec::new();
        engine.scan(T_STATUS, &[], None, &mut |k, v| {
            chunk.push((k.to_vec(), v.to_vec()));
            chunk.len() < MOVE_CHUNK
        })?;
        if chunk.is_empty() {
            return Ok(moved);
        }
        let mut batch = Vec::with_capacity(2 * chunk.len());
        for (id, status) in chunk {
            // v2 never kept both; should it have, a live message wins over a tombstone,
            // and a tombstone over an id entry whose message is gone.
            let live = match engine.get(T_BYID, &id)?.map(IdEntry::parse) {
                Some(IdEntry::Live(key)) => engine.get(T_MSG, &key)?.is_some(),
                _ => false,
            };
            if !live {
                let mut v = Vec::with_capacity(status.len() + 1);
                v.push(TOMBSTONE);
                v.extend_from_slice(&status);
                batch.push(BatchOp::Put {
                    tree: T_BYID,
                    key: id.clone(),
                    value: v,
                });
            }
            batch.push(BatchOp::Delete {
                tree: T_STATUS,
                key: id,
            });
            moved += 1;
        }
        engine.apply(&batch)?;
    }
}

/// v3 → v4: every id-tree entry under a canonical UUID's text moves to the packed key
/// [`id_key`] gives it. Packed keys start with `0xFE` and sort after every text key, so
/// the scan stops before them. Like [`move_tombstones`], a chunk moves whole (delete and
/// put in one batch) and a crash midway leaves a v3-numbered store whose next open
/// packs the rest (the keys it already packed are simply not text any more). Returns
/// how many moved.
fn pack_ids(engine: &dyn Engine) -> Result<usize, StoreError> {
    let mut packed = 0;
    let mut from = Vec::new();
    loop {
        let mut chunk = Vec::new();
        let mut last = None;
        engine.scan(T_BYID, &from, Some(&[ID_KEY_UUID]), &mut |k, v| {
            last = Some(k.to_vec());
            if let Some(id) = std::str::from_utf8(k)
                .ok()
                .filter(|id| canonical_uuid(id).is_some())
            {
                chunk.push((id.to_owned(), v.to_vec()));
            }
            chunk.len() < MOVE_CHUNK
        })?;
        let full = chunk.len() == MOVE_CHUNK;
        let mut batch = Vec::with_capacity(2 * chunk.len());
        for (id, entry) in chunk {
            let key = id_key(&id);
            // Only a newer binary could have written the packed key, and it would have
            // migrated first: should both exist, the packed one is the newer truth.
            if engine.get(T_BYID, &key)?.is_none() {
                batch.push(BatchOp::Put {
                    tree: T_BYID,
                    key,
                    value: entry,
                });
            }
            batch.push(BatchOp::Delete {
                tree: T_BYID,
                key: id.into_bytes(),
            });
            packed += 1;
        }
        if !batch.is_empty() {
            engine.apply(&batch)?;
        }
        match last {
            Some(mut k) if full => {
                // The smallest key after `k`.
                k.push(0);
                from = k;
            }
            _ => return Ok(packed),
        }
    }
}

/// Recomputes counters and the byte total from the message records (streaming; only
/// one counter per recipient is held in memory) and sets the schema to current.
pub fn rebuild_counters(
    engine: &dyn Engine,
    quarantined: &mut Vec<String>,
) -> Result<(), StoreError> {
    let mut counters: BTreeMap<Vec<u8>, Counter> = BTreeMap::new();
    // Per recipient: indexed messages of its lane's priority since the last member seen
    // (strays once another member follows them).
    let mut since_member: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut total = 0u64;
    let mut bad = Vec::new();
    let mut max_seq = 0u64;
    engine.scan(T_MSG, &[], None, &mut |k, v| {
        match (MsgRecord::decode(v), parse_msg_key(k)) {
            (Ok(rec), Some((q, p, _, _))) => {
                let blob = match rec.body {
                    Body::Blob { len, .. } => len,
                    Body::Inline(_) => 0,
                };
                let cost = (k.len() + v.len()) as u64 + blob + 64;
                let ck = count_key(&q, &p);
                count(&mut counters, &mut since_member, ck, &rec, cost);
                total += cost;
                max_seq = max_seq.max(rec.seq);
            }
            (Err(e), _) => bad.push((k.to_vec(), v.to_vec(), e.0)),
            (_, None) => bad.push((k.to_vec(), v.to_vec(), "bad key".to_owned())),
        }
        true
    })?;
    engine.scan(T_DEAD, &[], None, &mut |_, v| {
        total += (8 + v.len()) as u64 + 64;
        true
    })?;
    let mut batch = Vec::new();
    for tree in [T_COUNT, T_LANE_DUE] {
        let mut old = Vec::new();
        engine.scan(tree, &[], None, &mut |k, _| {
            old.push(k.to_vec());
            true
        })?;
        for key in old {
            batch.push(BatchOp::Delete { tree, key });
        }
    }
    put_counters(counters, &mut batch);
    quarantine_records(bad, quarantined, &mut batch);
    let next_seq = meta(engine, META_NEXT_SEQ)?.unwrap_or(1).max(max_seq + 1);
    for (key, value) in [
        (META_NEXT_SEQ, next_seq),
        (META_BYTES, total),
        (META_SCHEMA, SCHEMA_VERSION),
    ] {
        batch.push(BatchOp::Put {
            tree: T_META,
            key: key.to_vec(),
            value: u64_val(value),
        });
    }
    engine.apply(&batch)?;
    Ok(())
}

/// Counts one message record (costing `cost`) into its recipient's counter under `ck`:
/// depth and bytes, and its lane — which starts at its first member, spans to its
/// newest, and counts as strays the indexed messages of its priority between members
/// (`since_member` holds those seen since the last member).
fn count(
    counters: &mut BTreeMap<Vec<u8>, Counter>,
    since_member: &mut BTreeMap<Vec<u8>, u64>,
    ck: Vec<u8>,
    rec: &MsgRecord,
    cost: u64,
) {
    let c = counters.entry(ck.clone()).or_default();
    c.depth += 1;
    c.bytes += cost;
    if !rec.in_lane && c.lane.members > 0 && rec.priority == c.lane.prio {
        *since_member.entry(ck).or_default() += 1;
    } else if rec.in_lane {
        c.lane.strays += since_member.remove(&ck).unwrap_or(0);
        // Keys come in queue order, so the last member seen is the newest;
        // `due_ms` holds the earliest member expiry until the end.
        if c.lane.members == 0 {
            c.lane = Lane {
                start_seq: rec.seq,
                due_ms: rec.expires_at_ms,
                ..Lane::default()
            };
        } else {
            c.lane.due_ms = c.lane.due_ms.min(rec.expires_at_ms);
        }
        c.lane.prio = rec.priority;
        c.lane.members += 1;
        c.lane.tail_ms = c.lane.tail_ms.max(rec.expires_at_ms);
        c.lane.closed_at_seq = rec.seq + 1;
    }
}

/// The rebuilt counters (and their lanes' due keys) as batch writes. A rebuilt lane
/// takes no newcomers until its queue is empty: its members stay in order, and nothing
/// new has to be checked against what came before.
fn put_counters(counters: BTreeMap<Vec<u8>, Counter>, batch: &mut Vec<BatchOp>) {
    for (k, mut c) in counters {
        if c.lane.members == 0 {
            c.lane = Lane::closed();
        } else {
            c.lane.due_ms = c
                .lane
                .due_ms
                .min(c.lane.tail_ms.saturating_sub(LANE_SLACK_MS));
            batch.push(BatchOp::Put {
                tree: T_LANE_DUE,
                key: super::lanes::due_key(c.lane.due_ms, &k),
                value: Vec::new(),
            });
        }
        batch.push(BatchOp::Put {
            tree: T_COUNT,
            key: k,
            value: c.encode(),
        });
    }
}

/// Message records that do not decode, moved to quarantine with the reason.
fn quarantine_records(
    bad: Vec<(Vec<u8>, Vec<u8>, String)>,
    quarantined: &mut Vec<String>,
    batch: &mut Vec<BatchOp>,
) {
    for (k, v, reason) in bad {
        quarantined.push(format!(
            "message record {}: {reason}",
            super::blobs::hex(&k)
        ));
        let mut qk = vec![T_MSG];
        qk.extend_from_slice(&k);
        let mut w = W::default();
        w.str(&reason).bytes(&v);
        batch.push(BatchOp::Put {
            tree: T_QUAR,
            key: qk,
            value: w.0,
        });
        batch.push(BatchOp::Delete {
            tree: T_MSG,
            key: k,
        });
    }
}

/// Sets the results' byte count from the stored results (a store written before the
/// count was kept, or whose count was lost).
fn count_result_bytes(engine: &dyn Engine) -> Result<(), StoreError> {
    let mut total = 0u64;
    engine.scan(T_RESULT, &[], None, &mut |k, v| {
        total = total.saturating_add(result_cost(k.len(), v.len()));
        true
    })?;
    engine.apply(&[BatchOp::Put {
        tree: T_META,
        key: META_RESULT_BYTES.to_vec(),
        value: u64_val(total),
    }])?;
    Ok(())
}

/// Removes blob files nothing references: leftovers of a crash between writing a blob
/// and committing its message, or of a failed group commit. Runs under the engine's
/// write lock: a writer writes a blob inside its group's
/// transaction, so another process's writer on the same store — the daemon, while an
/// `outpost` command opens the store — cannot be between writing a blob and committing
/// its reference while this looks.
fn collect_orphan_blobs(engine: &dyn Engine, blobs: &Blobs) {
    let res = engine.with_write_lock(&mut |view| {
        let list = match blobs.list() {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "could not list blobs");
                return;
            }
        };
        for h in list {
            if let Ok(None) = view.get(T_BLOBREF, &h) {
                if let Err(e) = blobs.remove(&h) {
                    tracing::warn!(error = %e, "could not remove orphan blob");
                }
            }
        }
    });
    if let Err(e) = res {
        tracing::warn!(error = %e, "could not collect orphan blobs");
    }
}
