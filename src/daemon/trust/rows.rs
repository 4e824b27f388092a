//! The trust store's rows in the store: one per peer (`KV_TRUST_PEERS`, key = node id,
//! value = [`Peer::to_bytes`]) and the change log (`KV_TRUST_LOG`, key = the change's
//! [`seq_key`] number, picked inside the commit so two writers never share one, value =
//! [`Entry`]). The trust version is the number after the newest entry (0: none yet).

use super::changes::{self, Change, Entry, Update};
use super::legacy;
use crate::envelope::{Peer, TrustStore};
use crate::store::names::{KV_TRUST_LOG, KV_TRUST_PEERS};
use crate::store::{seq_key, Batch, Store};

/// Versions at or above this name an old record's fingerprint (its bit shifted in), not
/// a log position: a holder of one reads every peer once the store is converted.
pub const LEGACY: u64 = 1 << 63;

fn legacy_version(fp: u64) -> u64 {
    LEGACY | (fp >> 1)
}

/// Stage `changes` into `batch`, in the caller's commit: for each, the peer's row (put
/// or deleted) and one log entry; the log's oldest entries past its bound; and, when
/// the store still holds an older build's record, that record converted first.
/// O(changes) rows, whatever the number of peers.
pub fn stage(store: &Store, batch: &mut Batch, changes: &[Change]) -> anyhow::Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    legacy::stage_conversion(store, batch, &put_row)?;
    for c in changes {
        let entry = match &c.peer {
            Some(p) => {
                put_row(batch, p);
                Entry::Put(c.id.clone())
            }
            None => {
                batch.kv_delete(KV_TRUST_PEERS, &c.id);
                Entry::Removed(c.id.clone())
            }
        };
        batch.kv_put_next(KV_TRUST_LOG, entry.to_bytes());
    }
    if let Some((oldest, _)) = entries_from(store, 0, 1)?.into_iter().next() {
        let b = changes::bound(oldest);
        if store.kv_get(KV_TRUST_LOG, &seq_key(b.probe))?.is_some() {
            for n in b.cut {
                batch.kv_delete(KV_TRUST_LOG, &seq_key(n));
            }
        }
    }
    Ok(())
}

fn put_row(batch: &mut Batch, p: &Peer) {
    batch.kv_put(KV_TRUST_PEERS, &p.address(), p.to_bytes());
}

/// One peer's row (an older build's record is read whole while it is there).
pub fn peer(store: &Store, id: &str) -> anyhow::Result<Option<Peer>> {
    if let Some((_, Some(t))) = legacy::read(store, &|_| false)? {
        return Ok(t.get(id).cloned());
    }
    row(store, id)
}

fn row(store: &Store, id: &str) -> anyhow::Result<Option<Peer>> {
    let Some(bytes) = store.kv_get(KV_TRUST_PEERS, id)? else {
        return Ok(None);
    };
    Peer::from_bytes(&bytes)
        .map_err(|e| anyhow::anyhow!("trust row {id}: {e}"))
        .map(Some)
}

/// Every peer, and the version they are at: the version is read before the rows, so a
/// change committed meanwhile is in the rows and read again after it (never missed).
pub fn read_all(store: &Store) -> anyhow::Result<(u64, TrustStore)> {
    if let Some((fp, Some(t))) = legacy::read(store, &|_| false)? {
        return Ok((legacy_version(fp), t));
    }
    let version = entries_from(store, 0, usize::MAX)?
        .last()
        .map_or(0, |(n, _)| n + 1);
    let mut t = TrustStore::new();
    for (id, bytes) in store.kv_list(KV_TRUST_PEERS)? {
        t.insert(Peer::from_bytes(&bytes).map_err(|e| anyhow::anyhow!("trust row {id}: {e}"))?);
    }
    Ok((version, t))
}

/// What changed since `known` (`None`: nothing held): `None` when nothing did.
///
/// A holder at version V reads the log from entry V-1 on: that entry must still be
/// there (else the log was cut past it, or the store is another one: every peer is
/// read), and the entries after it name the peers changed, whose rows are read after
/// the log. A write committed between the two reads is in the rows already and in the
/// log after the last entry read, so the next read reads that row again: the copy
/// catches up, never misses a change.
pub fn read_since(store: &Store, known: Option<u64>) -> anyhow::Result<Option<(u64, Update)>> {
    match known {
        Some(v) if v < LEGACY => {
            if let Some(answer) = changes_since(store, v)? {
                return Ok(answer);
            }
        }
        Some(v) => match legacy::read(store, &|fp| legacy_version(fp) == v)? {
            Some((fp, None)) if legacy_version(fp) == v => return Ok(None),
            Some((fp, Some(t))) => return Ok(Some((legacy_version(fp), Update::Full(t)))),
            _ => {}
        },
        None => {}
    }
    let (v, t) = read_all(store)?;
    Ok(Some((v, Update::Full(t))))
}

/// [`read_since`] from a log position; `None` when the log no longer reaches back to it.
fn changes_since(store: &Store, v: u64) -> anyhow::Result<Option<Option<(u64, Update)>>> {
    let from = v.saturating_sub(1);
    let entries = entries_from(store, from, usize::MAX)?;
    let mut it = entries.into_iter().peekable();
    if v > 0 {
        match it.next() {
            Some((n, _)) if n == from => {}
            _ => return Ok(None),
        }
    } else if it.peek().is_some_and(|(n, _)| *n != 0) {
        return Ok(None);
    }
    let mut next = v;
    let mut read = Vec::new();
    for (n, e) in it {
        if n != next {
            return Ok(None);
        }
        next = n + 1;
        read.push(e);
    }
    if read.is_empty() {
        return Ok(Some(None));
    }
    let mut out = Vec::new();
    for (id, put) in changes::last_per_id(read) {
        let peer = if put { row(store, &id)? } else { None };
        out.push(Change { id, peer });
    }
    Ok(Some(Some((next, Update::Changed(out)))))
}

/// Up to `limit` log entries from number `from` on, in order.
fn entries_from(store: &Store, from: u64, limit: usize) -> anyhow::Result<Vec<(u64, Entry)>> {
    store
        .kv_list_from(KV_TRUST_LOG, &seq_key(from), limit)?
        .into_iter()
        .map(|(k, v)| {
            let n = k.parse::<u64>().ok();
            match (n, Entry::from_bytes(&v)) {
                (Some(n), Some(e)) => Ok((n, e)),
                _ => anyhow::bail!("trust log entry {k} is malformed"),
            }
        })
        .collect()
}
