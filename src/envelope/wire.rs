//! Envelope v1 wire form (PROTOCOL §3) and the bytes that are authenticated.
//!
//! Parsing is strict and allocation-bounded by the caller's size limit: unknown fields,
//! non-canonical base64, wrong key/signature lengths and out-of-grammar ids are all
//! `bad_request`; any other `v` or `suite` is `unsupported_version` (no negotiation).

use serde::{Deserialize, Serialize};

use super::node_id::is_valid_node_id;
use super::pae::{pae, serde_b64};

/// The only version this code speaks.
pub const ENVELOPE_VERSION: u32 = 1;
/// The only suite: HPKE base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20Poly1305.
pub const SUITE: &str = "X25519-HKDF-SHA256-ChaCha20Poly1305";
/// Domain of the header PAE (also the HPKE `info` prefix).
pub const ENVELOPE_DOMAIN: &str = "outpost/envelope/v1";
/// Domain of the signature PAE.
pub const ENVELOPE_SIG_DOMAIN: &str = "outpost/envelope/v1/sig";

/// An envelope as it travels. Binary fields hold raw bytes; JSON carries base64url.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub v: u32,
    pub suite: String,
    pub message_id: String,
    pub sender_node_id: String,
    pub recipient_node_id: String,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub payload_type: String,
    pub priority: u64,
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub enc: Vec<u8>,
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub ciphertext: Vec<u8>,
    #[serde(with = "serde_b64")]
    #[cfg_attr(test, schemars(with = "String"))]
    pub signature: Vec<u8>,
}

/// Why bytes are not a well-formed v1 envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("unsupported envelope version or suite")]
    UnsupportedVersion,
    #[error("malformed envelope: {0}")]
    Malformed(String),
}

/// Just enough to tell "another version" from "garbage".
#[derive(Deserialize)]
struct VersionPeek {
    v: Option<serde_json::Value>,
    suite: Option<serde_json::Value>,
}

impl Envelope {
    /// Parse JSON bytes and check the grammar (not signatures, not time, not trust).
    pub fn from_json(bytes: &[u8]) -> Result<Self, WireError> {
        match serde_json::from_slice::<Envelope>(bytes) {
            Ok(env) => {
                env.check_syntax()?;
                Ok(env)
            }
            Err(e) => {
                // A future version may add fields; answer it as unsupported, not malformed.
                if let Ok(peek) = serde_json::from_slice::<VersionPeek>(bytes) {
                    let v_other = peek.v.as_ref().is_some_and(|v| v.as_u64() != Some(1));
                    let suite_other = peek
                        .suite
                        .as_ref()
                        .is_some_and(|s| s.as_str() != Some(SUITE));
                    if v_other || suite_other {
                        return Err(WireError::UnsupportedVersion);
                    }
                }
                Err(WireError::Malformed(short(&e.to_string())))
            }
        }
    }

    /// Compact JSON, field order as in PROTOCOL §3.1.
    pub fn to_json(&self) -> Vec<u8> {
        // Strings, integers and byte vectors always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Grammar of every field.
    pub fn check_syntax(&self) -> Result<(), WireError> {
        if self.v != ENVELOPE_VERSION || self.suite != SUITE {
            return Err(WireError::UnsupportedVersion);
        }
        let bad = |what: &str| Err(WireError::Malformed(what.to_owned()));
        if !is_valid_message_id(&self.message_id) {
            return bad("message_id must be 1-128 characters of [A-Za-z0-9._-]");
        }
        if !is_valid_node_id(&self.sender_node_id) {
            return bad("invalid sender_node_id");
        }
        if !is_valid_node_id(&self.recipient_node_id) {
            return bad("invalid recipient_node_id");
        }
        if !is_valid_payload_type(&self.payload_type) {
            return bad("payload_type must match [A-Z][A-Z0-9_]{0,31}");
        }
        if self.expires_at_ms <= self.created_at_ms {
            return bad("expires_at_ms must be after created_at_ms");
        }
        if self.enc.len() != 32 {
            return bad("enc must be 32 bytes");
        }
        if self.ciphertext.len() < 16 {
            return bad("ciphertext shorter than the AEAD tag");
        }
        if self.signature.len() != 64 {
            return bad("signature must be 64 bytes");
        }
        Ok(())
    }

    /// H = PAE(domain, suite, message_id, sender, recipient, u64le(created), u64le(expires),
    /// payload_type, u64le(priority)); the HPKE `aad`.
    pub fn header_bytes(&self) -> Vec<u8> {
        header_pae(&HeaderRef {
            message_id: &self.message_id,
            sender_node_id: &self.sender_node_id,
            recipient_node_id: &self.recipient_node_id,
            created_at_ms: self.created_at_ms,
            expires_at_ms: self.expires_at_ms,
            payload_type: &self.payload_type,
            priority: self.priority,
        })
    }

    /// PAE("outpost/envelope/v1/sig", H, enc, ciphertext): what the sender signs.
    pub fn signed_bytes(&self) -> Vec<u8> {
        signed_pae(&self.header_bytes(), &self.enc, &self.ciphertext)
    }
}

/// Borrowed header fields, shared by seal and open.
pub(crate) struct HeaderRef<'a> {
    pub message_id: &'a str,
    pub sender_node_id: &'a str,
    pub recipient_node_id: &'a str,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub payload_type: &'a str,
    pub priority: u64,
}

pub(crate) fn header_pae(h: &HeaderRef<'_>) -> Vec<u8> {
    pae(&[
        ENVELOPE_DOMAIN.as_bytes(),
        SUITE.as_bytes(),
        h.message_id.as_bytes(),
        h.sender_node_id.as_bytes(),
        h.recipient_node_id.as_bytes(),
        &h.created_at_ms.to_le_bytes(),
        &h.expires_at_ms.to_le_bytes(),
        h.payload_type.as_bytes(),
        &h.priority.to_le_bytes(),
    ])
}

pub(crate) fn signed_pae(header: &[u8], enc: &[u8], ciphertext: &[u8]) -> Vec<u8> {
    pae(&[ENVELOPE_SIG_DOMAIN.as_bytes(), header, enc, ciphertext])
}

/// HPKE `info` = "outpost/envelope/v1" ‖ recipient_node_id (plain concatenation).
pub(crate) fn hpke_info(recipient_node_id: &str) -> Vec<u8> {
    let mut info = Vec::with_capacity(ENVELOPE_DOMAIN.len() + recipient_node_id.len());
    info.extend_from_slice(ENVELOPE_DOMAIN.as_bytes());
    info.extend_from_slice(recipient_node_id.as_bytes());
    info
}

/// ULIDs and UUID text both fit; the bound keeps dedup keys small.
pub fn is_valid_message_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// `TASK_REQUEST`, `TASK_RESULT`, `COMMAND`, `DATA`, the reserved `DELIVERY_RECEIPT`, or a future
/// upper-snake-case type (receivers decide what they process).
pub fn is_valid_payload_type(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
}

fn short(s: &str) -> String {
    s.chars().take(200).collect()
}
