//! Identity documents: what peers exchange to trust each other (PROTOCOL §2).
//!
//! `self_sig` proves possession of the signing key and binds the X25519 key to it; a
//! document is only ever accepted after [`IdentityDocument::verify`], which also refuses
//! keys that would make signatures forgeable (weak Ed25519) or key agreement
//! attacker-predictable (small-order X25519).

use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::keys::Keys;
use super::node_id::is_valid_node_id;
use super::pae::{b64_encode, pae, serde_b64, serde_b64_opt};

/// Domain separation for the identity self-signature.
pub const IDENTITY_DOMAIN: &str = "outpost/identity/v1";

/// Why an identity document (or a peer key) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("identity document: invalid node_id")]
    NodeId,
    #[error("identity document: role must be \"node\" or \"gateway\"")]
    Role,
    #[error("identity document: created_at is not RFC 3339")]
    CreatedAt,
    #[error("identity document: sign_pk is not a valid Ed25519 public key")]
    SignKey,
    #[error("identity document: sign_pk is a weak (small-order) Ed25519 key")]
    WeakSignKey,
    #[error("identity document: kex_pk is not 32 bytes")]
    KexKey,
    #[error("identity document: kex_pk is a small-order or zero X25519 key")]
    WeakKexKey,
    #[error("identity document: self_sig does not verify")]
    BadSelfSig,
    #[error("identity document: tls_spki_sha256 is not 32 bytes, or not on a gateway's document")]
    TlsPin,
}

/// The public identity of a process. Field order is the JSON order the CLI prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct IdentityDocument {
    pub node_id: String,
    pub role: String,
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub sign_pk: Vec<u8>,
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub kex_pk: Vec<u8>,
    /// RFC 3339 text; signed exactly as it appears, so it is never re-formatted.
    pub created_at: String,
    /// A gateway's TLS pin: SHA-256 of the DER SubjectPublicKeyInfo of the certificate
    /// it serves (PROTOCOL §2.1). Optional and signed when present; a document without
    /// it is signed (and verifies) exactly as before the field existed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "serde_b64_opt"
    )]
    #[cfg_attr(test, schemars(with = "Option<String>"))]
    pub tls_spki_sha256: Option<Vec<u8>>,
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub self_sig: Vec<u8>,
}

impl IdentityDocument {
    /// Build and self-sign this process's document.
    pub fn new(node_id: &str, role: &str, keys: &Keys, created_at: &str) -> Self {
        Self::with_tls_pin(node_id, role, keys, created_at, None)
    }

    /// [`IdentityDocument::new`] with a gateway's TLS pin (`tls_spki_sha256`), signed too.
    pub fn with_tls_pin(
        node_id: &str,
        role: &str,
        keys: &Keys,
        created_at: &str,
        tls_spki_sha256: Option<[u8; 32]>,
    ) -> Self {
        let sign_pk = keys.sign_pk().to_bytes().to_vec();
        let kex_pk = keys.kex_pk().to_bytes().to_vec();
        let pin = tls_spki_sha256.map(|p| p.to_vec());
        let msg = signed_bytes(node_id, role, &sign_pk, &kex_pk, created_at, pin.as_deref());
        Self {
            node_id: node_id.to_owned(),
            role: role.to_owned(),
            sign_pk,
            kex_pk,
            created_at: created_at.to_owned(),
            tls_spki_sha256: pin,
            self_sig: keys.sign(&msg).to_vec(),
        }
    }

    /// The TLS pin as 32 bytes (only ever set on a verified gateway document).
    pub fn tls_pin(&self) -> Option<[u8; 32]> {
        self.tls_spki_sha256
            .as_deref()
            .and_then(|p| <[u8; 32]>::try_from(p).ok())
    }

