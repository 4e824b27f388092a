//! Sealing: HPKE base mode to the recipient's `kex_pk`, then Ed25519 over the result.
//!
//! Encrypt-then-sign: the signature covers header, `enc` and ciphertext, and the header
//! (which names the sender) is also the AEAD `aad`, so a third party who strips the
//! signature and re-signs with its own key changes `sender_node_id` and decryption fails.

use rand_core::{CryptoRng, RngCore};

use super::identity::IdentityDocument;
use super::keys::Keys;
use super::node_id::is_valid_node_id;
use super::wire::{
    header_pae, hpke_info, is_valid_message_id, is_valid_payload_type, signed_pae, Envelope,
    HeaderRef, ENVELOPE_VERSION, SUITE,
};

/// Header values chosen by the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealParams {
    pub message_id: String,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub payload_type: String,
    pub priority: u64,
}

/// Why an envelope could not be sealed (all caller mistakes; nothing secret in them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("seal: invalid {0}")]
    Invalid(&'static str),
    #[error("seal: plaintext must be a JSON object")]
    NotJsonObject,
    #[error("seal: recipient kex_pk is unusable")]
    RecipientKey,
}

/// Seal `plaintext` (a JSON object) from `sender` to `recipient`.
///
/// `rng` supplies the 32-byte HPKE ephemeral IKM (RFC 9180 `GenerateKeyPair` =
/// `DeriveKeyPair(random(32))`): pass `OsRng` in production and the tests' `FixedRng` to build
/// known-answer vectors. Ed25519 signing is deterministic, so the output is a pure
/// function of inputs and the RNG bytes.
pub fn seal<R: RngCore + CryptoRng>(
    sender: &Keys,
    sender_node_id: &str,
    recipient: &IdentityDocument,
    params: &SealParams,
    plaintext: &[u8],
    rng: &mut R,
) -> Result<Envelope, SealError> {
    if !is_valid_node_id(sender_node_id) {
        return Err(SealError::Invalid("sender_node_id"));
    }
    if !is_valid_node_id(&recipient.node_id) {
        return Err(SealError::Invalid("recipient_node_id"));
    }
    if !is_valid_message_id(&params.message_id) {
        return Err(SealError::Invalid("message_id"));
    }
    if !is_valid_payload_type(&params.payload_type) {
        return Err(SealError::Invalid("payload_type"));
    }
    if params.expires_at_ms <= params.created_at_ms {
        return Err(SealError::Invalid(
            "expires_at_ms (must be after created_at_ms)",
        ));
    }
    if !is_json_object(plaintext) {
        return Err(SealError::NotJsonObject);
    }
    // Length only: HPKE's own all-zero DH check refuses small-order keys during encap
    // (RFC 9180 §7.1.4), and documents in the trust store were already vetted by
    // `IdentityDocument::verify`; a second scalar multiplication here would cost ~20 %.
    let kex =
        <[u8; 32]>::try_from(recipient.kex_pk.as_slice()).map_err(|_| SealError::RecipientKey)?;
    let header = header_pae(&HeaderRef {
        message_id: &params.message_id,
        sender_node_id,
        recipient_node_id: &recipient.node_id,
        created_at_ms: params.created_at_ms,
        expires_at_ms: params.expires_at_ms,
        payload_type: &params.payload_type,
        priority: params.priority,
    });
    let (enc, ciphertext) = hpke_seal(
        &kex,
        &hpke_info(&recipient.node_id),
        plaintext,
        &header,
        rng,
    )?;
    let signature = sender
        .sign(&signed_pae(&header, &enc, &ciphertext))
        .to_vec();
    Ok(Envelope {
        v: ENVELOPE_VERSION,
        suite: SUITE.to_owned(),
        message_id: params.message_id.clone(),
        sender_node_id: sender_node_id.to_owned(),
        recipient_node_id: recipient.node_id.clone(),
        created_at_ms: params.created_at_ms,
        expires_at_ms: params.expires_at_ms,
        payload_type: params.payload_type.clone(),
        priority: params.priority,
        enc,
        ciphertext,
        signature,
    })
}

/// Single-shot HPKE base-mode seal with outpost's suite ([`super::hpke_base`]).
/// Returns (`enc`, ciphertext‖tag).
pub fn hpke_seal<R: RngCore + CryptoRng>(
    recipient_kex_pk: &[u8; 32],
    info: &[u8],
    plaintext: &[u8],
    aad: &[u8],
    rng: &mut R,
) -> Result<(Vec<u8>, Vec<u8>), SealError> {
    // With a 32-byte key the only failure is the all-zero shared secret (a small-order
    // recipient key).
    let (enc, ct) = super::hpke_base::seal(recipient_kex_pk, info, plaintext, aad, rng)
        .map_err(|_| SealError::RecipientKey)?;
    Ok((enc.to_vec(), ct))
}

/// The HPKE ephemeral public key `DeriveKeyPair(ikm)` yields (for vector tooling).
pub fn hpke_derive_public(ikm: &[u8]) -> [u8; 32] {
    super::hpke_base::derive_key_pair(ikm).1.to_bytes()
}

/// Valid JSON whose top-level value is an object, validated without building a tree
/// (`IgnoredAny`): a valid JSON text whose first non-blank byte is `{` is an object.
pub(crate) fn is_json_object(bytes: &[u8]) -> bool {
    let first = bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    first == Some(&b'{') && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

/// An "RNG" that replays fixed bytes: for known-answer vectors only.
///
/// Marked `CryptoRng` because the type system requires it; never use it outside tests
/// and vector generation (the bytes are public). Panics-free: once exhausted it repeats
/// from the start.
#[cfg(test)]
#[derive(Debug, Clone)]
pub struct FixedRng {
    bytes: Vec<u8>,
    pos: usize,
}

#[cfg(test)]
impl FixedRng {
    pub fn new(bytes: &[u8]) -> Self {
        Self {
            bytes: if bytes.is_empty() {
                vec![0]
            } else {
                bytes.to_vec()
            },
            pos: 0,
        }
    }
}

#[cfg(test)]
impl RngCore for FixedRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for d in dst {
            *d = self.bytes[self.pos % self.bytes.len()];
            self.pos = (self.pos + 1) % self.bytes.len();
        }
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dst);
        Ok(())
    }
}

#[cfg(test)]
impl CryptoRng for FixedRng {}

#[cfg(test)]
mod tests {
    use super::is_json_object;

    #[test]
    fn json_object_detection() {
        for ok in [&b"{}"[..], b" \n{\"a\":[1,{}]}\t", br#"{"k":"v"}"#] {
            assert!(is_json_object(ok), "{:?}", String::from_utf8_lossy(ok));
        }
        let bad: [&[u8]; 9] = [
            b"",
            b"[]",
            b"1",
            b"\"s\"",
            b"{",
            b"{} {}",
            b"{\"a\":}",
            b"null",
            b"\xef\xbb\xbf{}",
        ];
        for b in bad {
            assert!(!is_json_object(b), "{:?}", String::from_utf8_lossy(b));
        }
    }
}
