//! Capability checks for local calls: the token from the body or `Authorization`,
//! checked fully offline against the trust store (plus this node's own key, which may
//! always issue tokens for itself) and the synced revocation list.

use std::sync::Arc;

use super::base::Base;
use super::error::NodeError;
use crate::envelope::TrustStore;
use crate::token::{self, Claims, Request};

/// Distinct tokens whose verification is remembered (a few hundred bytes each).
const VERIFY_CACHE_TOKENS: usize = 256;

/// Checks capability tokens for this node's local API and its task requests.
pub struct Authorizer {
    base: Arc<Base>,
    /// The shared token gate, with its memo of token signature checks (a field device
    /// sees the same few tokens over and over; the Ed25519 verification was a third of a
    /// tool call's CPU).
    gate: token::Gate,
}

/// What the node's gate reads: its store's clock, trust store and revocations.
impl token::Book for Base {
    fn now_ms(&self) -> u64 {
        Base::now_ms(self)
    }
    fn skew_ms(&self) -> u64 {
        Base::skew_ms(self)
    }
    fn trust(&self) -> Arc<TrustStore> {
        Base::trust(self)
    }
    fn reread_trust(&self) {
        self.recheck_trust();
    }
    fn is_revoked(&self, jti: &str) -> bool {
        Base::is_revoked(self, jti)
    }
}

impl Authorizer {
    pub(super) fn new(base: Arc<Base>) -> Self {
        Self {
            base,
            gate: token::Gate::new(VERIFY_CACHE_TOKENS),
        }
    }

    fn check_token(&self, token: Option<&str>, req: Request<'_>) -> Result<Claims, NodeError> {
        self.gate
            .check(&*self.base, token.unwrap_or(""), &req)
            .map_err(|r| NodeError::Denied {
                code: r.code,
                reason: r.reason,
                message: r.message,
            })
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
