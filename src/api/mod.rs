//! HTTP APIs: the node's local API (PROTOCOL §10) and the gateway's (PROTOCOL §11–12). One error
//! type ([`error::ApiError`]) maps every failure to status + code; one extractor
//! ([`json::JsonBody`]) turns every malformed body into that shape.

pub mod error;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod health;
pub mod json;
pub mod node;
pub mod openapi;
#[cfg(feature = "gateway")]
pub mod starting;

#[cfg(feature = "gateway")]
pub use error::store_error;
pub use error::{ApiError, ApiResult};

/// The bearer token of a request (`Authorization: Bearer <token>`), for both roles. The
/// scheme is matched without regard to case (RFC 7235 §2.1: `bearer`, `BEARER`), any
/// run of spaces may separate it from the token, and an empty token is no token.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The caller's `Idempotency-Key` (1..255 visible ASCII characters), for both roles'
/// queueing routes (the node's `POST /v1/outbox`, the gateway's commands and tool
/// calls): `None` without one, 400 for a malformed one.
pub fn idempotency_key(headers: &axum::http::HeaderMap) -> ApiResult<Option<&str>> {
    headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    ApiError::bad_request("Idempotency-Key must be 1..255 visible ASCII characters")
                })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::bearer;
    use axum::http::{header::AUTHORIZATION, HeaderMap, HeaderValue};

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        for v in ["Bearer t.k", "bearer t.k", "BEARER t.k", "bEaReR   t.k "] {
            assert_eq!(bearer(&with(v)), Some("t.k"), "{v:?}");
        }
    }

    #[test]
    fn other_schemes_and_empty_tokens_are_no_token() {
        for v in [
            "Basic dXNlcg==",
            "Bearer",
            "Bearer   ",
            "Bearertoken",
            "Token t.k",
        ] {
            assert_eq!(bearer(&with(v)), None, "{v:?}");
        }
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
