//! The trust store lives in the store's KV, so `trust add` is durable and backed up
//! with everything else: one row per trusted peer, and a change log that says which
//! peer each write changed (`rows`: the layout; `changes`: the pure part).
//!
//! Why rows and a log: a gateway trusts every node of its fleet, and each enrollment,
//! rotation or retirement changes one of them. Written as one record (10,000 nodes are
//! over 3 MiB), each decision rewrote the whole record and every running role re-read
//! and re-parsed it on the next check; now a decision writes one peer row and one log
//! entry in its own commit (with the enrollment record and its audit entry), and a
//! running role holding version V reads the log entries after V and the rows they name.
//! "Did it change?", asked every second, reads one log entry.
//!
//! The log keeps the newest [`changes::LOG_KEEP`] to `LOG_KEEP` + [`changes::LOG_CUT`]
//! entries (each writer cuts the oldest in its commit); a holder older than that reads
//! every peer, as does one that holds nothing yet.
//!
//! Upgrade: a store an older build wrote holds one record (`legacy`: rows
//! `peers.chunk.N` with a stamp, or a single value `peers`). It is read as it is, and
//! converted by the first write of a peer, in that write's commit (never at open: a
//! node that only reads its trust store writes nothing).

mod changes;
mod legacy;
mod rows;

use crate::envelope::{IdentityDocument, Rights, TrustStore};
use crate::store::Store;

pub use changes::{apply, Change, Update};
pub use rows::{peer, read_since, stage};

/// Every trusted peer.
pub fn load(store: &Store) -> anyhow::Result<TrustStore> {
    Ok(rows::read_all(store)?.1)
}

/// Make the stored peers `t`: only the peers that differ are written (one row and one
/// log entry each), in one commit. For a small store (a node's, the CLI's); a gateway
/// stages the one peer a decision changes ([`stage`]).
pub fn save(store: &Store, t: &TrustStore) -> anyhow::Result<()> {
    let now = load(store)?;
    let mut changes: Vec<Change> = t
        .list()
        .filter(|p| now.get(&p.address()) != Some(*p))
        .map(|p| Change::put(p.clone()))
        .collect();
    changes.extend(
        now.list()
            .filter(|p| t.get(&p.address()).is_none())
            .map(|p| Change::remove(&p.address())),
    );
    let mut batch = crate::store::Batch::new();
    stage(store, &mut batch, &changes)?;
    if !batch.is_empty() {
        store.commit(batch).wait()?;
    }
    Ok(())
}

/// What a running role verifies with: the persisted peers plus its own identity, which
/// may always issue tokens for itself (`outpost token issue` on the device).
pub fn effective(store: &Store, me: &IdentityDocument) -> anyhow::Result<TrustStore> {
    Ok(with_me(load(store)?, &me_peer(me)?))
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
/// answers "unchanged" from the version held (the store's change log; a database-backed
/// gateway's version counter), and a change is read as the peers it changed where the
/// source can say which (the store), else whole.
pub struct TrustCache {
    load: Loader,
    /// This role's own entry (a key rotation replaces it while the role runs).
    me: std::sync::RwLock<crate::envelope::Peer>,
    current: std::sync::RwLock<std::sync::Arc<TrustStore>>,
    /// The source's version of `current` (`None`: read every peer next time).
    version: std::sync::Mutex<Option<u64>>,
    checked_at_ms: std::sync::atomic::AtomicU64,
    /// How many checks have begun: a caller that missed skips its own check when one
    /// began after it missed.
    checks_begun: std::sync::atomic::AtomicU64,
    /// Held while asking the source.
    checking: std::sync::Mutex<()>,
}

/// How stale the copy may get before a lookup asks the source again.
pub const RECHECK_MS: u64 = 1_000;

/// Reads the persisted peers (the store's rows, or a gateway's database): given the
/// version of the copy held (`None`: none held), `None` when it is still current, else
/// the new version and the update that brings the copy to it.
pub type Loader = Box<dyn Fn(Option<u64>) -> anyhow::Result<Option<(u64, Update)>> + Send + Sync>;

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

fn with_me(mut t: TrustStore, me: &crate::envelope::Peer) -> TrustStore {
    if t.get(&me.doc.node_id).is_none() {
        t.insert(me.clone());
    }
    t
}

impl TrustCache {
    /// The cache over the store's trust rows.
    pub fn load(store: &Store, me: &IdentityDocument, now_ms: u64) -> anyhow::Result<Self> {
        let store = store.clone();
        Self::with_loader(Box::new(move |known| read_since(&store, known)), me, now_ms)
    }

    /// The cache over any source of peers.
    pub fn with_loader(load: Loader, me: &IdentityDocument, now_ms: u64) -> anyhow::Result<Self> {
        let (version, update) =
            load(None)?.ok_or_else(|| anyhow::anyhow!("the trust store did not load"))?;
        let mut t = TrustStore::new();
        update.apply_to(&mut t);
        let me = me_peer(me)?;
        let t = with_me(t, &me);
        Ok(Self {
            load,
            me: std::sync::RwLock::new(me),
            current: std::sync::RwLock::new(std::sync::Arc::new(t)),
            version: std::sync::Mutex::new(Some(version)),
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
    /// for it; when a check began after this caller missed, its answer is used (so a
    /// node enrolled a moment ago is found at once, not a second later).
    pub fn recheck(&self, now_ms: u64) {
        use std::sync::atomic::Ordering;
        let asked = self.checks_begun.load(Ordering::Acquire);
        let _one_at_a_time = self.checking.lock().unwrap_or_else(|p| p.into_inner());
        if self.checks_begun.load(Ordering::Acquire) != asked {
            return;
        }
        self.check(now_ms);
    }

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
        self.forget_version();
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
        self.forget_version();
        self.check(now_ms);
        Ok(())
    }

    /// The next check reads every peer (this role's own entry changed).
    fn forget_version(&self) {
        *self.version.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Ask the source (the caller holds `checking`) and apply its answer to the copy.
    fn check(&self, now_ms: u64) {
        use std::sync::atomic::Ordering;
        self.checks_begun.fetch_add(1, Ordering::AcqRel);
        self.checked_at_ms.store(now_ms, Ordering::Relaxed);
        let mut version = self.version.lock().unwrap_or_else(|p| p.into_inner());
        let (v, update) = match (self.load)(*version) {
            Ok(Some(answer)) => answer,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(event = "trust_reload_failed", error = %e);
                return;
            }
        };
        let me = self.me.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut g = self.current.write().unwrap_or_else(|p| p.into_inner());
        match update {
            Update::Full(t) => *g = std::sync::Arc::new(with_me(t, &me)),
            Update::Changed(changes) => {
                // A copy only when a caller still holds the one it was handed.
                let t = std::sync::Arc::make_mut(&mut g);
                let mine = changes.iter().any(|c| c.id == me.doc.node_id);
                apply(t, changes);
                if mine && t.get(&me.doc.node_id).is_none() {
                    t.insert(me);
                }
            }
        }
        *version = Some(v);
    }
}

#[cfg(test)]
mod tests;
