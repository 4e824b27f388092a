//! The trust store lives in the store's KV (one record), so `trust add` is durable and
//! backed up with everything else.

use crate::envelope::{IdentityDocument, Rights, TrustStore};
use crate::store::Store;

pub use crate::store::names::KV_TRUST;
const KEY: &str = "peers";

pub fn load(store: &Store) -> anyhow::Result<TrustStore> {
    Ok(match store.kv_get(KV_TRUST, KEY)? {
        Some(b) => TrustStore::from_bytes(&b)?,
        None => TrustStore::new(),
    })
}

pub fn save(store: &Store, t: &TrustStore) -> anyhow::Result<()> {
    store.kv_put(KV_TRUST, KEY, t.to_bytes()).wait()?;
    Ok(())
}

/// What a running role verifies with: the persisted peers plus its own identity, which
/// may always issue tokens for itself (`outpost token issue` on the device).
pub fn effective(store: &Store, me: &IdentityDocument) -> anyhow::Result<TrustStore> {
    with_me(load(store)?, me)
}

/// The trust store a running role verifies with, shared by its handlers.
///
/// `outpost trust add` writes the store while the daemon runs, so a lookup that misses
/// (unknown sender or issuer) calls [`TrustCache::reload_if_stale`], which re-reads the
/// record at most once a second before the caller refuses.
pub struct TrustCache {
    load: Loader,
    me: IdentityDocument,
    current: std::sync::RwLock<std::sync::Arc<TrustStore>>,
    last_reload_ms: std::sync::atomic::AtomicU64,
    /// Held while reloading: callers that arrive meanwhile wait for the fresh copy
    /// instead of answering from the stale one.
    reloading: std::sync::Mutex<()>,
}

/// Reads the persisted peers (the store's record, or a gateway's database).
pub type Loader = Box<dyn Fn() -> anyhow::Result<TrustStore> + Send + Sync>;

/// The peers plus `me` as an issuer (see [`effective`]).
fn with_me(mut t: TrustStore, me: &IdentityDocument) -> anyhow::Result<TrustStore> {
    if t.get(&me.node_id).is_none() {
        t.add(
            me.clone(),
            Rights {
                send: false,
                issue: true,
            },
        )?;
    }
    Ok(t)
}

impl TrustCache {
    /// The cache over the store's trust record.
    pub fn load(store: &Store, me: &IdentityDocument) -> anyhow::Result<Self> {
        let store = store.clone();
        Self::with_loader(Box::new(move || load(&store)), me)
    }

    /// The cache over any source of peers.
    pub fn with_loader(load: Loader, me: &IdentityDocument) -> anyhow::Result<Self> {
        let t = with_me(load()?, me)?;
        Ok(Self {
            load,
            me: me.clone(),
            current: std::sync::RwLock::new(std::sync::Arc::new(t)),
            last_reload_ms: std::sync::atomic::AtomicU64::new(0),
            reloading: std::sync::Mutex::new(()),
        })
    }

    pub fn get(&self) -> std::sync::Arc<TrustStore> {
        self.current
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Re-read the peers, at most once a second. A caller that finds a reload under
    /// way waits for it and uses its result (before: it answered from the old copy, so
    /// of 100 nodes enrolled together and connecting at once, 99 were refused).
    pub fn reload_if_stale(&self, now_ms: u64) {
        use std::sync::atomic::Ordering;
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let last = self.last_reload_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < 1_000 {
            return;
        }
        self.last_reload_ms.store(now_ms, Ordering::Relaxed);
        match (self.load)().and_then(|t| with_me(t, &self.me)) {
            Ok(t) => {
                if let Ok(mut g) = self.current.write() {
                    *g = std::sync::Arc::new(t);
                }
            }
            Err(e) => tracing::warn!(event = "trust_reload_failed", error = %e),
        }
    }
}
