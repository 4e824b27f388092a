//! The pure authorization decision for a capability token.
//!
//! Order: authenticity first (parse, issuer known, signature by the footer's issuer,
//! claims well-formed, `iss` = `kid`, time window), then authorization (issuer may issue,
//! audience, scope, revocation). Failures in the first group mean "this is not a valid
//! token" → `unauthorized` (HTTP 401); in the second, "valid token, not for this" →
//! `forbidden` (HTTP 403).
//!
//! Time: skew may make a token usable slightly *before* `nbf`/`iat` (the issuer's clock
//! may be ahead), but never after `exp` (PROTOCOL §4.2: nothing is authorized after `exp`, ever),
//! and a device with a slow clock is covered by the store's time floor, not by skew.

use super::claims::{ClaimTimes, Claims};
use super::issue::{parse_claims, parse_footer};
use super::paseto::{self, Parsed};
use crate::envelope::{Peer, TrustStore};

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
    /// Whether the verifier knows tenants (a gateway, PROTOCOL §18): a node does not,
    /// and refuses a token naming one rather than ignore what it restricts.
    pub tenants: bool,
}

impl<'a> Request<'a> {
    pub fn tool(node_id: &'a str, tool_name: &'a str) -> Self {
        Self {
            node_id,
            need: Need::Tool(tool_name),
            tenants: false,
        }
    }
    pub fn scope(node_id: &'a str, scope: &'a str) -> Self {
        Self {
            node_id,
            need: Need::Scope(scope),
            tenants: false,
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
    /// The token names a tenant and the verifier knows none (a node).
    TenantToken,
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
            Self::TenantToken => "tenant_token",
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
            Self::IssuerNotAllowed
            | Self::WrongAudience
            | Self::MissingScope
            | Self::Revoked
            | Self::TenantToken => DenyCode::Forbidden,
        }
    }
}

impl Request<'_> {
    /// What would allow this request, in words: the scopes that cover it.
    fn covered_by(&self) -> String {
        match self.need {
            Need::Tool(name) => format!("`tool:{name}`, `tool:*` or `admin`"),
            Need::Scope("admin") => "`admin`".to_string(),
            Need::Scope(s) if s.starts_with("tool:") => format!("`{s}`, `tool:*` or `admin`"),
            Need::Scope(s) => format!("`{s}` or `admin`"),
        }
    }
}

/// The refusal's message for the caller: the reason's code, then what was needed and
/// how to get it. Names only this daemon's id and the scopes the request needs, never
/// anything about keys.
pub fn explain(reason: DenyReason, req: &Request<'_>) -> String {
    let why = match reason {
        DenyReason::Missing => {
            return "a capability token is required (body \"token\" or Authorization: Bearer)"
                .to_string()
        }
        DenyReason::Malformed => "not a PASETO v4.public token".to_string(),
        DenyReason::UnknownIssuer => format!(
            "its issuer is not trusted here: issue it with the key of {} (or of a peer added \
             with `outpost trust add <identity> --issue`)",
            req.node_id
        ),
        DenyReason::BadSignature => {
            "its signature does not verify under its issuer's key".to_string()
        }
        DenyReason::Expired => "it expired: issue a new one (and check the clocks)".to_string(),
        DenyReason::NotYetValid => {
            "it is not valid yet: the issuer's clock is ahead of this one".to_string()
        }
        DenyReason::IssuerNotAllowed => {
            "its issuer is trusted without the `issue` right (`outpost trust add <identity> \
             --issue`)"
                .to_string()
        }
        DenyReason::WrongAudience => format!(
            "its audience must be {} (this daemon) or `*` (`outpost token issue --aud {}`)",
            req.node_id, req.node_id
        ),
        DenyReason::MissingScope => format!(
            "it lacks the scope this needs: {} (`outpost token issue --scope …`)",
            req.covered_by()
        ),
        DenyReason::Revoked => "it was revoked".to_string(),
        DenyReason::TenantToken => {
            "it names a tenant: tenant tokens are for a gateway; a node takes tokens without \
             one (`outpost token issue` without --tenant)"
                .to_string()
        }
    };
    format!("token refused: {}: {why}", reason.as_str())
}

/// The outcome of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
// Returned by value once per check and matched at once, never stored: boxing the claims
// would add an allocation to every token check for nothing.
#[allow(clippy::large_enum_variant)]
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
    check_cached(token, req, now_ms, skew_ms, trust, revoked, None)
}

