//! Trust store logic: which peers we know and what each may do.
//!
//! Pure data: the lead persists [`TrustStore::to_bytes`] in the store's KV and hands the
//! loaded value to `open`, `verify_request` and `token::check`. Every document is
//! verified on `add` *and* again on `from_bytes`, so a tampered KV row cannot smuggle in a
//! key that never passed the checks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::identity::{parse_sign_pk, IdentityDocument, IdentityError, VerifiedKeys};
use super::pae::serde_b64;
use super::rotation::{KeyRotation, RotationError};

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
    /// The key a rotation retired, still accepted for signatures until its deadline
    /// (made before the switch: queued envelopes, a retried request).
    pub previous: Option<Retired>,
    /// Every signing key this peer has retired by rotation, oldest first: its audit
    /// log's older checkpoints were signed with them.
    pub retired: Vec<ed25519_dalek::VerifyingKey>,
    /// The tenant the peer is a node of, on a gateway (PROTOCOL §18); `None` = the
    /// tenant `default` (and always on a node, which knows no tenants).
    pub tenant: Option<String>,
}

/// A retired key inside its grace period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retired {
    pub doc: IdentityDocument,
    pub keys: VerifiedKeys,
    /// Signatures by this key are accepted while `now_ms < until_ms`.
    pub until_ms: u64,
}

impl Peer {
    /// Where the trust store keeps the peer: its node id in the tenant `default`,
    /// `<node id>@<tenant>` otherwise (`fleet::tenant::address`).
    pub fn address(&self) -> String {
        address_of(&self.doc.node_id, self.tenant.as_deref())
    }

    /// The signing keys that may have signed something dated `now_ms`: the current one,
    /// then the retired one while its grace lasts.
    pub fn sign_keys(&self, now_ms: u64) -> impl Iterator<Item = &ed25519_dalek::VerifyingKey> {
        std::iter::once(&self.keys.sign).chain(
            self.previous
                .as_ref()
                .filter(|r| now_ms < r.until_ms)
                .map(|r| &r.keys.sign),
        )
    }

    /// Every key this peer ever signed with here, the current one last: what its audit
    /// log's checkpoints are checked against.
    pub fn key_history(&self) -> Vec<ed25519_dalek::VerifyingKey> {
        let mut keys = self.retired.clone();
        keys.push(self.keys.sign);
        keys
    }
}

/// What [`TrustStore::rotate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotated {
    /// The peer now has the new keys.
    Applied,
    /// It already had them (a retry of a rotation whose answer was lost).
    AlreadyApplied,
}

/// [`crate::fleet::tenant::address`], with `None` for the tenant `default`.
fn address_of(node_id: &str, tenant: Option<&str>) -> String {
    crate::fleet::tenant::address(
        node_id,
        tenant.unwrap_or(crate::fleet::tenant::DEFAULT_TENANT),
    )
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeerRow {
    doc: IdentityDocument,
    rights: Rights,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<RetiredRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    retired: Vec<RetiredKey>,
}

/// The persisted form of [`Retired`] (its document is verified again on load).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredRow {
    pub doc: IdentityDocument,
    pub until_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(transparent)]
struct RetiredKey(#[serde(with = "serde_b64")] Vec<u8>);

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

impl Peer {
    /// The persisted form of the rotation part (`None` when the peer never rotated).
    pub fn rotation_row(&self) -> Option<String> {
        if self.previous.is_none() && self.retired.is_empty() {
            return None;
        }
        let row = RotationRow {
            previous: self.previous.as_ref().map(|r| RetiredRow {
                doc: r.doc.clone(),
                until_ms: r.until_ms,
            }),
            retired: self
                .retired
                .iter()
                .map(|k| RetiredKey(k.to_bytes().to_vec()))
                .collect(),
        };
        serde_json::to_string(&row).ok()
    }

    /// Restore the rotation part from [`Peer::rotation_row`]'s text, checking it.
    pub fn with_rotation_row(mut self, text: Option<&str>) -> Result<Self, TrustError> {
        let Some(text) = text else {
            return Ok(self);
        };
        let row: RotationRow =
            serde_json::from_str(text).map_err(|e| TrustError::Malformed(e.to_string()))?;
        self.previous = row.previous.map(retired_from_row).transpose()?;
        self.retired = retired_keys(&row.retired)?;
        Ok(self)
    }
}

/// A peer's rotation history, as one column or record.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RotationRow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<RetiredRow>,
    #[serde(default)]
    retired: Vec<RetiredKey>,
}

