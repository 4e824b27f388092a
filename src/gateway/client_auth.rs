//! The gateway's token gate for clients (PROTOCOL §4, §11): a bearer PASETO token
//! whose audience is this gateway (or `*`), issued by the gateway's own key or a
//! trust-store peer marked `issue`, with `admin` or the scope the route needs, not
//! revoked. The node's counterpart is `app::auth::Authorizer`; both decide with
//! `token::check_cached`.

use crate::token::{check_cached, Claims, Decision, DenyReason, Need, Request, VerifyCache};

use super::error::GatewayError;
use super::state::Gateway;

impl ClientAuth<'_> {
    /// Check `token` for `need`; its claims, or why not ([`GatewayError::Denied`]; a
    /// revocation list that cannot be read refuses the token, never honours it).
    pub fn authorize(&self, token: &str, need: Need<'_>) -> Result<Claims, GatewayError> {
        let gw = self.gw;
        let req = Request {
            node_id: &gw.cfg.node_id,
            need,
        };
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
                Some(self.verify_cache),
            )
        };
        let mut d = decide(&gw.trust());
        if matches!(
            d,
            Decision::Deny {
                reason: DenyReason::UnknownIssuer,
                ..
            }
        ) {
            gw.recheck_issuers();
            d = decide(&gw.trust());
        }
        if let Some(e) = unreadable.into_inner() {
            tracing::warn!(event = "revocations_unreadable", error = %e);
            return Err(e.into());
        }
        match d {
            Decision::Allow { claims } => Ok(claims),
            Decision::Deny { code, reason } => Err(GatewayError::Denied {
                code,
                message: crate::token::explain(reason, &req),
            }),
        }
    }
}

impl ClientAuth<'_> {
    /// Whether token id `jti` was revoked (a session's token, checked on each request).
    pub fn is_revoked(&self, jti: &str) -> Result<bool, GatewayError> {
        let gw = self.gw;
        Ok(gw.state.is_revoked(jti)?)
    }
}

/// Operators' bearer tokens: who they are and what they may do.
pub struct ClientAuth<'g> {
    gw: &'g Gateway,
    /// Its own state: a memo of bearer-token signature checks (an operator's client
    /// sends the same token with every command; time window, audience, scope and
    /// revocation are still decided on each request).
    verify_cache: &'g VerifyCache,
}

impl Gateway {
    pub fn client_auth(&self) -> ClientAuth<'_> {
        ClientAuth {
            gw: self,
            verify_cache: &self.verify_cache,
        }
    }
}
