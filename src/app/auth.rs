//! Capability checks for local calls: the token from the body or `Authorization`,
//! checked fully offline against the trust store (plus this node's own key, which may
//! always issue tokens for itself) and the synced revocation list.

use std::sync::Arc;

use super::base::Base;
use super::error::NodeError;
use crate::token::{self, Claims, Decision, DenyReason, Request};

/// Distinct tokens whose verification is remembered (a few hundred bytes each).
const VERIFY_CACHE_TOKENS: usize = 256;

/// Checks capability tokens for this node's local API and its task requests.
pub struct Authorizer {
    base: Arc<Base>,
    /// Memo of token signature checks (a field device sees the same few tokens over
    /// and over; the Ed25519 verification was a third of a tool call's CPU).
    verify_cache: token::VerifyCache,
}

impl Authorizer {
    pub(super) fn new(base: Arc<Base>) -> Self {
        Self {
            base,
            verify_cache: token::VerifyCache::new(VERIFY_CACHE_TOKENS),
        }
    }

    fn decide(
        &self,
        token: &str,
        req: &Request<'_>,
        skew_ms: u64,
        revoked: &dyn Fn(&str) -> bool,
    ) -> Decision {
        token::check_cached(
            token,
            req,
            self.base.now_ms(),
            skew_ms,
            &self.base.trust(),
            revoked,
            Some(&self.verify_cache),
        )
    }

    fn check_token(&self, token: Option<&str>, req: Request<'_>) -> Result<Claims, NodeError> {
        let token = token.unwrap_or("");
        let skew = self.base.skew_ms();
        let revoked = |jti: &str| self.base.is_revoked(jti);
        let mut decision = self.decide(token, &req, skew, &revoked);
        if let Decision::Deny {
            reason: DenyReason::UnknownIssuer,
            ..
        } = decision
        {
            self.base.recheck_trust();
            decision = self.decide(token, &req, skew, &revoked);
        }
        match decision {
            Decision::Allow { claims } => Ok(claims),
            Decision::Deny { code, reason } => {
                let message = crate::token::explain(reason, &req);
                Err(NodeError::Denied {
                    code,
                    reason,
                    message,
                })
            }
        }
    }

    /// Token check for running `tool_name`. On refusal, the error's message names the
    /// reason (safe to show: it says nothing about keys).
    pub fn authorize_tool(
        &self,
        token: Option<&str>,
        tool_name: &str,
    ) -> Result<Claims, NodeError> {
        self.check_token(token, Request::tool(&self.base.cfg.node_id, tool_name))
    }

    /// A named scope (`state:read`), covered by itself or `admin`.
    pub fn authorize_scope(&self, token: Option<&str>, scope: &str) -> Result<Claims, NodeError> {
        self.check_token(token, Request::scope(&self.base.cfg.node_id, scope))
    }

    /// Inbox and outbox need the `admin` scope.
    pub fn authorize_admin(&self, token: Option<&str>) -> Result<Claims, NodeError> {
        self.check_token(token, Request::scope(&self.base.cfg.node_id, "admin"))
    }
}
