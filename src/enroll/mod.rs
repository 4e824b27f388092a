//! Zero-touch enrollment (PROTOCOL §15): what a node and its gateway exchange so that a
//! device flashed from a shared image trusts its gateway, and is trusted by it, with no
//! document copied by hand.
//!
//! Pure: token format, fingerprints, the wire types of the exchange and the signed
//! answer. The node's client loop lives in [`crate::sync::enroll`], the gateway's flow in
//! `gateway::enroll`; both call only what is here for anything signed.
//!
//! The exchange, in short:
//! 1. The operator mints a token at the gateway: claims (id, limits, the gateway's
//!    fingerprint and TLS pin) signed by the gateway's key.
//! 2. The node asks `GET /v1/enroll` for the gateway's identity document and signed time,
//!    and checks the document against the token's fingerprint and signature *before*
//!    sending anything secret.
//! 3. The node seals the token to that gateway's key (an envelope, which also proves it
//!    holds its own signing key) and posts it with its identity document.
//! 4. The gateway answers with a statement signed by its key: enrolled (with its
//!    document and time), or pending; a refusal is an error code.

use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::envelope::{b64_decode, b64_decode_array, b64_encode, pae, IdentityDocument, Keys};

mod rotated;

/// Text every token starts with (and its format version).
pub const TOKEN_PREFIX: &str = "outpost-enroll-v1.";
/// Domain of the token signature's PAE.
pub const TOKEN_DOMAIN: &str = "outpost/enroll-token/v1";
/// Domain of the answer signature's PAE.
pub const ANSWER_DOMAIN: &str = "outpost/enroll-answer/v1";
/// `payload_type` of the sealed enrollment request.
pub const PAYLOAD_TYPE: &str = "ENROLL";
/// Longest token text accepted (a token is ~400 bytes; this bounds what is parsed).
pub const MAX_TOKEN_BYTES: usize = 2048;

/// Whether enrollments under a token are trusted at once or wait for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approve {
    Auto,
    Manual,
}

impl Approve {
    pub fn as_str(self) -> &'static str {
        match self {
            Approve::Auto => "auto",
            Approve::Manual => "manual",
        }
    }
}

/// What a token says. Signed as the exact JSON bytes that travel in the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenClaims {
    pub v: u32,
    /// The token's id (what `enroll-token list|revoke` name, and uses are counted by).
    pub id: String,
    pub gateway_id: String,
    /// [`fingerprint`] of the gateway's identity document.
    pub gateway_fp: String,
    /// The gateway's TLS pin (b64url SHA-256 of its certificate's SPKI), when it serves
    /// TLS with the certificate it generated: the node pins it for the exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_spki_sha256: Option<String>,
    pub expires_at_ms: u64,
    pub max_uses: u64,
    /// Node ids enrolling with it must start with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_prefix: Option<String>,
    pub approve: Approve,
}

/// A parsed token: its claims and the bytes the signature covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub claims: TokenClaims,
    claims_bytes: Vec<u8>,
    sig: [u8; 64],
}

/// Why a token, a gateway document or an answer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnrollError {
    #[error("not an enrollment token ({0})")]
    Malformed(String),
    #[error("the gateway is not the one the token names: {0}")]
    WrongGateway(String),
    #[error("the gateway's answer does not verify: {0}")]
    BadAnswer(String),
}

/// `SHA-256(sign_pk ‖ kex_pk)` of a document, b64url: what a token pins.
pub fn fingerprint(doc: &IdentityDocument) -> String {
    let mut h = Sha256::new();
    h.update(&doc.sign_pk);
    h.update(&doc.kex_pk);
    b64_encode(&h.finalize())
}

impl Token {
    /// Sign `claims` with the gateway's keys.
    pub fn sign(keys: &Keys, claims: TokenClaims) -> Token {
        // Plain strings and numbers: serializing cannot fail.
        let claims_bytes = serde_json::to_vec(&claims).unwrap_or_default();
        let sig = keys.sign(&pae(&[TOKEN_DOMAIN.as_bytes(), &claims_bytes]));
        Token {
            claims,
            claims_bytes,
            sig,
        }
    }

    /// The token as text: `outpost-enroll-v1.<b64url claims>.<b64url signature>`.
    pub fn to_text(&self) -> String {
        format!(
            "{TOKEN_PREFIX}{}.{}",
            b64_encode(&self.claims_bytes),
            b64_encode(&self.sig)
        )
    }