fn retired_from_row(r: RetiredRow) -> Result<Retired, TrustError> {
    let keys = r.doc.verify()?;
    Ok(Retired {
        doc: r.doc,
        keys,
        until_ms: r.until_ms,
    })
}

fn retired_keys(rows: &[RetiredKey]) -> Result<Vec<ed25519_dalek::VerifyingKey>, TrustError> {
    rows.iter()
        .map(|k| parse_sign_pk(&k.0).map_err(TrustError::from))
        .collect()
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
        self.add_in(doc, rights, None)
    }

    /// [`Self::add`] into `tenant` (`None` or `default`: the tenant `default`), under
    /// the address the two make.
    pub fn add_in(
        &mut self,
        doc: IdentityDocument,
        rights: Rights,
        tenant: Option<&str>,
    ) -> Result<Option<Peer>, TrustError> {
        if let Some(t) = tenant {
            crate::fleet::tenant::validate_tenant(t)
                .map_err(|e| TrustError::Malformed(e.to_string()))?;
        }
        let keys = doc.verify()?;
        let tenant = tenant.filter(|t| *t != "default").map(str::to_string);
        let id = address_of(&doc.node_id, tenant.as_deref());
        // The same key again (new rights): its rotation history stays.
        let (previous, retired) = match self.peers.get(&id) {
            Some(p) if p.keys.sign == keys.sign => (p.previous.clone(), p.retired.clone()),
            _ => (None, Vec::new()),
        };
        let peer = Peer {
            doc,
            rights,
            keys,
            previous,
            retired,
            tenant,
        };
        Ok(self.peers.insert(id, peer))
    }

    /// Insert (or replace) a peer whole, its rotation history included (a database row).
    pub fn insert(&mut self, peer: Peer) {
        self.peers.insert(peer.address(), peer);
    }

    /// The peer at `address` as its own device names it (at its node id, in no
    /// tenant), alone: what checks an envelope it signed, whose sender is its node id
    /// (PROTOCOL §18). Empty when no peer is at `address`.
    pub fn as_sender(&self, address: &str) -> TrustStore {
        let mut one = TrustStore::new();
        if let Some(p) = self.peers.get(address) {
            let mut p = p.clone();
            p.tenant = None;
            one.insert(p);
        }
        one
    }

    /// The peers with node id `node_id`, one per tenant at most: the one at the plain
    /// id (the tenant `default`), then those at `<node id>@<tenant>`, by tenant.
    pub fn with_node_id<'a>(&'a self, node_id: &'a str) -> impl Iterator<Item = &'a Peer> + 'a {
        let prefix = format!("{node_id}@");
        let tenants = self
            .peers
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
            .map(|(_, p)| p);
        self.peers.get(node_id).into_iter().chain(tenants)
    }

    /// Apply a key rotation of a trusted peer: after it, `rot.new_doc` is the peer's
    /// document (same rights), the retired key is accepted until `now_ms + grace_ms`
    /// and stays in the key history. A statement whose new document is already the
    /// peer's is a retry: nothing changes.
    pub fn rotate(
        &mut self,
        rot: &KeyRotation,
        now_ms: u64,
        grace_ms: u64,
    ) -> Result<Rotated, RotationError> {
        let id = rot.new_doc.node_id.clone();
        self.rotate_at(&id, rot, now_ms, grace_ms)
    }

    /// [`Self::rotate`] of the peer at `address` (a gateway's tenant node), which must
    /// have the statement's node id.
    pub fn rotate_at(
        &mut self,
        address: &str,
        rot: &KeyRotation,
        now_ms: u64,
        grace_ms: u64,
    ) -> Result<Rotated, RotationError> {
        let (old, keys) = rot.verify()?;
        let id = &rot.new_doc.node_id;
        let peer = self
            .peers
            .get_mut(address)
            .filter(|p| p.doc.node_id == *id)
            .ok_or_else(|| RotationError::UnknownPeer(id.clone()))?;
        if peer.doc.role != rot.new_doc.role {
            return Err(RotationError::OtherPeer);
        }
        if peer.doc == rot.new_doc {
            return Ok(Rotated::AlreadyApplied);
        }
        if peer.keys.sign != old || peer.keys.kex.as_slice() != rot.old_kex_pk {
            return Err(RotationError::Stale(id.clone()));
        }
        let before = std::mem::replace(&mut peer.doc, rot.new_doc.clone());
        peer.retired.push(peer.keys.sign);
        peer.previous = Some(Retired {
            doc: before,
            keys: peer.keys,
            until_ms: now_ms.saturating_add(grace_ms),
        });
        peer.keys = keys;
        Ok(Rotated::Applied)
    }

    /// End the grace of `node_id`'s retired key now (its key was compromised): from
    /// `now_ms` on only the current key signs for it. `Some(true)` when a grace was
    /// running, `Some(false)` when none was, `None` when no such peer is trusted.
    pub fn end_grace(&mut self, node_id: &str, now_ms: u64) -> Option<bool> {
        let peer = self.peers.get_mut(node_id)?;
        Some(match peer.previous.as_mut() {
            Some(r) if now_ms < r.until_ms => {
                r.until_ms = now_ms;
                true
            }
            _ => false,
        })
    }

    pub fn remove(&mut self, node_id: &str) -> Option<Peer> {
        self.peers.remove(node_id)
    }

    pub fn get(&self, node_id: &str) -> Option<&Peer> {
        self.peers.get(node_id)
    }

    /// Peers in address order (`default`'s by node id, each tenant's after its id).
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
            peers: self.peers.values().map(PeerRow::of).collect(),
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
            store.insert(row.into_peer()?);
        }
        Ok(store)
    }
}

