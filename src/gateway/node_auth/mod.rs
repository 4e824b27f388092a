//! Who is asking on the node-facing API (PROTOCOL §5, §12): a request signed by a
//! trusted node with `send`, within the clock skew, for its own path, never seen before.
//!
//! Every refusal is one answer at the edge (a prober learns nothing about which check
//! failed), but the log line says which and what fixes it — except a request that
//! passes every check but the time window: its signature proves the node, so it gets
//! the gateway's signed time (RELIABILITY F2), and a request signed by a key this
//! gateway retired for that id, which learns it was retired.
//!
//! Authentication and the replay check are here; liveness bookkeeping (the node was
//! heard from) is the caller's next step, [`Gateway::seen`].

use crate::envelope::{
    sign_time_statement, verify_request, RequestSigError, TimeStatement, TrustStore,
    VerifiedRequest,
};

pub(super) mod replays;

use replays::ReplayWindow;

use super::state::Gateway;
use super::storage::{EnrollmentRecord, StateError};

/// A node request as it arrived: the PROTOCOL §5 headers, what was signed, and the node
/// its path names.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    pub node_id: &'a str,
    pub timestamp: &'a str,
    pub signature: &'a str,
    pub method: &'a str,
    pub path_and_query: &'a str,
    /// The node id in the path (`/v1/nodes/{id}/…`): it must be the signer's.
    pub path_node: &'a str,
    pub body: &'a [u8],
}

/// Why a node request was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum NodeAuthError {
    /// Any failed check; the log line said which (see [`refuse`]).
    #[error("request signature missing or invalid")]
    Refused,
    /// Everything held but the time window: the gateway's signed time for this request.
    #[error("request timestamp outside the allowed clock skew")]
    ClockSkew(Box<TimeStatement>),
    /// Signed by the key this gateway retired for that node id: what the record of
    /// that retirement says ([`EnrollmentRecord::retirement`]), for the node to show.
    #[error("{0}: the gateway refuses its key for good; a reflashed device (a new key) enrolls again with an enrollment token")]
    Retired(String),
    #[error(transparent)]
    State(#[from] StateError),
}

/// Log a refusal naming the node it claims to be, the reason and the fix.
pub fn refuse(node: &str, why: &str, fix: &str) -> NodeAuthError {
    tracing::warn!(event = "node_request_refused", node, reason = why, fix);
    NodeAuthError::Refused
}

impl NodeAuth<'_> {
    /// Authenticate `r` and record its signature (a replay is refused); returns the
    /// signer's address (its node id, or `<node id>@<tenant>`: PROTOCOL §18), which
    /// names the node everywhere in the gateway from here on.
    pub async fn authenticate(&self, r: &SignedRequest<'_>) -> Result<String, NodeAuthError> {
        let gw = self.gw;
        let verify = |trust: &TrustStore| {
            verify_request(
                trust,
                r.node_id,
                r.method,
                r.path_and_query,
                r.timestamp,
                r.signature,
                r.body,
                gw.now_ms(),
                gw.skew_ms(),
            )
        };
        let mut v = verify(&gw.trust());
        // Unknown, or known with other keys (enrolled again, or rotated): the trust store
        // may have changed since it was read.
        if matches!(
            v,
            Err(RequestSigError::UnknownNode | RequestSigError::BadSignature)
        ) {
            gw.reload_peer(r.node_id).await?;
            v = verify(&gw.trust());
        }
        let v = match v {
            Ok(v) => v,
            Err(e) => return Err(verify_failed(gw, e, r, &verify).await),
        };
        if !v.rights.send {
            return Err(refuse(
                r.node_id,
                "peer lacks the send right",
                "`outpost trust add <its identity document> --send` on the gateway",
            ));
        }
        if r.path_node != r.node_id {
            return Err(refuse(
                r.node_id,
                "path names another node",
                "a node asks only for its own path",
            ));
        }
        let keep_until = v.timestamp_ms.saturating_add(gw.skew_ms());
        if !self.replays.first_use(&v, gw.now_ms(), keep_until).await? {
            return Err(refuse(r.node_id, "request replayed", "a replayed request"));
        }
        Ok(v.address)
    }

    /// Forget the signatures whose timestamps can no longer pass the check (the
    /// sweeper, each pass).
    pub(super) fn prune_replays(&self, now_ms: u64) {
        self.replays.prune(now_ms);
    }
}

