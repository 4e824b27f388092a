//! The map of the store's trees: their ids, the meta keys, and how a meta `u64` is
//! stored — part of the on-disk format.
//!
//! A leaf: it depends on nothing in the store. Both the record codec ([`super::codec`])
//! and the engines depend on it (the SQLite engine lays out a table per tree and keeps
//! meta and the counters in the id tree's table), so neither depends on the other.

/// A tree id. Trees are a key prefix, not separate files, in both engines.
pub type Tree = u8;

pub const T_META: Tree = 1;
pub const T_MSG: Tree = 2;
/// Message id → queue key of a live message, or its tombstone (`records::IdEntry`).
pub const T_BYID: Tree = 3;
pub const T_EXP: Tree = 4;
/// Schema ≤ 2 kept tombstones here; migration to 3 moves them into [`T_BYID`], so
/// it stays empty.
pub const T_STATUS: Tree = 5;
/// `keep_until(BE) | message id` → empty: when each tombstone may be pruned.
pub const T_STATUS_EXP: Tree = 6;
pub const T_DEAD: Tree = 7;
pub const T_COUNT: Tree = 8;
pub const T_SEEN: Tree = 9;
pub const T_SEEN_EXP: Tree = 10;
pub const T_KV: Tree = 11;
pub const T_RESULT: Tree = 12;
pub const T_RESULT_EXP: Tree = 13;
pub const T_AUDIT: Tree = 14;
pub const T_CKPT: Tree = 15;
pub const T_BLOBREF: Tree = 16;
pub const T_QUAR: Tree = 17;
/// `due_ms(BE) | counter key` → empty: when each expiry-ordered lane is next worth a look
/// (`store::lanes`).
pub const T_LANE_DUE: Tree = 18;

pub const META_SCHEMA: &[u8] = b"schema_version";
pub const META_NEXT_SEQ: &[u8] = b"next_seq";
pub const META_TIME_FLOOR: &[u8] = b"time_floor_ms";
/// The last time correction (`time::TimeCorrection`): both keys written together.
pub const META_TIME_HIGH_WATER: &[u8] = b"time_high_water_ms";
pub const META_TIME_CORRECTED_AT: &[u8] = b"time_corrected_at_ms";
pub const META_TIME_SEEN_AT_CORRECTION: &[u8] = b"time_seen_created_max_at_correction_ms";
/// `time::TimeKeeper::note_seen_created`, kept up to date by the writer.
pub const META_SEEN_CREATED_MAX: &[u8] = b"seen_created_max_ms";
pub const META_BYTES: &[u8] = b"total_bytes";
pub const META_AUDIT_LEN: &[u8] = b"audit_len";
/// Bytes the stored tool results take ([`result_cost`] each), kept by the writer and
/// bounded by `StoreOptions::max_result_store_bytes`.
pub const META_RESULT_BYTES: &[u8] = b"result_bytes";

/// What one stored result costs against the results budget: its key and value plus the
/// same per-record overhead a message is charged.
pub fn result_cost(key_len: usize, value_len: usize) -> u64 {
    (key_len + value_len) as u64 + 64
}

/// A meta counter's stored form (little-endian).
pub fn u64_val(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

pub fn parse_u64(v: &[u8]) -> Option<u64> {
    let b: [u8; 8] = v.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}
