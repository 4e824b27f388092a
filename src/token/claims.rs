//! Capability-token claims and footer (PROTOCOL §4) and RFC 3339 ⇄ milliseconds.

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::envelope::is_valid_node_id;

/// Token claims. Serialized in this field order; unknown claims are refused when parsing
/// so a token never carries a restriction outpost would silently ignore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// Issuer node id; must equal the footer `kid`.
    pub iss: String,
    /// Holder (free text: an operator, a service, a node id).
    pub sub: String,
    /// Audience: a node id or `*` (any node that trusts the issuer).
    pub aud: String,
    /// RFC 3339 times.
    pub iat: String,
    pub nbf: String,
    pub exp: String,
    /// Unique token id, the revocation handle.
    pub jti: String,
    /// e.g. `tool:pii_redact`, `tool:*`, `admin`.
    pub scopes: Vec<String>,
    /// The tenant the holder acts in, on a gateway (PROTOCOL §18); none = the gateway
    /// operator's token. A node refuses a token that names one (it knows no tenants).
    /// Absent from the claims when none, so a token without it is byte-for-byte what it
    /// was before tenants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Token footer: names the issuer so the verifier knows which key to use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Footer {
    pub kid: String,
}

/// Why claims are not well-formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid claims: {0}")]
pub struct ClaimsError(pub &'static str);

/// Parsed claim times in ms since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTimes {
    pub iat_ms: u64,
    pub nbf_ms: u64,
    pub exp_ms: u64,
}

impl Claims {
    /// Claims valid from `now_ms` for `ttl_ms`. `jti` comes from the caller (e.g. a UUIDv7
    /// generated with the caller's clock), keeping this module clock-free.
    pub fn new(
        iss: &str,
        sub: &str,
        aud: &str,
        scopes: Vec<String>,
        now_ms: u64,
        ttl_ms: u64,
        jti: &str,
    ) -> Result<Self, ClaimsError> {
        let claims = Self {
            iss: iss.to_owned(),
            sub: sub.to_owned(),
            aud: aud.to_owned(),
            iat: format_rfc3339_ms(now_ms).ok_or(ClaimsError("time out of range"))?,
            nbf: format_rfc3339_ms(now_ms).ok_or(ClaimsError("time out of range"))?,
            exp: format_rfc3339_ms(now_ms.saturating_add(ttl_ms))
                .ok_or(ClaimsError("time out of range"))?,
            jti: jti.to_owned(),
            scopes,
            tenant: None,
        };
        claims.validate()?;
        Ok(claims)
    }

    /// Grammar and internal consistency (not signature, not "now").
    pub fn validate(&self) -> Result<ClaimTimes, ClaimsError> {
        if !is_valid_node_id(&self.iss) {
            return Err(ClaimsError("iss must be a node id"));
        }
        if self.aud != "*" && !is_valid_node_id(&self.aud) {
            return Err(ClaimsError("aud must be a node id or \"*\""));
        }
        if self.sub.is_empty() || self.sub.len() > 256 {
            return Err(ClaimsError("sub must be 1-256 bytes"));
        }
        if self.jti.is_empty() || self.jti.len() > 128 {
            return Err(ClaimsError("jti must be 1-128 bytes"));
        }
        if self.scopes.is_empty() || self.scopes.iter().any(|s| s.is_empty() || s.len() > 128) {
            return Err(ClaimsError(
                "scopes must be a non-empty list of non-empty strings",
            ));
        }
        if self
            .tenant
            .as_deref()
            .is_some_and(|t| !crate::fleet::tenant::is_valid_tenant(t))
        {
            return Err(ClaimsError("tenant must match [a-z0-9][a-z0-9-]{0,31}"));
        }
        let t = ClaimTimes {
            iat_ms: parse_rfc3339_ms(&self.iat).ok_or(ClaimsError("iat is not RFC 3339"))?,
            nbf_ms: parse_rfc3339_ms(&self.nbf).ok_or(ClaimsError("nbf is not RFC 3339"))?,
            exp_ms: parse_rfc3339_ms(&self.exp).ok_or(ClaimsError("exp is not RFC 3339"))?,
        };
        if t.exp_ms <= t.nbf_ms {
            return Err(ClaimsError("exp must be after nbf"));
        }
        Ok(t)
    }
}

/// RFC 3339 (UTC, `Z`) for a millisecond timestamp.
pub fn format_rfc3339_ms(ms: u64) -> Option<String> {
    let dt = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    dt.format(&Rfc3339).ok()
}

/// Milliseconds since the epoch (floored) for RFC 3339 text; `None` before 1970.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let dt = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    u64::try_from(dt.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_roundtrip() {
        assert_eq!(
            format_rfc3339_ms(1_763_798_400_000).unwrap(),
            "2025-11-22T08:00:00Z"
        );
        assert_eq!(
            parse_rfc3339_ms("2025-11-22T08:00:00Z"),
            Some(1_763_798_400_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2025-11-22T09:00:00+01:00"),
            Some(1_763_798_400_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2025-11-22T08:00:00.5Z"),
            Some(1_763_798_400_500)
        );
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_rfc3339_ms("tomorrow"), None);
        let t = format_rfc3339_ms(1_763_798_400_123).unwrap();
        assert_eq!(parse_rfc3339_ms(&t), Some(1_763_798_400_123));
    }

    #[test]
    fn validate_refuses_inconsistent_claims() {
        let c = Claims::new(
            "gateway:main",
            "ops",
            "node:a",
            vec!["tool:echo".into()],
            1_000_000,
            60_000,
            "j1",
        )
        .unwrap();
        let mut x = c.clone();
        x.aud = "everyone".into();
        assert!(x.validate().is_err());
        let mut x = c.clone();
        x.scopes.clear();
        assert!(x.validate().is_err());
        let mut x = c.clone();
        x.exp = x.nbf.clone();
        assert!(x.validate().is_err());
        let mut x = c.clone();
        x.tenant = Some("Acme".into());
        assert!(x.validate().is_err());
        x.tenant = Some("acme".into());
        assert!(x.validate().is_ok());
        assert!(Claims::new("gateway:main", "ops", "*", vec!["admin".into()], 0, 1, "j").is_ok());
    }
}
