//! Minting and unverified inspection of capability tokens.

use super::claims::{Claims, ClaimsError, Footer};
use super::paseto::{self, Parsed, PasetoError};
use crate::envelope::Keys;

/// Errors of `issue` / `inspect`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Claims(#[from] ClaimsError),
    #[error(transparent)]
    Paseto(#[from] PasetoError),
    #[error("token claims are not the expected JSON object: {0}")]
    ClaimsJson(String),
    #[error("token footer is not {{\"kid\":\"<issuer node id>\"}}")]
    Footer,
}

/// Sign `claims` with the issuer's key. The footer is `{"kid":claims.iss}`, so the caller
/// must pass claims whose `iss` is this identity's node id.
pub fn issue(keys: &Keys, claims: &Claims) -> Result<String, TokenError> {
    claims.validate()?;
    let body = serde_json::to_vec(claims).map_err(|e| TokenError::ClaimsJson(e.to_string()))?;
    let footer = serde_json::to_vec(&Footer {
        kid: claims.iss.clone(),
    })
    .map_err(|e| TokenError::ClaimsJson(e.to_string()))?;
    Ok(paseto::sign(keys, &body, &footer, b"")?)
}

/// Parse a token WITHOUT verifying it (for `outpost token inspect`). Never base a
/// decision on this: use [`super::check`].
pub fn inspect(token: &str) -> Result<(Claims, Footer), TokenError> {
    let parsed = Parsed::parse(token)?;
    let footer = parse_footer(parsed.footer())?;
    let claims = parse_claims(parsed.payload())?;
    Ok((claims, footer))
}

pub(crate) fn parse_footer(bytes: &[u8]) -> Result<Footer, TokenError> {
    serde_json::from_slice(bytes).map_err(|_| TokenError::Footer)
}

pub(crate) fn parse_claims(bytes: &[u8]) -> Result<Claims, TokenError> {
    serde_json::from_slice(bytes)
        .map_err(|e| TokenError::ClaimsJson(e.to_string().chars().take(200).collect()))
}