    /// Parse (the signature is checked by [`Token::verify`], against a key the caller
    /// pinned).
    pub fn parse(text: &str) -> Result<Token, EnrollError> {
        let text = text.trim();
        if text.len() > MAX_TOKEN_BYTES {
            return Err(EnrollError::Malformed("too long".into()));
        }
        let rest = text
            .strip_prefix(TOKEN_PREFIX)
            .ok_or_else(|| EnrollError::Malformed(format!("does not start with {TOKEN_PREFIX}")))?;
        let (c, s) = rest
            .split_once('.')
            .ok_or_else(|| EnrollError::Malformed("no signature part".into()))?;
        let claims_bytes = b64_decode(c).map_err(|_| EnrollError::Malformed("claims".into()))?;
        let sig =
            b64_decode_array::<64>(s).ok_or_else(|| EnrollError::Malformed("signature".into()))?;
        let claims: TokenClaims = serde_json::from_slice(&claims_bytes)
            .map_err(|e| EnrollError::Malformed(format!("claims: {e}")))?;
        if claims.v != 1 {
            return Err(EnrollError::Malformed(format!("version {}", claims.v)));
        }
        Ok(Token {
            claims,
            claims_bytes,
            sig,
        })
    }

    /// The signature, strictly, under `key`.
    pub fn verify(&self, key: &VerifyingKey) -> bool {
        key.verify_strict(
            &pae(&[TOKEN_DOMAIN.as_bytes(), &self.claims_bytes]),
            &Signature::from_bytes(&self.sig),
        )
        .is_ok()
    }

    /// The node's check of a gateway's document before anything secret is sent: the
    /// document verifies, is a gateway's, is the one the token names (id and
    /// fingerprint), and signed the token.
    pub fn check_gateway(&self, doc: &IdentityDocument) -> Result<(), EnrollError> {
        let keys = doc
            .verify()
            .map_err(|e| EnrollError::WrongGateway(e.to_string()))?;
        if doc.role != "gateway" || doc.node_id != self.claims.gateway_id {
            return Err(EnrollError::WrongGateway(format!(
                "it is {} ({}), the token is for {}",
                doc.node_id, doc.role, self.claims.gateway_id
            )));
        }
        if fingerprint(doc) != self.claims.gateway_fp {
            return Err(EnrollError::WrongGateway(format!(
                "{} answers with keys other than the token's fingerprint (an impersonator, or a gateway whose keys were replaced)",
                doc.node_id
            )));
        }
        if !self.verify(&keys.sign) {
            return Err(EnrollError::WrongGateway(
                "the token's signature is not the gateway's".into(),
            ));
        }
        Ok(())
    }

    /// The TLS pin the token carries, as 32 bytes.
    pub fn tls_pin(&self) -> Option<[u8; 32]> {
        self.claims
            .tls_spki_sha256
            .as_deref()
            .and_then(b64_decode_array::<32>)
    }
}

/// The `echo` of the hello's time statement for `nonce`: `enroll/<nonce>`. A request
/// signature (the echo of a `clock_skew` statement, PROTOCOL §5) never contains `/`, so
/// the two kinds of statement cannot stand in for each other.
pub fn hello_echo(nonce: &str) -> String {
    format!("enroll/{nonce}")
}

/// `GET /v1/enroll?node_id=&nonce=`: who the gateway is and its time, signed for this
/// nonce (so a node whose clock says 1970 can stamp its request with the gateway's time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub gateway: IdentityDocument,
    pub time: crate::envelope::TimeStatement,
    /// The gateway's key rotation while its grace lasts: a token made before it pins
    /// the retired keys, and this statement links them to `gateway` (PROTOCOL §15.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<crate::envelope::KeyRotation>,
}

/// `POST /v1/enroll`: the node's document (so the gateway can check the envelope's
/// signature) and the envelope sealing [`Sealed`] to the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub node: IdentityDocument,
    /// Read as a [`crate::envelope::Envelope`] when the request is opened.
    #[cfg_attr(test, schemars(with = "crate::envelope::Envelope"))]
    pub envelope: serde_json::Value,
}

/// The envelope's plaintext.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sealed {
    pub token: String,
    /// What the device says about itself (its inventory, PROTOCOL §16.3, without the
    /// tools), shown to the operator who approves it. A gateway older than this refuses
    /// the member (400 `bad_request`); the node then enrolls without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::fleet::Inventory>,
}

/// Where an enrollment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Trusted: the node may connect.
    Enrolled,
    /// Waiting for an operator (`--approve manual`, or a re-key of an enrolled id).
    Pending,
}

