//! PASETO v4.public on the Ed25519 the envelopes already use (`ed25519-dalek`), with the
//! implicit assertion exposed so the official test vectors run through the same code as
//! outpost's tokens (which use an empty implicit assertion).
//!
//! v4.public (PASETO `Version4.md`): the token is `v4.public.` ‖ b64url(m ‖ sig) and, when
//! the footer `f` is not empty, `.` ‖ b64url(f); `sig` is Ed25519 over
//! `PAE("v4.public.", m, f, i)` with `i` the implicit assertion. Parsing and refusals
//! follow `pasetors` 0.7 (which this replaced, and which the tests still cross-check
//! against): three or four dot-separated parts, a non-empty payload longer than the
//! 64-byte signature, strict base64url without padding, a UTF-8 payload.

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey, SIGNATURE_LENGTH};

use crate::envelope::Keys;
use crate::envelope::{b64_decode, b64_encode, pae};

const HEADER: &str = "v4.public.";

/// Why a PASETO operation failed (deliberately coarse: details help attackers, not users).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasetoError {
    #[error("token is not a well-formed v4.public PASETO")]
    Malformed,
    #[error("token signature does not verify")]
    BadSignature,
    #[error("PASETO signing failed")]
    Sign,
}

/// An untrusted, parsed `v4.public` token.
pub struct Parsed {
    /// The decoded body: payload ‖ 64-byte signature (longer than the signature).
    message: Vec<u8>,
    footer: Vec<u8>,
}

impl Parsed {
    pub fn parse(token: &str) -> Result<Self, PasetoError> {
        let rest = token.strip_prefix(HEADER).ok_or(PasetoError::Malformed)?;
        let mut parts = rest.split('.');
        let body = parts.next().unwrap_or_default();
        let footer = parts.next();
        if body.is_empty() || parts.next().is_some() {
            return Err(PasetoError::Malformed);
        }
        let message = b64_decode(body).map_err(|_| PasetoError::Malformed)?;
        if message.len() <= SIGNATURE_LENGTH {
            return Err(PasetoError::Malformed);
        }
        let footer = match footer {
            Some(f) => b64_decode(f).map_err(|_| PasetoError::Malformed)?,
            None => Vec::new(),
        };
        Ok(Self { message, footer })
    }

    /// The message (claims JSON) — unauthenticated until [`verify`] succeeds.
    pub fn payload(&self) -> &[u8] {
        &self.message[..self.message.len() - SIGNATURE_LENGTH]
    }

    /// The footer bytes (may be empty) — unauthenticated until [`verify`] succeeds.
    pub fn footer(&self) -> &[u8] {
        &self.footer
    }

    fn signature(&self) -> Signature {
        let s = &self.message[self.message.len() - SIGNATURE_LENGTH..];
        let mut sig = [0u8; SIGNATURE_LENGTH];
        sig.copy_from_slice(s);
        Signature::from_bytes(&sig)
    }
}

/// Sign `message` as `v4.public` with `keys`' Ed25519 key.
pub fn sign(
    keys: &Keys,
    message: &[u8],
    footer: &[u8],
    implicit: &[u8],
) -> Result<String, PasetoError> {
    sign_with_key(keys.signing_key(), message, footer, implicit)
}

/// Sign with a 64-byte `seed ‖ pk` secret key (the PASETO vectors' format).
pub fn sign_with_keypair(
    keypair: &[u8],
    message: &[u8],
    footer: &[u8],
    implicit: &[u8],
) -> Result<String, PasetoError> {
    let kp: &[u8; 64] = keypair.try_into().map_err(|_| PasetoError::Sign)?;
    // Zeroized on drop (ed25519-dalek's `zeroize` feature).
    let sk = SigningKey::from_keypair_bytes(kp).map_err(|_| PasetoError::Sign)?;
    sign_with_key(&sk, message, footer, implicit)
}

fn sign_with_key(
    sk: &SigningKey,
    message: &[u8],
    footer: &[u8],
    implicit: &[u8],
) -> Result<String, PasetoError> {
    if message.is_empty() {
        return Err(PasetoError::Sign);
    }
    let sig = sk.sign(&pae(&[HEADER.as_bytes(), message, footer, implicit]));
    let mut body = Vec::with_capacity(message.len() + SIGNATURE_LENGTH);
    body.extend_from_slice(message);
    body.extend_from_slice(&sig.to_bytes());
    let mut token = format!("{HEADER}{}", b64_encode(&body));
    if !footer.is_empty() {
        token.push('.');
        token.push_str(&b64_encode(footer));
    }
    Ok(token)
}

/// Verify `token` with a raw 32-byte Ed25519 public key; returns the authenticated payload.
pub fn verify(public_key: &[u8], token: &Parsed, implicit: &[u8]) -> Result<Vec<u8>, PasetoError> {
    let pk: &[u8; 32] = public_key
        .try_into()
        .map_err(|_| PasetoError::BadSignature)?;
    let pk = VerifyingKey::from_bytes(pk).map_err(|_| PasetoError::BadSignature)?;
    let m = token.payload();
    let m2 = pae(&[HEADER.as_bytes(), m, &token.footer, implicit]);
    pk.verify_strict(&m2, &token.signature())
        .map_err(|_| PasetoError::BadSignature)?;
    // A verified payload is text (PASETO payloads are JSON; pasetors refused others).
    std::str::from_utf8(m).map_err(|_| PasetoError::BadSignature)?;
    Ok(m.to_vec())
}
