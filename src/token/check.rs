//! The pure authorization decision for a capability token.
//!
//! Order: authenticity first (parse, issuer known, signature by the footer's issuer,
//! claims well-formed, `iss` = `kid`, time window), then authorization (issuer may issue,
//! audience, scope, revocation). Failures in the first group mean "this is not a valid
//! token" → `unauthorized` (HTTP 401); in the second, "valid token, not for this" →
//! `forbidden` (HTTP 403).
//!
//! Time: skew may make a token usable slightly *before* `nbf`/`iat` (the issuer's clock
//! may be ahead), but never after `exp`: SPEC §3 "no token ever authorizes anything after
//! exp", and a device with a slow clock is covered by the store's time floor, not by skew.

use super::claims::Claims;
use super::issue::{parse_claims, parse_footer};
use super::paseto::{self, Parsed};
use crate::envelope::TrustStore;

/// What is being asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    /// Calling tool `name`: covered by `tool:<name>`, `tool:*` or `admin`.
    Tool(&'a str),
    /// A named scope (e.g. `admin` for the inbox): covered by itself or `admin`;
    /// a `tool:…` scope is also covered by `tool:*`.
    Scope(&'a str),
}

/// The request a token is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// This node's id (the audience the token must name, or `*`).
    pub node_id: &'a str,
    pub need: Need<'a>,
}

impl<'a> Request<'a> {
    pub fn tool(node_id: &'a str, tool_name: &'a str) -> Self {
        Self {
            node_id,
            need: Need::Tool(tool_name),
        }
    }
    pub fn scope(node_id: &'a str, scope: &'a str) -> Self {
        Self {
            node_id,
            need: Need::Scope(scope),
        }
    }
}

/// HTTP-facing class of a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyCode {
    /// 401: missing, malformed, bad signature, unknown issuer, expired, not yet valid.
    Unauthorized,
    /// 403: issuer without `issue`, wrong audience, missing scope, revoked.
    Forbidden,
}

impl DenyCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
        }
    }
    pub fn http_status(self) -> u16 {
        match self {
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
        }
    }
}

/// The precise reason (for logs, audit `detail` and metrics; safe to show the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    Missing,
    Malformed,
    UnknownIssuer,
    BadSignature,
    Expired,
    NotYetValid,
    IssuerNotAllowed,
    WrongAudience,
    MissingScope,
    Revoked,
}

impl DenyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::UnknownIssuer => "unknown_issuer",
            Self::BadSignature => "bad_signature",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::IssuerNotAllowed => "issuer_not_allowed",
            Self::WrongAudience => "wrong_audience",
            Self::MissingScope => "missing_scope",
            Self::Revoked => "revoked",
        }
    }

    pub fn code(self) -> DenyCode {
        match self {
            Self::Missing
            | Self::Malformed
            | Self::UnknownIssuer
            | Self::BadSignature
            | Self::Expired
            | Self::NotYetValid => DenyCode::Unauthorized,
            Self::IssuerNotAllowed | Self::WrongAudience | Self::MissingScope | Self::Revoked => {
                DenyCode::Forbidden
            }
        }
    }
}

/// The outcome of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow { claims: Claims },
    Deny { code: DenyCode, reason: DenyReason },
}

impl Decision {
    fn deny(reason: DenyReason) -> Self {
        Self::Deny {
            code: reason.code(),
            reason,
        }
    }
    pub fn is_allow(&self) -> bool {
        matches!(self, Self::Allow { .. })
    }
}

/// Decide whether `token` authorizes `req` at `now_ms` (= max(clock, time floor)).
///
/// `revoked(jti)` answers from the revocation list synced from the gateway.
pub fn check(
    token: &str,
    req: &Request<'_>,
    now_ms: u64,
    skew_ms: u64,
    trust: &TrustStore,
    revoked: &dyn Fn(&str) -> bool,
) -> Decision {
    use DenyReason as R;
    if token.is_empty() {
        return Decision::deny(R::Missing);
    }
    let Ok(parsed) = Parsed::parse(token) else {
        return Decision::deny(R::Malformed);
    };
    let Ok(footer) = parse_footer(parsed.footer()) else {
        return Decision::deny(R::Malformed);
    };
    let Some(issuer) = trust.get(&footer.kid) else {
        return Decision::deny(R::UnknownIssuer);
    };
    let Ok(payload) = paseto::verify(issuer.keys.sign.as_bytes(), &parsed, b"") else {
        return Decision::deny(R::BadSignature);
    };
    let Ok(claims) = parse_claims(&payload) else {
        return Decision::deny(R::Malformed);
    };
    let Ok(times) = claims.validate() else {
        return Decision::deny(R::Malformed);
    };
    if claims.iss != footer.kid {
        return Decision::deny(R::Malformed);
    }
    if now_ms >= times.exp_ms {
        return Decision::deny(R::Expired);
    }
    let earliest = times.nbf_ms.max(times.iat_ms);
    if now_ms.saturating_add(skew_ms) < earliest {
        return Decision::deny(R::NotYetValid);
    }
    if !issuer.rights.issue {
        return Decision::deny(R::IssuerNotAllowed);
    }
    if claims.aud != "*" && claims.aud != req.node_id {
        return Decision::deny(R::WrongAudience);
    }
    if !scopes_cover(&claims.scopes, req.need) {
        return Decision::deny(R::MissingScope);
    }
    if revoked(&claims.jti) {
        return Decision::deny(R::Revoked);
    }
    Decision::Allow { claims }
}

/// Whether `scopes` grant `need` (see [`Need`]).
pub fn scopes_cover(scopes: &[String], need: Need<'_>) -> bool {
    let has = |s: &str| scopes.iter().any(|x| x == s);
    if has("admin") {
        return true;
    }
    match need {
        Need::Tool(name) => {
            has("tool:*") || scopes.iter().any(|s| s.strip_prefix("tool:") == Some(name))
        }
        Need::Scope(s) => has(s) || (s.starts_with("tool:") && has("tool:*")),
    }
}