/// What the gateway signs in answer to an enrollment (200 enrolled, 202 pending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerClaims {
    pub v: u32,
    pub status: Standing,
    pub node_id: String,
    /// b64url of the enrolling node's signing key: the answer is for this key only.
    pub node_sign_pk: String,
    pub token_id: String,
    /// `new` or `rekey`.
    pub kind: String,
    pub gateway: IdentityDocument,
    /// The gateway's time when it answered.
    pub now_ms: u64,
}

/// The answer as it travels: the claims' JSON bytes and the gateway's signature over
/// `PAE("outpost/enroll-answer/v1", claims)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub answer: String,
    pub sig: String,
}

impl Answer {
    pub fn sign(keys: &Keys, claims: &AnswerClaims) -> Answer {
        let bytes = serde_json::to_vec(claims).unwrap_or_default();
        let sig = keys.sign(&pae(&[ANSWER_DOMAIN.as_bytes(), &bytes]));
        Answer {
            answer: b64_encode(&bytes),
            sig: b64_encode(&sig),
        }
    }

    /// The claims, if signed by `gateway_key` and addressed to `node_id` holding
    /// `node_sign_pk`.
    pub fn verify(
        &self,
        gateway_key: &VerifyingKey,
        node_id: &str,
        node_sign_pk: &[u8],
    ) -> Result<AnswerClaims, EnrollError> {
        let bad = |m: &str| EnrollError::BadAnswer(m.to_string());
        let bytes = b64_decode(&self.answer).map_err(|_| bad("answer is not base64url"))?;
        let sig = b64_decode_array::<64>(&self.sig).ok_or_else(|| bad("signature"))?;
        gateway_key
            .verify_strict(
                &pae(&[ANSWER_DOMAIN.as_bytes(), &bytes]),
                &Signature::from_bytes(&sig),
            )
            .map_err(|_| bad("signature does not verify"))?;
        let claims: AnswerClaims =
            serde_json::from_slice(&bytes).map_err(|e| EnrollError::BadAnswer(e.to_string()))?;
        if claims.node_id != node_id || claims.node_sign_pk != b64_encode(node_sign_pk) {
            return Err(bad("the answer is for another node or key"));
        }
        if claims.gateway.sign_pk != gateway_key.to_bytes() {
            return Err(bad("the answer carries another gateway document"));
        }
        Ok(claims)
    }
}

/// The code a node's status shows while its enrollment waits for an operator (the
/// gateway answers 202, not an error).
pub const PENDING_APPROVAL: &str = "pending_approval";

/// Refusal codes of `POST /v1/enroll` (PROTOCOL §15.4), with their HTTP status.
pub mod codes {
    pub const TOKEN_EXPIRED: &str = "token_expired";
    pub const TOKEN_EXHAUSTED: &str = "token_exhausted";
    pub const TOKEN_REVOKED: &str = "token_revoked";
    pub const WRONG_GATEWAY: &str = "wrong_gateway";
    pub const REJECTED: &str = "rejected";
    pub const DUPLICATE_NODE_ID: &str = "duplicate_node_id";
    pub const NODE_REVOKED: &str = "node_revoked";
    pub const NODE_ID_NOT_ALLOWED: &str = "node_id_not_allowed";
    /// The token's tenant has its `max_nodes` nodes (PROTOCOL §18): not final, the
    /// operator may raise the quota or retire a node.
    pub const TENANT_QUOTA: &str = "tenant_quota";

