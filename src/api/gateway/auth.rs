//! Who may call what at the gateway.
//!
//! - Client side: a bearer PASETO token whose audience is this gateway (or `*`), issued
//!   by the gateway's own key or a trust-store peer marked `issue`, with `admin` or the
//!   scope the route needs.
//! - Node side: every request signed by the node (PROTOCOL §5 headers), within the clock
//!   skew, never seen before, from a trusted node with `send`, and for its own path.
//!   Anything else is 401 `unauthorized` — one code, so a prober learns nothing about
//!   which check failed — except a request that passes every check but the time window:
//!   its signature proves the node, so it gets 401 `clock_skew` with the gateway's
//!   signed time (PROTOCOL §5), which lets a node whose time ran ahead correct it
//!   (RELIABILITY F2).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode};

use crate::api::ApiError;
use crate::envelope::{
    sign_time_statement, verify_request, RequestSigError, HEADER_NODE, HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
};
use crate::gateway::Gateway;
use crate::token::{check_cached, Decision, Need, Request as TokenRequest};

pub use crate::api::bearer;

/// Check the caller's bearer token for `need`; returns the token subject.
pub fn require(gw: &Gateway, headers: &HeaderMap, need: Need<'_>) -> Result<String, ApiError> {
    authorize(gw, bearer(headers).unwrap_or(""), need).map(|c| c.sub)
}

/// Check `token` for `need` as [`require`] does (the console's sign-in form hands it
/// over instead of a header); returns its claims.
pub fn authorize(
    gw: &Gateway,
    token: &str,
    need: Need<'_>,
) -> Result<crate::token::Claims, ApiError> {
    let req = TokenRequest {
        node_id: &gw.cfg.node_id,
        need,
    };
    // A revocation list that cannot be read refuses the token (503), never honours it.
    let unreadable = std::cell::RefCell::new(None);
    let revoked = |jti: &str| match gw.state.is_revoked(jti) {
        Ok(r) => r,
        Err(e) => {
            *unreadable.borrow_mut() = Some(e);
            true
        }
    };
    let decide = |trust: &crate::envelope::TrustStore| {
        check_cached(
            token,
            &req,
            gw.now_ms(),
            gw.skew_ms(),
            trust,
            &revoked,
            Some(&gw.verify_cache),
        )
    };
    let mut d = decide(&gw.trust());
    if let Decision::Deny { reason, .. } = &d {
        if reason.as_str() == "unknown_issuer" {
            gw.recheck_issuers();
            d = decide(&gw.trust());
        }
    }
    if let Some(e) = unreadable.into_inner() {
        tracing::warn!(event = "revocations_unreadable", error = %e);
        return Err(e.into());
    }
    match d {
        Decision::Allow { claims } => Ok(claims),
        Decision::Deny { code, reason } => {
            let status = crate::api::error::deny_status(code);
            Err(ApiError::new(
                status,
                code.as_str(),
                crate::token::explain(reason, &req),
            ))
        }
    }
}

/// The answer to a request whose signature verified but whose timestamp `ts` is outside
/// the skew: the gateway's time, signed, bound to that request by its signature. The
/// same for every gateway engine (the state is not consulted). A node without `send`
/// gets the plain refusal.
fn clock_skew(gw: &Gateway, node_id: &str, ts: &str, sig: &str) -> ApiError {
    let now_ms = gw.now_ms();
    let may_send = gw.trust().get(node_id).is_some_and(|p| p.rights.send);
    tracing::warn!(
        event = "node_request_refused",
        reason = "request timestamp outside the allowed clock skew",
        node = %node_id,
        timestamp = %ts,
        gateway_ms = now_ms,
    );
    if !may_send {
        return ApiError::unauthorized("request signature missing or invalid");
    }
    ApiError::clock_skew(sign_time_statement(
        &gw.keys.current(),
        &gw.cfg.node_id,
        node_id,
        now_ms,
        sig,
    ))
}

/// A request from a node the trust store does not know, whose signature verifies under
/// the key this gateway retired for that id: the node learns it was retired (a prober
/// without the key learns nothing).
async fn retired(
    gw: &Gateway,
    node_id: &str,
    verify: &impl Fn(
        &crate::envelope::TrustStore,
    ) -> Result<crate::envelope::VerifiedRequest, RequestSigError>,
) -> bool {
    let doc = match gw.state.revoked_node(node_id).await {
        Ok(Some(doc)) => doc,
        Ok(None) => return false,
        Err(e) => {
            tracing::warn!(event = "enrollments_unreadable", error = %e);
            return false;
        }
    };
    let mut one = crate::envelope::TrustStore::new();
    one.add(doc, crate::gateway::enroll::NODE_RIGHTS).is_ok() && verify(&one).is_ok()
}

