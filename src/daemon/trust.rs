//! The trust store lives in the store's KV, so `trust add` is durable and backed up
//! with everything else: the record cut into small rows (`peers.chunk.N`), and its
//! stamp (the record's [`fingerprint`] and how many rows), written in the same commit.
//!
//! Why rows, not one value: with 10,000 nodes the record is over 3 MiB, and SQLite
//! compares a lookup's key with a whole cell, overflow pages and all: any read of the
//! KV table whose search met that one cell read the 3 MiB (1,657 `pread`s of the 2 KiB
//! pages), so every KV read of every request cost a full read of the fleet. Rows of
//! [`CHUNK_BYTES`] fit a 2 KiB page's cell without overflow. Why a stamp: a running role
//! asks "did it change?" every second, and the question reads the stamp only.

use crate::envelope::{IdentityDocument, Rights, TrustStore};
use crate::store::Store;

pub use crate::store::names::KV_TRUST;
/// The record as one value, as older builds wrote it (read when there is no stamp;
/// removed by the next write).
const KEY: &str = "peers";
/// The record's [`fingerprint`] (8 bytes) and its number of rows (4), little-endian.
const STAMP: &str = "peers.stamp";
/// Row `N` of the record is `peers.chunk.` and `N` in 8 digits (key order is row order).
const CHUNK_PREFIX: &str = "peers.chunk.";
/// Bytes of the record per row: SQLite keeps up to ~480 bytes of an index cell on a
/// 2 KiB page, key included, before it spills into overflow pages.
pub const CHUNK_BYTES: usize = 400;

fn chunk_key(i: usize) -> String {
    format!("{CHUNK_PREFIX}{i:08}")
}

pub fn load(store: &Store) -> anyhow::Result<TrustStore> {
    Ok(load_since(store, 0)?.map_or_else(TrustStore::new, |(_, t)| t))
}

pub fn save(store: &Store, t: &TrustStore) -> anyhow::Result<()> {
    let mut batch = crate::store::Batch::new();
    put(&mut batch, t);
    store.commit(batch).wait()?;
    Ok(())
}

/// [`save`] as part of `batch` (committed with whatever else it holds): the rows and
/// the stamp together. Rows past the new count, left by a larger record, are not read
/// (the stamp says how many) and are overwritten when it grows again.
pub fn put(batch: &mut crate::store::Batch, t: &TrustStore) {
    let bytes = t.to_bytes();
    let mut stamp = fingerprint(&bytes).to_le_bytes().to_vec();
    let rows = bytes.chunks(CHUNK_BYTES);
    stamp.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for (i, row) in rows.enumerate() {
        batch.kv_put(KV_TRUST, &chunk_key(i), row.to_vec());
    }
    batch.kv_delete(KV_TRUST, KEY);
    batch.kv_put(KV_TRUST, STAMP, stamp);
}

/// What a running role verifies with: the persisted peers plus its own identity, which
/// may always issue tokens for itself (`outpost token issue` on the device).
pub fn effective(store: &Store, me: &IdentityDocument) -> anyhow::Result<TrustStore> {
    with_me(load(store)?, &me_peer(me)?)
}

/// The trust store a running role verifies with, shared by its handlers.
///
/// `outpost trust add` and `trust rm` write the peers while the daemon runs (from
/// another process, or through another gateway replica). Two ways keep the copy true:
/// - every lookup more than [`RECHECK_MS`] after the last check asks the source again
///   (without waiting if another caller is already asking), so a removed peer is refused
///   within about a second;
/// - a lookup that misses (unknown sender or issuer, or known with other keys) calls
///   [`TrustCache::recheck`], which asks the source at once; callers that miss meanwhile
///   wait for that one answer instead of each asking.
///
/// Asking is cheap when nothing changed, whatever the number of peers: the source
/// answers "unchanged" from a fingerprint (the store record's stamp; a database-backed
/// gateway's version counter), and only a change is read and parsed.
pub struct TrustCache {
    load: Loader,
    /// This role's own entry (a key rotation replaces it while the role runs).
    me: std::sync::RwLock<crate::envelope::Peer>,
    current: std::sync::RwLock<std::sync::Arc<TrustStore>>,
    /// The source's fingerprint of `current` (0: none yet).
    fingerprint: std::sync::atomic::AtomicU64,
    checked_at_ms: std::sync::atomic::AtomicU64,
    /// How many checks have begun: a caller that missed skips its own check when one
    /// began after it missed.
    checks_begun: std::sync::atomic::AtomicU64,
    /// Held while asking the source.
    checking: std::sync::Mutex<()>,
}