    /// Refusals a node cannot fix by retrying with the same token: it retries rarely
    /// (the token file may be replaced meanwhile).
    pub fn is_final(code: &str) -> bool {
        matches!(
            code,
            TOKEN_EXPIRED
                | TOKEN_EXHAUSTED
                | TOKEN_REVOKED
                | WRONG_GATEWAY
                | REJECTED
                | DUPLICATE_NODE_ID
                | NODE_REVOKED
                | NODE_ID_NOT_ALLOWED
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway() -> (Keys, IdentityDocument) {
        let k = Keys::generate();
        let d = IdentityDocument::new("gateway:main", "gateway", &k, "2026-11-27T00:00:00Z");
        (k, d)
    }

    fn claims(doc: &IdentityDocument) -> TokenClaims {
        TokenClaims {
            v: 1,
            id: "et-0123456789abcdef".into(),
            gateway_id: doc.node_id.clone(),
            gateway_fp: fingerprint(doc),
            tls_spki_sha256: None,
            expires_at_ms: 1_900_000_000_000,
            max_uses: 20,
            node_prefix: Some("node:pump-".into()),
            approve: Approve::Auto,
        }
    }

    #[test]
    fn a_token_round_trips_and_pins_its_gateway() {
        let (k, d) = gateway();
        let t = Token::sign(&k, claims(&d));
        let text = t.to_text();
        assert!(text.starts_with(TOKEN_PREFIX));
        let back = Token::parse(&format!("  {text}\n")).unwrap();
        assert_eq!(back, t);
        back.check_gateway(&d).unwrap();
        // Another gateway under the same id: refused before anything is sent.
        let (k2, _) = gateway();
        let imposter =
            IdentityDocument::new("gateway:main", "gateway", &k2, "2026-11-27T00:00:00Z");
        assert!(matches!(
            back.check_gateway(&imposter),
            Err(EnrollError::WrongGateway(_))
        ));
        // The right fingerprint but claims signed by someone else.
        let forged = Token::sign(&k2, claims(&d));
        assert!(Token::parse(&forged.to_text())
            .unwrap()
            .check_gateway(&d)
            .is_err());
    }

    #[test]
    fn a_token_made_before_a_gateway_rotation_pins_through_the_statement() {
        let (k, d) = gateway();
        let token = Token::sign(&k, claims(&d));
        let k2 = Keys::generate();
        let d2 = IdentityDocument::new("gateway:main", "gateway", &k2, "2026-11-28T00:00:00Z");
        let rot = crate::envelope::KeyRotation::new(&k, &k2, d2.clone());
        assert!(token.check_gateway(&d2).is_err());
        token.check_gateway_rotated(&d2, Some(&rot)).unwrap();
        token.check_gateway_rotated(&d, Some(&rot)).unwrap();
        // A statement for another document, or retiring other keys: refused.
        assert!(token.check_gateway_rotated(&d2, None).is_err());
        let (k3, _) = gateway();
        let d3 = IdentityDocument::new("gateway:main", "gateway", &k3, "2026-11-28T00:00:00Z");
        assert!(token.check_gateway_rotated(&d3, Some(&rot)).is_err());
        let other = crate::envelope::KeyRotation::new(&k3, &k2, d2.clone());
        assert!(token.check_gateway_rotated(&d2, Some(&other)).is_err());
    }

    #[test]
    fn a_tampered_token_is_refused() {
        let (k, d) = gateway();
        let text = Token::sign(&k, claims(&d)).to_text();
        let (head, sig) = text.rsplit_once('.').unwrap();
        let mut c = claims(&d);
        c.max_uses = 1_000_000;
        let tampered = format!(
            "{TOKEN_PREFIX}{}.{sig}",
            b64_encode(&serde_json::to_vec(&c).unwrap())
        );
        assert!(Token::parse(&tampered).unwrap().check_gateway(&d).is_err());
        assert!(Token::parse(head).is_err());
        assert!(Token::parse("nope").is_err());
        assert!(Token::parse(&"x".repeat(5000)).is_err());
    }

    #[test]
    fn an_answer_is_bound_to_the_node_and_its_key() {
        let (k, d) = gateway();
        let node = Keys::generate();
        let pk = node.sign_pk().to_bytes();
        let claims = AnswerClaims {
            v: 1,
            status: Standing::Enrolled,
            node_id: "node:pump-1".into(),
            node_sign_pk: b64_encode(&pk),
            token_id: "et-1".into(),
            kind: "new".into(),
            gateway: d.clone(),
            now_ms: 5,
        };
        let a = Answer::sign(&k, &claims);
        assert_eq!(a.verify(&k.sign_pk(), "node:pump-1", &pk).unwrap(), claims);
        assert!(a.verify(&k.sign_pk(), "node:pump-2", &pk).is_err());
        let other = Keys::generate().sign_pk().to_bytes();
        assert!(a.verify(&k.sign_pk(), "node:pump-1", &other).is_err());
        assert!(a
            .verify(&Keys::generate().sign_pk(), "node:pump-1", &pk)
            .is_err());
    }

    proptest::proptest! {
        /// A hello's time statement can never be taken as the answer to a node's
        /// request: that echo is a request signature (base64url), which holds no `/`.
        #[test]
        fn a_hello_echo_is_never_a_request_signature(sig in proptest::array::uniform32(0u8..), nonce in "[A-Za-z0-9_-]{1,64}") {
            let mut full = [0u8; 64];
            full[..32].copy_from_slice(&sig);
            full[32..].copy_from_slice(&sig);
            proptest::prop_assert!(!b64_encode(&full).contains('/'));
            proptest::prop_assert!(hello_echo(&nonce).contains('/'));
            proptest::prop_assert_ne!(hello_echo(&nonce), b64_encode(&full));
        }

        #[test]
        fn arbitrary_text_never_panics(s in ".{0,600}") {
            let _ = Token::parse(&s);
            let _ = Token::parse(&format!("{TOKEN_PREFIX}{s}"));
        }
    }
}
