//! The trust store as older builds kept it: one record in `KV_TRUST`, cut into rows
//! `peers.chunk.N` with a stamp `peers.stamp` (the record's fingerprint and row count),
//! or older still a single value `peers`. Read while it is there; the first write of a
//! peer converts it ([`stage_conversion`]) in that write's commit.

use crate::envelope::TrustStore;
use crate::store::{Batch, Store};

pub(super) use crate::store::names::KV_TRUST;
/// The record as one value.
pub(super) const KEY: &str = "peers";
/// The record's fingerprint (8 bytes) and its number of rows (4), little-endian.
pub(super) const STAMP: &str = "peers.stamp";
/// Row `N` of the record is `peers.chunk.` and `N` in 8 digits (key order is row order).
pub(super) const CHUNK_PREFIX: &str = "peers.chunk.";
/// Bytes of the record per row, as they were cut.
const CHUNK_BYTES: usize = 400;

#[cfg(test)]
pub(super) fn chunk_key(i: usize) -> String {
    format!("{CHUNK_PREFIX}{i:08}")
}

/// The old record's fingerprint (never 0) and, unless `held` says it is the one held,
/// its peers; `None` when the store holds no old record.
///
/// The rows are read in one scan and checked against the stamp's fingerprint: a write
/// committed between the stamp's read and the scan fails the check, and the read starts
/// again from the stamp. A single value is read and hashed whole.
pub fn read(
    store: &Store,
    held: &dyn Fn(u64) -> bool,
) -> anyhow::Result<Option<(u64, Option<TrustStore>)>> {
    for _ in 0..5 {
        let Some((fp, rows)) = store
            .kv_get(KV_TRUST, STAMP)?
            .as_deref()
            .and_then(parse_stamp)
        else {
            let Some(bytes) = store.kv_get(KV_TRUST, KEY)? else {
                return Ok(None);
            };
            let fp = fingerprint(&bytes);
            let t = (!held(fp))
                .then(|| TrustStore::from_bytes(&bytes))
                .transpose()?;
            return Ok(Some((fp, t)));
        };
        if held(fp) {
            return Ok(Some((fp, None)));
        }
        let mut bytes = Vec::with_capacity(rows * CHUNK_BYTES);
        let mut next = 0;
        for (key, value) in store.kv_list(KV_TRUST)? {
            let Some(i) = key.strip_prefix(CHUNK_PREFIX) else {
                continue;
            };
            if i.parse::<usize>().ok() == Some(next) && next < rows {
                bytes.extend_from_slice(&value);
                next += 1;
            }
        }
        if next == rows && fingerprint(&bytes) == fp {
            return Ok(Some((fp, Some(TrustStore::from_bytes(&bytes)?))));
        }
    }
    anyhow::bail!(
        "the trust record kept changing while it was read, or its rows do not match its stamp"
    )
}

/// Whether the store still holds an old record (two point reads).
pub fn present(store: &Store) -> anyhow::Result<bool> {
    Ok(store.kv_get(KV_TRUST, STAMP)?.is_some() || store.kv_get(KV_TRUST, KEY)?.is_some())
}

/// When the store holds an old record: its peers, each staged into `batch` as its own
/// row (`put_row`), and the old rows deleted, all in the caller's commit.
pub fn stage_conversion(
    store: &Store,
    batch: &mut Batch,
    put_row: &dyn Fn(&mut Batch, &crate::envelope::Peer),
) -> anyhow::Result<()> {
    if !present(store)? {
        return Ok(());
    }
    let Some((_, Some(t))) = read(store, &|_| false)? else {
        return Ok(());
    };
    for p in t.list() {
        put_row(batch, p);
    }
    for (key, _) in store.kv_list(KV_TRUST)? {
        batch.kv_delete(KV_TRUST, &key);
    }
    Ok(())
}

/// A fingerprint of stored bytes (never 0).
pub fn fingerprint(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish().max(1)
}

fn parse_stamp(b: &[u8]) -> Option<(u64, usize)> {
    let fp = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let rows = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?);
    (b.len() == 12 && fp != 0).then_some((fp, rows as usize))
}

/// The old record's rows, as an older build wrote `t` (for tests of the conversion).
#[cfg(test)]
pub(super) fn write_old(store: &Store, t: &TrustStore) {
    let bytes = t.to_bytes();
    let mut stamp = fingerprint(&bytes).to_le_bytes().to_vec();
    let rows = bytes.chunks(CHUNK_BYTES);
    stamp.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    let mut batch = Batch::new();
    for (i, row) in rows.enumerate() {
        batch.kv_put(KV_TRUST, &chunk_key(i), row.to_vec());
    }
    batch.kv_put(KV_TRUST, STAMP, stamp);
    store.commit(batch).wait().unwrap();
}