/// How stale the copy may get before a lookup asks the source again.
pub const RECHECK_MS: u64 = 1_000;

/// Reads the persisted peers (the store's record, or a gateway's database): given the
/// fingerprint of the copy held, `None` when it is still current, else the peers and
/// their fingerprint (never 0).
pub type Loader = Box<dyn Fn(u64) -> anyhow::Result<Option<(u64, TrustStore)>> + Send + Sync>;

/// A fingerprint of stored bytes, for a [`Loader`] (never 0, which means "none").
pub fn fingerprint(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish().max(1)
}

/// The store's trust record when its fingerprint differs from `known`: an unchanged
/// record costs one read of its stamp, whatever the number of peers.
pub fn load_since(store: &Store, known: u64) -> anyhow::Result<Option<(u64, TrustStore)>> {
    load_since_with(
        &|key| Ok(store.kv_get(KV_TRUST, key)?),
        &|| Ok(store.kv_list(KV_TRUST)?),
        known,
    )
}

/// One key of the trust namespace.
type Get<'a> = &'a dyn Fn(&str) -> anyhow::Result<Option<Vec<u8>>>;
/// Every `(key, value)` of the trust namespace, in key order.
type List<'a> = &'a dyn Fn() -> anyhow::Result<Vec<(String, Vec<u8>)>>;

/// [`load_since`] over `get` and `list`.
///
/// The rows are read in one scan and checked against the stamp's fingerprint: a write
/// committed between the stamp's read and the scan (or during it, on an engine whose
/// scans are not snapshots) fails the check, and the read starts again from the stamp.
/// A record without a stamp (an older build's single value) is read and hashed whole.
fn load_since_with(
    get: Get<'_>,
    list: List<'_>,
    known: u64,
) -> anyhow::Result<Option<(u64, TrustStore)>> {
    for _ in 0..5 {
        let Some((fp, rows)) = get(STAMP)?.as_deref().and_then(parse_stamp) else {
            let bytes = get(KEY)?;
            let fp = bytes.as_deref().map_or(1, fingerprint);
            if fp == known {
                return Ok(None);
            }
            let t = match bytes {
                Some(b) => TrustStore::from_bytes(&b)?,
                None => TrustStore::new(),
            };
            return Ok(Some((fp, t)));
        };
        if fp == known {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(rows * CHUNK_BYTES);
        let mut next = 0;
        for (key, value) in list()? {
            let Some(i) = key.strip_prefix(CHUNK_PREFIX) else {
                continue;
            };
            if i.parse::<usize>().ok() == Some(next) && next < rows {
                bytes.extend_from_slice(&value);
                next += 1;
            }
        }
        if next == rows && fingerprint(&bytes) == fp {
            return Ok(Some((fp, TrustStore::from_bytes(&bytes)?)));
        }
    }
    anyhow::bail!(
        "the trust record kept changing while it was read, or its rows do not match its stamp"
    )
}

fn parse_stamp(b: &[u8]) -> Option<(u64, usize)> {
    let fp = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let rows = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?);
    (b.len() == 12 && fp != 0).then_some((fp, rows as usize))
}

/// The peers plus `me` as an issuer (see [`effective`]).
/// This role's own entry: its document, allowed to issue tokens.
fn me_peer(me: &IdentityDocument) -> anyhow::Result<crate::envelope::Peer> {
    let mut t = TrustStore::new();
    t.add(
        me.clone(),
        Rights {
            send: false,
            issue: true,
        },
    )?;
    t.remove(&me.node_id)
        .ok_or_else(|| anyhow::anyhow!("own identity vanished"))
}

fn with_me(mut t: TrustStore, me: &crate::envelope::Peer) -> anyhow::Result<TrustStore> {
    if t.get(&me.doc.node_id).is_none() {
        t.insert(me.clone());
    }
    Ok(t)
}

impl TrustCache {
    /// The cache over the store's trust record.
    pub fn load(store: &Store, me: &IdentityDocument, now_ms: u64) -> anyhow::Result<Self> {
        let store = store.clone();
        Self::with_loader(Box::new(move |known| load_since(&store, known)), me, now_ms)
    }

    /// The cache over any source of peers.
    pub fn with_loader(load: Loader, me: &IdentityDocument, now_ms: u64) -> anyhow::Result<Self> {
        let (fp, t) = load(0)?.ok_or_else(|| anyhow::anyhow!("the trust store did not load"))?;
        let me = me_peer(me)?;
        let t = with_me(t, &me)?;
        Ok(Self {
            load,
            me: std::sync::RwLock::new(me),
            current: std::sync::RwLock::new(std::sync::Arc::new(t)),
            fingerprint: std::sync::atomic::AtomicU64::new(fp),
            checked_at_ms: std::sync::atomic::AtomicU64::new(now_ms),
            checks_begun: std::sync::atomic::AtomicU64::new(0),
            checking: std::sync::Mutex::new(()),
        })
    }

