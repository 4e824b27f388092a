//! Key rotation statements (PROTOCOL §15.7): a peer replaces its key pair and proves the
//! change with both keys.
//!
//! The statement carries the new identity document (self-signed by the new key) and two
//! signatures over the same bytes: one by the key being retired (the holder of the
//! trusted key asks for the change) and one by the new key (the new key vouches for its
//! predecessor, so a stolen old key cannot graft itself onto someone else's new
//! document). A receiver that trusts the old key switches to the new one and keeps the
//! old one, for a grace period, only to check signatures made before the switch.

use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::identity::{parse_kex_pk, parse_sign_pk, IdentityDocument, IdentityError, VerifiedKeys};
use super::keys::Keys;
use super::pae::{pae, serde_b64};

/// Domain separation for both rotation signatures.
pub const ROTATION_DOMAIN: &str = "outpost/rotate/v1";

/// How long a receiver keeps accepting signatures by a retired key, and a node keeps
/// the retired key's secret to open envelopes sealed to it before the switch: 7 days,
/// longer than the longest message TTL a gateway accepts by default (`queue.max_ttl_s`,
/// 24 h), so nothing queued before a rotation becomes unreadable.
pub const ROTATION_GRACE_MS: u64 = 7 * 24 * 3_600_000;

/// A signed request to replace `old_sign_pk` with the keys of `new_doc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct KeyRotation {
    /// The Ed25519 key being retired (the one the receiver trusts today).
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub old_sign_pk: Vec<u8>,
    /// The X25519 key being retired (with `old_sign_pk`, the retired identity's
    /// fingerprint: what an enrollment token made before the rotation pins).
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub old_kex_pk: Vec<u8>,
    /// The new identity document: same `node_id` and `role`, new keys.
    pub new_doc: IdentityDocument,
    /// Signature by the retired key over [`KeyRotation::signed_bytes`].
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub old_sig: Vec<u8>,
    /// Signature by the new key over the same bytes.
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub new_sig: Vec<u8>,
}

/// Why a rotation statement was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RotationError {
    #[error("rotation: {0}")]
    Identity(#[from] IdentityError),
    #[error("rotation: a signature does not verify")]
    BadSignature,
    #[error("rotation: the new key is the old key")]
    SameKey,
    #[error("rotation: no peer is trusted under {0}")]
    UnknownPeer(String),
    #[error("rotation: the new document names another peer or role")]
    OtherPeer,
    #[error("rotation: the key it retires is not the one trusted for {0}")]
    Stale(String),
}

impl RotationError {
    /// Stable API error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownPeer(_) => "unknown_node",
            Self::Stale(_) => "stale_rotation",
            _ => "bad_rotation",
        }
    }
}

impl KeyRotation {
    /// The statement retiring `old` for `new` (whose document is `new_doc`).
    pub fn new(old: &Keys, new: &Keys, new_doc: IdentityDocument) -> Self {
        let old_sign_pk = old.sign_pk().to_bytes().to_vec();
        let old_kex_pk = old.kex_pk().to_bytes().to_vec();
        let msg = signed_bytes(&old_sign_pk, &old_kex_pk, &new_doc);
        Self {
            old_sig: old.sign(&msg).to_vec(),
            new_sig: new.sign(&msg).to_vec(),
            old_sign_pk,
            old_kex_pk,
            new_doc,
        }
    }

    /// What both keys sign: the domain, the retired key and every signed field of the
    /// new document, its self-signature included.
    pub fn signed_bytes(&self) -> Vec<u8> {
        signed_bytes(&self.old_sign_pk, &self.old_kex_pk, &self.new_doc)
    }

    /// The new document and both signatures (strict Ed25519): the retired signing key
    /// and the new document's keys. Says nothing about whether the old key is trusted:
    /// [`super::TrustStore::rotate`] checks that.
    pub fn verify(&self) -> Result<(VerifyingKey, VerifiedKeys), RotationError> {
        let new = self.new_doc.verify()?;
        let old = parse_sign_pk(&self.old_sign_pk)?;
        parse_kex_pk(&self.old_kex_pk)?;
        if old == new.sign {
            return Err(RotationError::SameKey);
        }
        let msg = self.signed_bytes();
        for (key, sig) in [(&old, &self.old_sig), (&new.sign, &self.new_sig)] {
            let sig =
                <[u8; 64]>::try_from(sig.as_slice()).map_err(|_| RotationError::BadSignature)?;
            key.verify_strict(&msg, &Signature::from_bytes(&sig))
                .map_err(|_| RotationError::BadSignature)?;
        }
        Ok((old, new))
    }
}

fn signed_bytes(old_sign_pk: &[u8], old_kex_pk: &[u8], d: &IdentityDocument) -> Vec<u8> {
    pae(&[
        ROTATION_DOMAIN.as_bytes(),
        d.node_id.as_bytes(),
        d.role.as_bytes(),
        old_sign_pk,
        old_kex_pk,
        &d.sign_pk,
        &d.kex_pk,
        d.created_at.as_bytes(),
        d.tls_spki_sha256.as_deref().unwrap_or_default(),
        &d.self_sig,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement() -> (Keys, Keys, KeyRotation) {
        let old = Keys::generate();
        let new = Keys::generate();
        let doc = IdentityDocument::new("node:pump-1", "node", &new, "2026-11-27T06:00:00Z");
        let rot = KeyRotation::new(&old, &new, doc);
        (old, new, rot)
    }

    #[test]
    fn a_statement_verifies_and_survives_json() {
        let (old, _, rot) = statement();
        assert_eq!(rot.verify().unwrap().0, old.sign_pk());
        let back: KeyRotation =
            serde_json::from_str(&serde_json::to_string(&rot).unwrap()).unwrap();
        assert_eq!(back, rot);
    }

    #[test]
    fn every_part_is_bound() {
        let (_, _, rot) = statement();
        let mut x = rot.clone();
        x.old_sign_pk = Keys::generate().sign_pk().to_bytes().to_vec();
        assert_eq!(x.verify(), Err(RotationError::BadSignature));
        let mut x = rot.clone();
        x.old_kex_pk = Keys::generate().kex_pk().to_bytes().to_vec();
        assert_eq!(x.verify(), Err(RotationError::BadSignature));
        let mut x = rot.clone();
        x.old_sig[5] ^= 1;
        assert_eq!(x.verify(), Err(RotationError::BadSignature));
        let mut x = rot.clone();
        x.new_sig[5] ^= 1;
        assert_eq!(x.verify(), Err(RotationError::BadSignature));
        let mut x = rot.clone();
        x.new_doc.created_at = "2026-11-28T06:00:00Z".into();
        assert!(matches!(x.verify(), Err(RotationError::Identity(_))));
    }

    #[test]
    fn a_stolen_old_key_cannot_claim_someone_elses_new_document() {
        // The thief signs "my key → their new key" with their own key: the new key's
        // signature is missing, so the statement is refused.
        let (_, _, rot) = statement();
        let thief = Keys::generate();
        let mut forged = rot.clone();
        forged.old_sign_pk = thief.sign_pk().to_bytes().to_vec();
        forged.old_sig = thief.sign(&forged.signed_bytes()).to_vec();
        assert_eq!(forged.verify(), Err(RotationError::BadSignature));
    }

    #[test]
    fn the_same_key_is_no_rotation() {
        let k = Keys::generate();
        let doc = IdentityDocument::new("node:pump-1", "node", &k, "2026-11-27T06:00:00Z");
        assert_eq!(
            KeyRotation::new(&k, &k, doc).verify(),
            Err(RotationError::SameKey)
        );
    }
}