/// A node-side request that passed signature verification. `body` is exactly the bytes
/// that were signed.
pub struct SignedNode {
    pub node_id: String,
    pub body: Bytes,
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// A node request refused: the answer says nothing of why (a prober learns nothing);
/// the log line names the node it claims to be, the reason and the fix.
fn refused(node: &str, why: &str, fix: &str) -> ApiError {
    tracing::warn!(event = "node_request_refused", node, reason = why, fix);
    ApiError::unauthorized("request signature missing or invalid")
}

/// The three PROTOCOL §5 headers: node, timestamp, signature.
fn signature_headers(h: &HeaderMap) -> Result<(String, String, String), ApiError> {
    let get = |name: &str, why: &str| {
        header_str(h, name)
            .map(str::to_string)
            .ok_or_else(|| refused("-", why, "the request lacks outpost headers"))
    };
    Ok((
        get(HEADER_NODE, "no Outpost-Node")?,
        get(HEADER_TIMESTAMP, "no Outpost-Timestamp")?,
        get(HEADER_SIGNATURE, "no Outpost-Signature")?,
    ))
}

/// What a verification failed with, as the answer: the signed time for a stale
/// timestamp, `node_revoked` for a retired key, else the one refusal.
async fn verify_failed(
    gw: &Gateway,
    e: RequestSigError,
    (node_id, ts, sig): (&str, &str, &str),
    verify: &impl Fn(
        &crate::envelope::TrustStore,
    ) -> Result<crate::envelope::VerifiedRequest, RequestSigError>,
) -> ApiError {
    match e {
        RequestSigError::Stale => clock_skew(gw, node_id, ts, sig),
        RequestSigError::UnknownNode if retired(gw, node_id, verify).await => {
            tracing::warn!(event = "node_request_refused", node = %node_id, reason = "node_revoked", fix = "the node was retired (`outpost nodes revoke`); a reflashed device enrolls again with a new key");
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                crate::enroll::codes::NODE_REVOKED,
                "this node was retired by the gateway's operator",
            )
        }
        e @ RequestSigError::UnknownNode => refused(
            node_id,
            &e.to_string(),
            "this gateway does not trust that node: `outpost trust add <its identity document> --send`",
        ),
        e => refused(
            node_id,
            &e.to_string(),
            "a key it is not trusted with (a reflashed or rotated device: `outpost trust add` its new identity document), or a forgery",
        ),
    }
}

/// Refuse a request seen before (the in-memory window, and a shared state's record
/// across replicas: the signature is kept as long as its timestamp can pass the check).
async fn first_use(
    gw: &Gateway,
    node_id: &str,
    v: &crate::envelope::VerifiedRequest,
) -> Result<(), ApiError> {
    // Replicas remember signatures in their shared state (every replica must refuse a
    // replay another one saw); one process keeps its window in memory.
    match gw.state.replicas() {
        None => {
            let mut seen = gw.seen_sigs.lock().unwrap_or_else(|p| p.into_inner());
            seen.insert(v, gw.now_ms())
                .map_err(|e| refused(node_id, &e.to_string(), "a replayed request"))?;
        }
        Some(replicas) => {
            let keep_until = v.timestamp_ms.saturating_add(gw.skew_ms());
            if !replicas.first_use(&v.signature, keep_until).await? {
                return Err(refused(node_id, "request replayed", "a replayed request"));
            }
        }
    }
    Ok(())
}

impl FromRequest<Arc<Gateway>> for SignedNode {
    type Rejection = ApiError;

    async fn from_request(req: Request, gw: &Arc<Gateway>) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let (node_id, ts, sig) = signature_headers(&parts.headers)?;
        let path_and_query = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| parts.uri.path().to_string());
        let limit = gw.cfg.max_body_bytes as usize;
        let body = axum::body::to_bytes(body, limit).await.map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "request body exceeds the configured limit",
            )
        })?;
        let verify = |trust: &crate::envelope::TrustStore| {
            verify_request(
                trust,
                &node_id,
                parts.method.as_str(),
                &path_and_query,
                &ts,
                &sig,
                &body,
                gw.now_ms(),
                gw.skew_ms(),
            )
        };
        let mut r = verify(&gw.trust());
        // Unknown, or known with other keys (enrolled again after a key rotation): the
        // trust store may have changed since it was read.
        if matches!(
            r,
            Err(RequestSigError::UnknownNode | RequestSigError::BadSignature)
        ) {
            gw.recheck_trust(&node_id).await;
            r = verify(&gw.trust());
        }
        let v = match r {
            Ok(v) => v,
            Err(e) => return Err(verify_failed(gw, e, (&node_id, &ts, &sig), &verify).await),
        };
        if !v.rights.send {
            return Err(refused(
                &node_id,
                "peer lacks the send right",
                "`outpost trust add <its identity document> --send` on the gateway",
            ));
        }
        // The path names the node; it must be the signer.
        if parts.uri.path().split('/').nth(3).unwrap_or("") != node_id {
            return Err(refused(
                &node_id,
                "path names another node",
                "a node asks only for its own path",
            ));
        }
        first_use(gw, &node_id, &v).await?;
        gw.seen(&node_id).await;
        Ok(SignedNode { node_id, body })
    }
}