    /// The peers to verify with: asks the source first when the copy is older than
    /// [`RECHECK_MS`] and no other caller is asking.
    pub fn get(&self, now_ms: u64) -> std::sync::Arc<TrustStore> {
        use std::sync::atomic::Ordering;
        if now_ms.saturating_sub(self.checked_at_ms.load(Ordering::Relaxed)) >= RECHECK_MS {
            if let Ok(_one) = self.checking.try_lock() {
                self.check(now_ms);
            }
        }
        self.current()
    }

    fn current(&self) -> std::sync::Arc<TrustStore> {
        self.current
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// A lookup missed: ask the source now. A caller that finds a check under way waits
    /// for it; when a check began after this caller missed, its answer is used.
    ///
    /// Before, a miss re-read the peers at most once a second: a node enrolled within a
    /// second of any earlier miss was refused until that second passed, and on a
    /// database-backed gateway the copy read could predate the enrolment's `NOTIFY`.
    pub fn recheck(&self, now_ms: u64) {
        use std::sync::atomic::Ordering;
        let asked = self.checks_begun.load(Ordering::Acquire);
        let _one_at_a_time = self.checking.lock().unwrap_or_else(|p| p.into_inner());
        if self.checks_begun.load(Ordering::Acquire) != asked {
            return;
        }
        self.check(now_ms);
    }

    /// Ask the source (the caller holds `checking`).
    /// After a restart inside a rotation's grace: tokens this role issued with its
    /// retired key (`old`) still verify until `until_ms`.
    pub fn set_me_previous(
        &self,
        old: &crate::envelope::Keys,
        until_ms: u64,
    ) -> anyhow::Result<()> {
        let mut me = self.me.write().unwrap_or_else(|p| p.into_inner());
        let doc = IdentityDocument::new(&me.doc.node_id, &me.doc.role, old, "1970-01-01T00:00:00Z");
        let keys = doc.verify()?;
        me.previous = Some(crate::envelope::Retired {
            doc,
            keys,
            until_ms,
        });
        drop(me);
        let _one_at_a_time = self.checking.lock().unwrap_or_else(|p| p.into_inner());
        self.fingerprint
            .store(0, std::sync::atomic::Ordering::Release);
        self.check(
            self.checked_at_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        Ok(())
    }

    /// This role rotated its own key (`rot`): tokens it issued with the retired key
    /// still verify until `now_ms + grace_ms`, new ones verify with the new key.
    pub fn rotate_me(
        &self,
        rot: &crate::envelope::KeyRotation,
        now_ms: u64,
        grace_ms: u64,
    ) -> anyhow::Result<()> {
        {
            let mut me = self.me.write().unwrap_or_else(|p| p.into_inner());
            let mut one = TrustStore::new();
            one.insert(me.clone());
            one.rotate(rot, now_ms, grace_ms)?;
            *me = one
                .remove(&rot.new_doc.node_id)
                .ok_or_else(|| anyhow::anyhow!("own identity vanished"))?;
        }
        let _one_at_a_time = self.checking.lock().unwrap_or_else(|p| p.into_inner());
        self.fingerprint
            .store(0, std::sync::atomic::Ordering::Release);
        self.check(now_ms);
        Ok(())
    }

    fn check(&self, now_ms: u64) {
        use std::sync::atomic::Ordering;
        self.checks_begun.fetch_add(1, Ordering::AcqRel);
        self.checked_at_ms.store(now_ms, Ordering::Relaxed);
        let known = self.fingerprint.load(Ordering::Acquire);
        match (self.load)(known).and_then(|r| {
            let me = self.me.read().unwrap_or_else(|p| p.into_inner()).clone();
            r.map(|(fp, t)| with_me(t, &me).map(|t| (fp, t)))
                .transpose()
        }) {
            Ok(None) => {}
            Ok(Some((fp, t))) => {
                if let Ok(mut g) = self.current.write() {
                    *g = std::sync::Arc::new(t);
                }
                self.fingerprint.store(fp, Ordering::Release);
            }
            Err(e) => tracing::warn!(event = "trust_reload_failed", error = %e),
        }
    }
}

#[cfg(test)]
#[path = "trust_tests.rs"]
mod tests;
