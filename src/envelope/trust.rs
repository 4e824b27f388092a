//! Trust store logic: which peers we know and what each may do.
//!
//! Pure data: the lead persists [`TrustStore::to_bytes`] in the store's KV and hands the
//! loaded value to `open`, `verify_request` and `token::check`. Every document is
//! verified on `add` *and* again on `from_bytes`, so a tampered KV row cannot smuggle in a
//! key that never passed the checks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::identity::{IdentityDocument, IdentityError, VerifiedKeys};

/// What a trusted peer may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rights {
    /// May send us envelopes (and signed node-side HTTP requests).
    pub send: bool,
    /// May issue capability tokens we honour.
    pub issue: bool,
}

/// One trusted peer: its verified document, rights and decoded keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub doc: IdentityDocument,
    pub rights: Rights,
    pub keys: VerifiedKeys,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeerRow {
    doc: IdentityDocument,
    rights: Rights,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreFile {
    v: u32,
    peers: Vec<PeerRow>,
}

/// Errors of trust-store operations.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("trust store bytes are malformed: {0}")]
    Malformed(String),
    #[error("trust store: unsupported format version {0}")]
    Version(u32),
}

/// The set of trusted peers, keyed by node id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustStore {
    peers: BTreeMap<String, Peer>,
}

impl TrustStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Verify `doc` and insert (or replace) it with `rights`. Returns the previous entry,
    /// so the CLI can say "replaced".
    pub fn add(
        &mut self,
        doc: IdentityDocument,
        rights: Rights,
    ) -> Result<Option<Peer>, TrustError> {
        let keys = doc.verify()?;
        let id = doc.node_id.clone();
        Ok(self.peers.insert(id, Peer { doc, rights, keys }))
    }

    pub fn remove(&mut self, node_id: &str) -> Option<Peer> {
        self.peers.remove(node_id)
    }

    pub fn get(&self, node_id: &str) -> Option<&Peer> {
        self.peers.get(node_id)
    }

    /// Peers in node-id order.
    pub fn list(&self) -> impl Iterator<Item = &Peer> {
        self.peers.values()
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Stable JSON bytes `{"v":1,"peers":[{"doc":…,"rights":{"send","issue"}}…]}`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let file = StoreFile {
            v: 1,
            peers: self
                .peers
                .values()
                .map(|p| PeerRow {
                    doc: p.doc.clone(),
                    rights: p.rights,
                })
                .collect(),
        };
        // Serializing plain strings/bools/byte-vectors cannot fail.
        serde_json::to_vec(&file).unwrap_or_default()
    }

    /// Parse and re-verify every document.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TrustError> {
        let file: StoreFile =
            serde_json::from_slice(bytes).map_err(|e| TrustError::Malformed(e.to_string()))?;
        if file.v != 1 {
            return Err(TrustError::Version(file.v));
        }
        let mut store = Self::new();
        for row in file.peers {
            store.add(row.doc, row.rights)?;
        }
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Keys;

    #[test]
    fn add_get_remove_roundtrip() {
        let k = Keys::generate();
        let d = IdentityDocument::new("gateway:main", "gateway", &k, "2026-11-22T06:00:00Z");
        let mut t = TrustStore::new();
        assert!(t
            .add(
                d.clone(),
                Rights {
                    send: true,
                    issue: true
                }
            )
            .unwrap()
            .is_none());
        assert_eq!(t.get("gateway:main").unwrap().keys.sign, k.sign_pk());
        let back = TrustStore::from_bytes(&t.to_bytes()).unwrap();
        assert_eq!(back, t);
        assert!(t.add(d, Rights::default()).unwrap().is_some());
        assert!(!t.get("gateway:main").unwrap().rights.send);
        assert_eq!(t.list().count(), 1);
        assert!(t.remove("gateway:main").is_some());
        assert!(t.is_empty());
    }

    #[test]
    fn add_and_load_refuse_bad_documents() {
        let k = Keys::generate();
        let mut d = IdentityDocument::new("node:a", "node", &k, "2026-11-22T06:00:00Z");
        let mut t = TrustStore::new();
        t.add(d.clone(), Rights::default()).unwrap();
        let good = t.to_bytes();
        d.self_sig[3] ^= 0x10;
        assert!(matches!(
            t.add(d.clone(), Rights::default()),
            Err(TrustError::Identity(IdentityError::BadSelfSig))
        ));
        // A tampered persisted row is refused on load, too.
        let text = String::from_utf8(good).unwrap();
        let orig = crate::envelope::b64_encode(&t.get("node:a").unwrap().doc.self_sig);
        let bad = text.replace(&orig, &crate::envelope::b64_encode(&d.self_sig));
        assert!(TrustStore::from_bytes(bad.as_bytes()).is_err());
        assert!(TrustStore::from_bytes(b"{\"v\":2,\"peers\":[]}").is_err());
        assert!(TrustStore::from_bytes(b"nope").is_err());
    }
}
