//! Thin wrappers over `pasetors` for PASETO v4.public, with the implicit assertion exposed
//! so the official test vectors run through the same code as outpost's tokens (which use
//! an empty implicit assertion).

use pasetors::keys::{AsymmetricPublicKey, AsymmetricSecretKey};
use pasetors::token::UntrustedToken;
use pasetors::version4::{PublicToken, V4};
use pasetors::Public;
use zeroize::Zeroizing;

use crate::envelope::Keys;

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
pub struct Parsed(UntrustedToken<Public, V4>);

impl Parsed {
    pub fn parse(token: &str) -> Result<Self, PasetoError> {
        UntrustedToken::<Public, V4>::try_from(token)
            .map(Self)
            .map_err(|_| PasetoError::Malformed)
    }

    /// The message (claims JSON) — unauthenticated until [`verify`] succeeds.
    pub fn payload(&self) -> &[u8] {
        self.0.untrusted_payload()
    }

    /// The footer bytes (may be empty) — unauthenticated until [`verify`] succeeds.
    pub fn footer(&self) -> &[u8] {
        self.0.untrusted_footer()
    }
}

/// Sign `message` as `v4.public` with `keys`' Ed25519 key.
pub fn sign(
    keys: &Keys,
    message: &[u8],
    footer: &[u8],
    implicit: &[u8],
) -> Result<String, PasetoError> {
    let kp = Zeroizing::new(keys.signing_key().to_keypair_bytes());
    sign_with_keypair(&kp[..], message, footer, implicit)
}

/// Sign with a 64-byte `seed ‖ pk` secret key (the PASETO vectors' format).
pub fn sign_with_keypair(
    keypair: &[u8],
    message: &[u8],
    footer: &[u8],
    implicit: &[u8],
) -> Result<String, PasetoError> {
    let sk = AsymmetricSecretKey::<V4>::from(keypair).map_err(|_| PasetoError::Sign)?;
    PublicToken::sign(&sk, message, opt(footer), opt(implicit)).map_err(|_| PasetoError::Sign)
}

/// Verify `token` with a raw 32-byte Ed25519 public key; returns the authenticated payload.
pub fn verify(public_key: &[u8], token: &Parsed, implicit: &[u8]) -> Result<Vec<u8>, PasetoError> {
    let pk = AsymmetricPublicKey::<V4>::from(public_key).map_err(|_| PasetoError::BadSignature)?;
    let trusted = PublicToken::verify(&pk, &token.0, None, opt(implicit))
        .map_err(|_| PasetoError::BadSignature)?;
    Ok(trusted.payload().as_bytes().to_vec())
}

fn opt(b: &[u8]) -> Option<&[u8]> {
    if b.is_empty() {
        None
    } else {
        Some(b)
    }
}
