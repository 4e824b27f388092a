//! The gateway's token gate for clients (PROTOCOL §4, §11): a bearer PASETO token
//! whose audience is this gateway (or `*`), issued by the gateway's own key or a
//! trust-store peer marked `issue`, with `admin` or the scope the route needs, not
//! revoked. The node's counterpart is `app::auth::Authorizer`; both decide with
//! `token::Gate`.

use std::cell::RefCell;
use std::sync::Arc;

use crate::envelope::TrustStore;
use crate::token::{Book, Claims, Need, Request};

use super::error::GatewayError;
use super::state::Gateway;
use super::storage::StateError;

/// What the gateway's gate reads: its clock, its trust store (issuers re-read on a
/// miss) and its revocation list, whose read failure is kept to be said.
struct GatewayBook<'g> {
    gw: &'g Gateway,
    unreadable: RefCell<Option<StateError>>,
}

impl Book for GatewayBook<'_> {
    fn now_ms(&self) -> u64 {
        self.gw.now_ms()
    }
    fn skew_ms(&self) -> u64 {
        self.gw.skew_ms()
    }
    fn trust(&self) -> Arc<TrustStore> {
        self.gw.trust()
    }
    fn reread_trust(&self) {
        self.gw.recheck_issuers();
    }
    fn is_revoked(&self, jti: &str) -> bool {
        match self.gw.state.is_revoked(jti) {
            Ok(r) => r,
            Err(e) => {
                *self.unreadable.borrow_mut() = Some(e);
                true
            }
        }
    }
}

impl ClientAuth<'_> {
    /// Check `token` for `need`; its claims, or why not ([`GatewayError::Denied`]; a
    /// revocation list that cannot be read refuses the token, never honours it).
    pub fn authorize(&self, token: &str, need: Need<'_>) -> Result<Claims, GatewayError> {
        let req = Request {
            node_id: &self.gw.cfg.node_id,
            need,
            tenants: true,
        };
        let book = GatewayBook {
            gw: self.gw,
            unreadable: RefCell::new(None),
        };
        let decided = self.gate.check(&book, token, &req);
        if let Some(e) = book.unreadable.into_inner() {
            tracing::warn!(event = "revocations_unreadable", error = %e);
            return Err(e.into());
        }
        decided.map_err(|r| GatewayError::Denied {
            code: r.code,
            message: r.message,
        })
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
    /// Its own state: the token gate with its memo of bearer-token signature checks
    /// (an operator's client sends the same token with every command).
    gate: &'g crate::token::Gate,
}

impl Gateway {
    pub fn client_auth(&self) -> ClientAuth<'_> {
        ClientAuth {
            gw: self,
            gate: &self.token_gate,
        }
    }
}