    /// Syntax, key hygiene and the self-signature (strict Ed25519 verification).
    pub fn verify(&self) -> Result<VerifiedKeys, IdentityError> {
        if !is_valid_node_id(&self.node_id) {
            return Err(IdentityError::NodeId);
        }
        if self.role != "node" && self.role != "gateway" {
            return Err(IdentityError::Role);
        }
        if time::OffsetDateTime::parse(
            &self.created_at,
            &time::format_description::well_known::Rfc3339,
        )
        .is_err()
        {
            return Err(IdentityError::CreatedAt);
        }
        if let Some(pin) = &self.tls_spki_sha256 {
            if pin.len() != 32 || self.role != "gateway" {
                return Err(IdentityError::TlsPin);
            }
        }
        let sign = parse_sign_pk(&self.sign_pk)?;
        let kex = parse_kex_pk(&self.kex_pk)?;
        let sig = <[u8; 64]>::try_from(self.self_sig.as_slice())
            .map_err(|_| IdentityError::BadSelfSig)?;
        let msg = signed_bytes(
            &self.node_id,
            &self.role,
            &self.sign_pk,
            &self.kex_pk,
            &self.created_at,
            self.tls_spki_sha256.as_deref(),
        );
        sign.verify_strict(&msg, &Signature::from_bytes(&sig))
            .map_err(|_| IdentityError::BadSelfSig)?;
        Ok(VerifiedKeys { sign, kex })
    }

    /// `sign_pk` as base64url, e.g. for listings.
    pub fn sign_pk_b64(&self) -> String {
        b64_encode(&self.sign_pk)
    }
}

/// Decoded public keys of a verified document, cached so hot paths skip decompression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifiedKeys {
    pub sign: VerifyingKey,
    pub kex: [u8; 32],
}

fn signed_bytes(
    node_id: &str,
    role: &str,
    sign_pk: &[u8],
    kex_pk: &[u8],
    created_at: &str,
    tls_spki_sha256: Option<&[u8]>,
) -> Vec<u8> {
    let mut pieces: Vec<&[u8]> = vec![
        IDENTITY_DOMAIN.as_bytes(),
        node_id.as_bytes(),
        role.as_bytes(),
        sign_pk,
        kex_pk,
        created_at.as_bytes(),
    ];
    // PAE counts its pieces, so the 7-piece form can never equal a 6-piece one: a pin
    // cannot be added to, or stripped from, a signed document.
    if let Some(pin) = tls_spki_sha256 {
        pieces.push(pin);
    }
    pae(&pieces)
}

/// An Ed25519 public key we are willing to trust: a valid point, not of small order.
pub fn parse_sign_pk(bytes: &[u8]) -> Result<VerifyingKey, IdentityError> {
    let arr = <[u8; 32]>::try_from(bytes).map_err(|_| IdentityError::SignKey)?;
    let vk = VerifyingKey::from_bytes(&arr).map_err(|_| IdentityError::SignKey)?;
    if vk.is_weak() {
        return Err(IdentityError::WeakSignKey);
    }
    Ok(vk)
}

/// An X25519 public key we are willing to encrypt to: 32 bytes and not of small order
/// (including non-canonical encodings of small-order points and zero).
///
/// Test: multiply by a fixed clamped scalar. Clamped scalars are multiples of the cofactor
/// 8, so every point of order dividing 8 maps to the all-zero output, and no other point
/// does; the HPKE all-zero check would otherwise only fire at seal time.
pub fn parse_kex_pk(bytes: &[u8]) -> Result<[u8; 32], IdentityError> {
    let arr = <[u8; 32]>::try_from(bytes).map_err(|_| IdentityError::KexKey)?;
    if !kex_pk_is_contributory(&arr) {
        return Err(IdentityError::WeakKexKey);
    }
    Ok(arr)
}

