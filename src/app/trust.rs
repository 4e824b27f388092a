//! The trust store lives in the store's KV (one record), so `trust add` is durable and
//! backed up with everything else.

use crate::envelope::{IdentityDocument, Rights, TrustStore};
use crate::store::Store;

pub const KV_TRUST: &str = "trust";
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
    let mut t = load(store)?;
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
