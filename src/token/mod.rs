//! Capability tokens: PASETO v4.public (`docs/PROTOCOL.md` §4).
//!
//! Pure: no I/O, no clock. Tokens are verified fully offline against the trust store.
//!
//! ## API the rest of outpost calls
//!
//! - [`Claims::new`]`(iss, sub, aud, scopes, now_ms, ttl_ms, jti)` then
//!   [`issue`]`(&keys, &claims) -> Result<String, TokenError>` (footer `{"kid":iss}`).
//! - [`inspect`]`(token) -> Result<(Claims, Footer), TokenError>`: unverified, for the CLI.
//! - [`check`]`(token, &Request::tool(me, name), now_ms, skew_ms, &trust, &revoked)
//!   -> Decision` (`Allow { claims }` | `Deny { code, reason }`).
//!
//! ## HTTP mapping of a `Deny`
//!
//! | reason | code | status |
//! |---|---|---|
//! | `missing`, `malformed`, `bad_signature`, `unknown_issuer`, `expired`, `not_yet_valid` | `unauthorized` | 401 |
//! | `issuer_not_allowed`, `wrong_audience`, `missing_scope`, `revoked` | `forbidden` | 403 |
//!
//! Use [`DenyCode::as_str`] as the API error code and [`DenyReason::as_str`] in the
//! message / audit detail.

mod check;
mod claims;
mod gate;
mod issue;
pub mod paseto;

#[cfg(test)]
mod tests;

pub use check::{
    check, check_cached, explain, scopes_cover, Decision, DenyCode, DenyReason, Need, Request,
    VerifyCache,
};
pub use claims::{format_rfc3339_ms, parse_rfc3339_ms, ClaimTimes, Claims, ClaimsError, Footer};
pub use gate::{Book, Gate, Refusal};
pub use issue::{inspect, issue, TokenError};
