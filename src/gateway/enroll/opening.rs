//! The enrollment exchange's CPU work: checking the device's document, opening its
//! envelope and verifying the token sealed in it (about 0.3 ms of signatures and key
//! agreement a request).
//!
//! It runs on one blocking thread at a time ([`super::admission::Lane`]), not on the async workers that
//! deliver commands and answer long-polls: a burst of devices (a site powering on,
//! hundreds of requests in the same millisecond) would otherwise queue that much CPU
//! ahead of every other tenant's delivery on the workers. On its own thread the burst
//! is one more thread the kernel shares the cores with, and a burst waits on itself.

use std::sync::Arc;

use super::super::error::GatewayError;
use super::super::state::Gateway;
use super::NODE_RIGHTS;
use crate::enroll::{Sealed, Token};
use crate::envelope::{IdentityDocument, Keys, OpenContext, TrustStore};

/// What opening needs of the gateway, owned (it runs on another thread).
pub struct Opener {
    me: String,
    keys: Arc<Keys>,
    previous: Option<Arc<Keys>>,
    now_ms: u64,
    skew_ms: u64,
}

/// Why a request was not opened.
pub enum Unopened {
    /// Not a request at all: 400.
    Bad(GatewayError),
    /// Its token is not one this gateway issued (`wrong_gateway`).
    NotOurs(String),
}

/// An opened request: what the device sealed, and its token, signed here.
pub struct Opened {
    pub sealed: Sealed,
    pub token: Token,
}

impl Opener {
    pub fn of(gw: &Gateway) -> Self {
        let now_ms = gw.now_ms();
        Self {
            me: gw.cfg.node_id.clone(),
            keys: gw.keys.current(),
            previous: gw.keys.previous(now_ms),
            now_ms,
            skew_ms: gw.skew_ms(),
        }
    }

    /// Check the request's document, open its envelope (proving the node holds the
    /// document's signing key, and that the token and the device's facts were kept
    /// secret on the way) and verify the token in it.
    pub fn open(
        &self,
        node: &IdentityDocument,
        envelope: serde_json::Value,
    ) -> Result<Opened, Unopened> {
        let mut sealed = self.unseal(node, envelope).map_err(Unopened::Bad)?;
        if let Some(d) = &sealed.device {
            d.check().map_err(|e| {
                Unopened::Bad(GatewayError::BadRequest(format!(
                    "enrollment request: device: {e}"
                )))
            })?;
        }
        // Only what an approver decides on is kept.
        if let Some(d) = sealed.device.as_mut() {
            d.tools.clear();
        }
        let token = Token::parse(&sealed.token).map_err(|e| Unopened::NotOurs(e.to_string()))?;
        // Tokens made before this gateway's key rotation verify with the retired key
        // while its grace lasts.
        if token.claims.gateway_id != self.me || !self.signed_here(&token) {
            return Err(Unopened::NotOurs(
                "the token was not issued by this gateway".into(),
            ));
        }
        Ok(Opened { sealed, token })
    }

    fn unseal(
        &self,
        node: &IdentityDocument,
        envelope: serde_json::Value,
    ) -> Result<Sealed, GatewayError> {
        node.verify()
            .map_err(|e| GatewayError::BadRequest(format!("node document: {e}")))?;
        if node.role != "node" {
            return Err(GatewayError::BadRequest("only a node enrolls".into()));
        }
        let env: crate::envelope::Envelope = serde_json::from_value(envelope)
            .map_err(|e| GatewayError::BadRequest(format!("envelope: {e}")))?;
        if env.sender_node_id != node.node_id || env.payload_type != crate::enroll::PAYLOAD_TYPE {
            return Err(GatewayError::BadRequest(
                "the envelope must be an ENROLL from the node the document names".into(),
            ));
        }
        let mut one = TrustStore::new();
        one.add(node.clone(), NODE_RIGHTS)
            .map_err(|e| GatewayError::BadRequest(e.to_string()))?;
        let ctx = OpenContext {
            me: &self.me,
            keys: &self.keys,
            previous_keys: self.previous.as_deref(),
            trust: &one,
            now_ms: self.now_ms,
            skew_ms: self.skew_ms,
            max_bytes: 16 * 1024,
            max_ttl_ms: 3_600_000,
            pruned_ahead: None,
        };
        let opened = crate::envelope::open_parsed(&env, &ctx, &|_, _| false)
            .map_err(|e| GatewayError::BadRequest(format!("envelope: {e} ({})", e.code())))?;
        serde_json::from_slice(&opened.plaintext)
            .map_err(|e| GatewayError::BadRequest(format!("enrollment request: {e}")))
    }

    /// Whether this gateway signed `token`: with its current key, or with the retired
    /// one while its grace lasts (tokens made before a key rotation).
    fn signed_here(&self, token: &Token) -> bool {
        [Some(&self.keys), self.previous.as_ref()]
            .into_iter()
            .flatten()
            .any(|k| token.verify(&k.sign_pk()))
    }
}