/// What a verification failed with: the signed time for a stale timestamp, `Retired`
/// for a retired key, else the one refusal.
async fn verify_failed(
    gw: &Gateway,
    e: RequestSigError,
    r: &SignedRequest<'_>,
    verify: &impl Fn(&TrustStore) -> Result<VerifiedRequest, RequestSigError>,
) -> NodeAuthError {
    match e {
        RequestSigError::Stale => clock_skew(gw, r),
        RequestSigError::UnknownNode => match retired(gw, r.node_id, verify).await {
            Some(record) => {
                tracing::warn!(event = "node_request_refused", node = %r.node_id, reason = "node_revoked", fix = "the node was retired (`outpost nodes revoke`); a reflashed device enrolls again with a new key");
                NodeAuthError::Retired(record.retirement())
            }
            None => unknown(r.node_id, &e),
        },
        e => refuse(
            r.node_id,
            &e.to_string(),
            "a key it is not trusted with (a reflashed or rotated device: `outpost trust add` its new identity document), or a forgery",
        ),
    }
}

fn unknown(node_id: &str, e: &RequestSigError) -> NodeAuthError {
    refuse(
        node_id,
        &e.to_string(),
        "this gateway does not trust that node: `outpost trust add <its identity document> --send`",
    )
}

/// The answer to a request whose signature verified but whose timestamp is outside the
/// skew: the gateway's time, signed, bound to that request by its signature. The same
/// for every gateway engine (the state is not consulted). A node without `send` gets
/// the plain refusal.
fn clock_skew(gw: &Gateway, r: &SignedRequest<'_>) -> NodeAuthError {
    let now_ms = gw.now_ms();
    let may_send = gw.trust().get(r.node_id).is_some_and(|p| p.rights.send);
    tracing::warn!(
        event = "node_request_refused",
        reason = "request timestamp outside the allowed clock skew",
        node = %r.node_id,
        timestamp = %r.timestamp,
        gateway_ms = now_ms,
    );
    if !may_send {
        return NodeAuthError::Refused;
    }
    NodeAuthError::ClockSkew(Box::new(sign_time_statement(
        &gw.keys.current(),
        &gw.cfg.node_id,
        r.node_id,
        now_ms,
        r.signature,
    )))
}

/// A request from a node the trust store does not know, whose signature verifies under
/// the key this gateway retired for that id: the node learns it was retired (a prober
/// without the key learns nothing).
async fn retired(
    gw: &Gateway,
    node_id: &str,
    verify: &impl Fn(&TrustStore) -> Result<VerifiedRequest, RequestSigError>,
) -> Option<EnrollmentRecord> {
    let record = match gw.state.revoked_node(node_id).await {
        Ok(record) => record?,
        Err(e) => {
            tracing::warn!(event = "enrollments_unreadable", error = %e);
            return None;
        }
    };
    let mut one = TrustStore::new();
    let signed_by_it = one
        .add(record.document.clone(), super::storage::NODE_RIGHTS)
        .is_ok()
        && verify(&one).is_ok();
    signed_by_it.then_some(record)
}

/// Nodes' signed requests: who sent them, and not twice.
pub struct NodeAuth<'g> {
    gw: &'g Gateway,
    replays: &'g ReplayWindow,
}

impl Gateway {
    pub fn node_auth(&self) -> NodeAuth<'_> {
        NodeAuth {
            gw: self,
            replays: &self.replays,
        }
    }
}
