//! Who may call what at the gateway, at the edge: the bearer token of a client call
//! (decided by `gateway::client_auth`) and the signature headers of a node request
//! (decided by `gateway::node_auth`), turned into answers. A refused node request is
//! 401 `unauthorized` whatever failed (a prober learns nothing), except `clock_skew`
//! with the gateway's signed time (PROTOCOL §5) and `node_revoked` (PROTOCOL §15.4).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode};

use crate::api::ApiError;
use crate::envelope::{HEADER_NODE, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use crate::gateway::caller::Caller;
use crate::gateway::error::GatewayError;
use crate::gateway::node_auth::{refuse, NodeAuthError, SignedRequest};
use crate::gateway::Gateway;
use crate::token::Need;

pub use crate::api::bearer;

/// Check the caller's bearer token for `need`; returns the token subject. A token that
/// names a tenant is answered as if what it asks for did not exist (404 `not_found`):
/// the routes that call this do not yet confine a caller to its tenant (DECISIONS D17,
/// "fail closed while it is built"), so a tenant token reaches nothing through them;
/// a route that does calls [`require_caller`].
pub fn require(gw: &Gateway, headers: &HeaderMap, need: Need<'_>) -> Result<String, ApiError> {
    authorize(gw, bearer(headers).unwrap_or(""), need).map(|c| c.sub)
}

/// Check the caller's bearer token for `need` on a route confined to the caller's
/// tenant (PROTOCOL §18): a tenant's token is admitted, as the [`Caller`] every flow of
/// the route is given.
pub fn require_caller(
    gw: &Gateway,
    headers: &HeaderMap,
    need: Need<'_>,
) -> Result<Caller, ApiError> {
    let claims = gw
        .client_auth()
        .authorize(bearer(headers).unwrap_or(""), need)?;
    Ok(Caller {
        subject: claims.sub,
        tenant: claims.tenant,
    })
}

/// The address of the node `caller` names `node_id`: a tenant's caller naming an
/// address (or another tenant's node) gets what naming an unknown node gets.
pub fn node_address(caller: &Caller, node_id: &str) -> Result<String, GatewayError> {
    caller
        .address(node_id)
        .ok_or_else(|| GatewayError::UnknownNode(node_id.to_string()))
}

/// A flow's outcome for the node a caller named `named`: a refusal that names the node
/// names it as the caller did, never by its address (so a tenant's caller gets the
/// same answer for a node of its own that does not exist as for another tenant's).
pub fn as_named<T>(named: &str, r: Result<T, GatewayError>) -> Result<T, GatewayError> {
    r.map_err(|e| match e {
        GatewayError::UnknownNode(_) => GatewayError::UnknownNode(named.to_string()),
        GatewayError::NodeWithoutSend(_) => GatewayError::NodeWithoutSend(named.to_string()),
        e => e,
    })
}

/// [`as_named`], and a refusal whose message names the node's address (`not_found` of
/// an enrollment, a conflict) names it as the caller did.
pub fn as_named_at<T>(
    named: &str,
    address: &str,
    r: Result<T, GatewayError>,
) -> Result<T, GatewayError> {
    as_named(named, r).map_err(|e| match e {
        GatewayError::NotFound(code, m) if named != address => {
            GatewayError::NotFound(code, m.replace(address, named))
        }
        GatewayError::Conflict(c, m) if named != address => {
            GatewayError::Conflict(c, m.replace(address, named))
        }
        e => e,
    })
}

/// Check `token` for `need` as [`require`] does (the console's sign-in form hands it
/// over instead of a header); returns its claims. A tenant token is refused as
/// [`require`] says.
pub fn authorize(
    gw: &Gateway,
    token: &str,
    need: Need<'_>,
) -> Result<crate::token::Claims, ApiError> {
    let claims = gw.client_auth().authorize(token, need)?;
    if let Some(tenant) = &claims.tenant {
        tracing::warn!(event = "tenant_token_refused", tenant = %tenant, subject = %claims.sub, reason = "route not confined to a tenant");
        return Err(ApiError::not_found("not_found", "no such resource"));
    }
    Ok(claims)
}

/// A node-side request that passed authentication. `body` is exactly the bytes that
/// were signed.
pub struct SignedNode {
    /// The signer's address (PROTOCOL §18): its node id in the tenant `default`,
    /// `<node id>@<tenant>` otherwise. Every flow keys the node by it.
    pub node_id: String,
    pub body: Bytes,
}

impl From<NodeAuthError> for ApiError {
    fn from(e: NodeAuthError) -> Self {
        match e {
            NodeAuthError::Refused => {
                ApiError::unauthorized("request signature missing or invalid")
            }
            NodeAuthError::ClockSkew(time) => ApiError::clock_skew(*time),
            NodeAuthError::Retired(_) => ApiError::new(
                StatusCode::UNAUTHORIZED,
                crate::enroll::codes::NODE_REVOKED,
                e.to_string(),
            ),
            NodeAuthError::State(s) => s.into(),
        }
    }
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The three PROTOCOL §5 headers: node, timestamp, signature.
fn signature_headers(h: &HeaderMap) -> Result<(String, String, String), ApiError> {
    let get = |name: &str, why: &str| {
        header_str(h, name)
            .map(str::to_string)
            .ok_or_else(|| ApiError::from(refuse("-", why, "the request lacks outpost headers")))
    };
    Ok((
        get(HEADER_NODE, "no Outpost-Node")?,
        get(HEADER_TIMESTAMP, "no Outpost-Timestamp")?,
        get(HEADER_SIGNATURE, "no Outpost-Signature")?,
    ))
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
        let limit = gw.cfg().max_body_bytes as usize;
        let body = axum::body::to_bytes(body, limit).await.map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "request body exceeds the configured limit",
            )
        })?;
        let signed = SignedRequest {
            node_id: &node_id,
            timestamp: &ts,
            signature: &sig,
            method: parts.method.as_str(),
            path_and_query: &path_and_query,
            path_node: parts.uri.path().split('/').nth(3).unwrap_or(""),
            body: &body,
        };
        let address = gw.node_auth().authenticate(&signed).await?;
        // Then the liveness bookkeeping: the node was heard from.
        gw.seen(&address).await;
        Ok(SignedNode {
            node_id: address,
            body,
        })
    }
}