/// False for public keys whose Diffie–Hellman output is all-zero (small order).
pub fn kex_pk_is_contributory(pk: &[u8; 32]) -> bool {
    let probe = x25519_dalek::StaticSecret::from([0x5a; 32]);
    probe
        .diffie_hellman(&x25519_dalek::PublicKey::from(*pk))
        .was_contributory()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> (Keys, IdentityDocument) {
        let k = Keys::from_secret_bytes(&[1u8; 32], &[2u8; 32]);
        let d = IdentityDocument::new("node:pump-17", "node", &k, "2026-11-22T06:00:00Z");
        (k, d)
    }

    #[test]
    fn roundtrip_and_verify() {
        let (k, d) = doc();
        let v = d.verify().unwrap();
        assert_eq!(v.sign, k.sign_pk());
        let json = serde_json::to_string(&d).unwrap();
        let back: IdentityDocument = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
        back.verify().unwrap();
    }

    #[test]
    fn every_field_is_bound() {
        let (_, d) = doc();
        let mut cases = Vec::new();
        let mut x = d.clone();
        x.node_id = "node:pump-18".into();
        cases.push((x, IdentityError::BadSelfSig));
        let mut x = d.clone();
        x.role = "gateway".into();
        cases.push((x, IdentityError::BadSelfSig));
        let mut x = d.clone();
        x.created_at = "2026-11-22T06:00:00+00:00".into();
        cases.push((x, IdentityError::BadSelfSig));
        let mut x = d.clone();
        x.kex_pk = Keys::generate().kex_pk().to_bytes().to_vec();
        cases.push((x, IdentityError::BadSelfSig));
        let mut x = d.clone();
        x.sign_pk = Keys::generate().sign_pk().to_bytes().to_vec();
        cases.push((x, IdentityError::BadSelfSig));
        let mut x = d.clone();
        x.self_sig[0] ^= 1;
        cases.push((x, IdentityError::BadSelfSig));
        let mut x = d.clone();
        x.role = "admin".into();
        cases.push((x, IdentityError::Role));
        let mut x = d.clone();
        x.created_at = "yesterday".into();
        cases.push((x, IdentityError::CreatedAt));
        for (x, want) in cases {
            assert_eq!(x.verify().unwrap_err(), want, "{x:?}");
        }
    }

    /// A gateway's TLS pin is signed: it cannot be added, stripped or changed; a
    /// document without one is the same JSON and the same signature as before the field.
    #[test]
    fn the_tls_pin_is_bound_and_optional() {
        let k = Keys::from_secret_bytes(&[1u8; 32], &[2u8; 32]);
        let at = "2026-11-22T06:00:00Z";
        let plain = IdentityDocument::new("gateway:main", "gateway", &k, at);
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("tls_spki_sha256"), "{json}");
        let pinned =
            IdentityDocument::with_tls_pin("gateway:main", "gateway", &k, at, Some([7u8; 32]));
        pinned.verify().unwrap();
        let json = serde_json::to_string(&pinned).unwrap();
        assert!(json.contains("\"tls_spki_sha256\":\""), "{json}");
        let back: IdentityDocument = serde_json::from_str(&json).unwrap();
        assert_eq!(back.tls_pin(), Some([7u8; 32]));
        back.verify().unwrap();
        assert_ne!(pinned.self_sig, plain.self_sig);

        let mut x = pinned.clone();
        x.tls_spki_sha256 = None;
        assert_eq!(x.verify().unwrap_err(), IdentityError::BadSelfSig);
        let mut x = pinned.clone();
        x.tls_spki_sha256 = Some(vec![8u8; 32]);
        assert_eq!(x.verify().unwrap_err(), IdentityError::BadSelfSig);
        let mut x = plain.clone();
        x.tls_spki_sha256 = Some(vec![7u8; 32]);
        assert_eq!(x.verify().unwrap_err(), IdentityError::BadSelfSig);
        let mut x = pinned.clone();
        x.tls_spki_sha256 = Some(vec![7u8; 31]);
        assert_eq!(x.verify().unwrap_err(), IdentityError::TlsPin);
        let node = IdentityDocument::with_tls_pin("node:a", "node", &k, at, Some([7u8; 32]));
        assert_eq!(node.verify().unwrap_err(), IdentityError::TlsPin);
    }

    #[test]
    fn refuses_small_order_keys() {
        // Identity point of Ed25519 (small order) and u = 0 / u = 1 for X25519.
        let mut ident = [0u8; 32];
        ident[0] = 1;
        assert_eq!(
            parse_sign_pk(&ident).unwrap_err(),
            IdentityError::WeakSignKey
        );
        assert_eq!(
            parse_kex_pk(&[0u8; 32]).unwrap_err(),
            IdentityError::WeakKexKey
        );
        assert_eq!(parse_kex_pk(&ident).unwrap_err(), IdentityError::WeakKexKey);
        assert!(parse_kex_pk(&[9u8; 32]).is_ok());
        // A correctly self-signed document with a small-order kex key is still refused.
        let k = Keys::generate();
        let mut d = IdentityDocument::new("node:x", "node", &k, "2026-11-22T06:00:00Z");
        d.kex_pk = vec![0u8; 32];
        let msg = signed_bytes(
            &d.node_id,
            &d.role,
            &d.sign_pk,
            &d.kex_pk,
            &d.created_at,
            None,
        );
        d.self_sig = k.sign(&msg).to_vec();
        assert_eq!(d.verify().unwrap_err(), IdentityError::WeakKexKey);
    }
}