impl Peer {
    /// One peer as stable JSON bytes: an element of [`TrustStore::to_bytes`]'s `peers`
    /// (a store keeps one row per peer in this form).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&PeerRow::of(self)).unwrap_or_default()
    }

    /// Parse one peer written by [`Peer::to_bytes`], verifying its documents again.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TrustError> {
        let row: PeerRow =
            serde_json::from_slice(bytes).map_err(|e| TrustError::Malformed(e.to_string()))?;
        row.into_peer()
    }
}

impl PeerRow {
    fn of(p: &Peer) -> Self {
        PeerRow {
            doc: p.doc.clone(),
            rights: p.rights,
            tenant: p.tenant.clone(),
            previous: p.previous.as_ref().map(|r| RetiredRow {
                doc: r.doc.clone(),
                until_ms: r.until_ms,
            }),
            retired: p
                .retired
                .iter()
                .map(|k| RetiredKey(k.to_bytes().to_vec()))
                .collect(),
        }
    }

    fn into_peer(self) -> Result<Peer, TrustError> {
        if let Some(t) = self.tenant.as_deref() {
            crate::fleet::tenant::validate_tenant(t)
                .map_err(|e| TrustError::Malformed(e.to_string()))?;
        }
        let keys = self.doc.verify()?;
        Ok(Peer {
            doc: self.doc,
            rights: self.rights,
            keys,
            previous: self.previous.map(retired_from_row).transpose()?,
            retired: retired_keys(&self.retired)?,
            tenant: self.tenant.filter(|t| t != "default"),
        })
    }
}

#[cfg(test)]
#[path = "trust_tests.rs"]
mod tests;