/// [`check`] with a memo of signature verifications (see [`VerifyCache`]): the same
/// decision, without repeating the Ed25519 verification of a token already seen with
/// the same issuer key.
pub fn check_cached(
    token: &str,
    req: &Request<'_>,
    now_ms: u64,
    skew_ms: u64,
    trust: &TrustStore,
    revoked: &dyn Fn(&str) -> bool,
    cache: Option<&VerifyCache>,
) -> Decision {
    use DenyReason as R;
    if token.is_empty() {
        return Decision::deny(R::Missing);
    }
    let (issuer, claims, times) = match cache.and_then(|c| c.lookup(token, trust, now_ms)) {
        Some(hit) => hit,
        None => match authenticate(token, trust, now_ms) {
            Ok((issuer, key, claims, times)) => {
                if let Some(c) = cache {
                    c.insert(token, &key, &claims, times);
                }
                (issuer, claims, times)
            }
            Err(reason) => return Decision::deny(reason),
        },
    };
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
    if claims.tenant.is_some() && !req.tenants {
        return Decision::deny(R::TenantToken);
    }
    if !scopes_cover(&claims.scopes, req.need) {
        return Decision::deny(R::MissingScope);
    }
    if revoked(&claims.jti) {
        return Decision::deny(R::Revoked);
    }
    Decision::Allow { claims }
}

/// Authenticity: parse, known issuer, signature by the footer's issuer (by its key, or
/// by the key a rotation retired while that key's grace lasts: tokens issued before
/// the rotation), well-formed claims naming that issuer. Everything here is a pure
/// function of the token and the issuer's key, which is what makes it safe to memoize;
/// the key it verified under is returned for the memo.
fn authenticate<'t>(
    token: &str,
    trust: &'t TrustStore,
    now_ms: u64,
) -> Result<(&'t Peer, [u8; 32], Claims, ClaimTimes), DenyReason> {
    use DenyReason as R;
    let parsed = Parsed::parse(token).map_err(|_| R::Malformed)?;
    let footer = parse_footer(parsed.footer()).map_err(|_| R::Malformed)?;
    let issuer = trust.get(&footer.kid).ok_or(R::UnknownIssuer)?;
    let (key, payload) = issuer
        .sign_keys(now_ms)
        .find_map(|k| {
            Some((
                *k.as_bytes(),
                paseto::verify(k.as_bytes(), &parsed, b"").ok()?,
            ))
        })
        .ok_or(R::BadSignature)?;
    let claims = parse_claims(&payload).map_err(|_| R::Malformed)?;
    let times = claims.validate().map_err(|_| R::Malformed)?;
    if claims.iss != footer.kid {
        return Err(R::Malformed);
    }
    Ok((issuer, key, claims, times))
}

/// A bounded memo of successful signature checks: token text → (issuer id, the issuer
/// key it verified under, its claims).
///
/// Verifying an Ed25519 signature is deterministic, so a hit is exactly as strong as
/// verifying again — *provided* the issuer still has that key, which every lookup
/// re-checks against the current trust store. Time window, issuer rights, audience,
/// scope and revocation are never cached: [`check_cached`] decides them on every call.
/// Only authentic tokens enter; a refused token is verified (and refused) every time.
/// When full, the memo is emptied (callers re-verify; nothing is ever wrongly allowed).
pub struct VerifyCache {
    map: std::sync::Mutex<std::collections::HashMap<String, Verified>>,
    capacity: usize,
}

struct Verified {
    issuer: String,
    key: [u8; 32],
    claims: Claims,
    times: ClaimTimes,
}

impl VerifyCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            map: std::sync::Mutex::new(std::collections::HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lookup<'t>(
        &self,
        token: &str,
        trust: &'t TrustStore,
        now_ms: u64,
    ) -> Option<(&'t Peer, Claims, ClaimTimes)> {
        let map = self.map.lock().ok()?;
        let v = map.get(token)?;
        let issuer = trust.get(&v.issuer)?;
        if !issuer.sign_keys(now_ms).any(|k| k.as_bytes() == &v.key) {
            return None;
        }
        Some((issuer, v.claims.clone(), v.times))
    }

    fn insert(&self, token: &str, key: &[u8; 32], claims: &Claims, times: ClaimTimes) {
        let Ok(mut map) = self.map.lock() else {
            return;
        };
        if map.len() >= self.capacity {
            map.clear();
        }
        map.insert(
            token.to_owned(),
            Verified {
                issuer: claims.iss.clone(),
                key: *key,
                claims: claims.clone(),
                times,
            },
        );
    }
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

#[cfg(test)]
mod explain_tests {
    use super::*;

    #[test]
    fn a_refusal_names_what_was_needed() {
        let tool = Request::tool("node:p1", "echo");
        let m = explain(DenyReason::MissingScope, &tool);
        assert!(m.starts_with("token refused: missing_scope: "), "{m}");
        assert!(m.contains("`tool:echo`, `tool:*` or `admin`"), "{m}");
        let m = explain(
            DenyReason::WrongAudience,
            &Request::scope("gateway:main", "read"),
        );
        assert!(m.contains("gateway:main") && m.contains("`*`"), "{m}");
        let m = explain(
            DenyReason::MissingScope,
            &Request::scope("gateway:main", "read"),
        );
        assert!(m.contains("`read` or `admin`"), "{m}");
        let m = explain(DenyReason::UnknownIssuer, &tool);
        assert!(m.contains("node:p1") && m.contains("--issue"), "{m}");
        assert!(explain(DenyReason::Missing, &tool).contains("Authorization: Bearer"));
    }
}
