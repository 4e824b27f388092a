//! The gateway's signed time (PROTOCOL §5, §6): its answer to a node request whose
//! signature verified but whose `Outpost-Timestamp` was outside the skew.
//!
//! A node whose clock went ahead and came back keeps the later time (the store's floor
//! never goes back on its own, RELIABILITY F2); the statement is the trusted time it
//! may lower it to. Signed over PAE like everything else, never over JSON text:
//!
//! ```text
//! PAE("outpost/time/v1", gateway_id, node_id, now_ms decimal text, echo)
//! ```
//!
//! `echo` is the refused request's `Outpost-Signature`, which names one request of one
//! node: a statement cannot be replayed to another node or as the answer to another
//! request.

use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::keys::Keys;
use super::pae::{b64_decode_array, b64_encode, pae};

/// Domain of the time-statement PAE.
pub const TIME_DOMAIN: &str = "outpost/time/v1";

/// `error.time` of a 401 `clock_skew` answer. Fields in alphabetical order (the JSON
/// is the same as `json!` would build).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct TimeStatement {
    /// The refused request's `Outpost-Signature`, as sent.
    pub echo: String,
    pub gateway_id: String,
    pub node_id: String,
    /// The gateway's time when it refused the request.
    pub now_ms: u64,
    /// b64url(Ed25519(gateway sign secret, the PAE above)).
    pub sig: String,
}

/// Why a statement was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeStatementError {
    #[error("time statement is from {0}, not from the node's gateway")]
    WrongGateway(String),
    #[error("time statement is for another node")]
    WrongNode,
    #[error("time statement answers another request")]
    WrongEcho,
    #[error("time statement signature is malformed or does not verify")]
    BadSignature,
}

/// The bytes a time statement's signature covers.
pub fn time_statement_signed_bytes(
    gateway_id: &str,
    node_id: &str,
    now_ms: u64,
    echo: &str,
) -> Vec<u8> {
    pae(&[
        TIME_DOMAIN.as_bytes(),
        gateway_id.as_bytes(),
        node_id.as_bytes(),
        now_ms.to_string().as_bytes(),
        echo.as_bytes(),
    ])
}

/// The gateway `gateway_id` (holding `keys`) states that its time is `now_ms`, in
/// answer to the request of `node_id` signed `echo`.
pub fn sign_time_statement(
    keys: &Keys,
    gateway_id: &str,
    node_id: &str,
    now_ms: u64,
    echo: &str,
) -> TimeStatement {
    let msg = time_statement_signed_bytes(gateway_id, node_id, now_ms, echo);
    TimeStatement {
        echo: echo.to_string(),
        gateway_id: gateway_id.to_string(),
        node_id: node_id.to_string(),
        now_ms,
        sig: b64_encode(&keys.sign(&msg)),
    }
}

/// The gateway's time, if `st` is from `gateway_id` (signed strictly by `gateway_key`,
/// the key pinned for it), for `node_id`, and answers the request signed `echo`.
pub fn verify_time_statement(
    st: &TimeStatement,
    gateway_id: &str,
    gateway_key: &VerifyingKey,
    node_id: &str,
    echo: &str,
) -> Result<u64, TimeStatementError> {
    if st.gateway_id != gateway_id {
        return Err(TimeStatementError::WrongGateway(st.gateway_id.clone()));
    }
    if st.node_id != node_id {
        return Err(TimeStatementError::WrongNode);
    }
    if st.echo != echo {
        return Err(TimeStatementError::WrongEcho);
    }
    let sig = b64_decode_array::<64>(&st.sig).ok_or(TimeStatementError::BadSignature)?;
    let msg = time_statement_signed_bytes(&st.gateway_id, &st.node_id, st.now_ms, &st.echo);
    gateway_key
        .verify_strict(&msg, &Signature::from_bytes(&sig))
        .map_err(|_| TimeStatementError::BadSignature)?;
    Ok(st.now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_780_000_000_000;
    const ECHO: &str = "c2lnbmF0dXJlLW9mLXRoZS1yZXF1ZXN0";

    #[test]
    fn a_statement_verifies_under_the_gateway_key_for_its_request() {
        let gw = Keys::generate();
        let st = sign_time_statement(&gw, "gateway:main", "node:a", NOW, ECHO);
        assert_eq!(
            verify_time_statement(&st, "gateway:main", &gw.sign_pk(), "node:a", ECHO),
            Ok(NOW)
        );
        // The wire form: the fields above, `now_ms` a JSON number.
        let v = serde_json::to_value(&st).unwrap();
        assert_eq!(v["now_ms"], NOW);
        assert_eq!(
            serde_json::from_value::<TimeStatement>(v).unwrap(),
            st,
            "round trip"
        );
    }

    #[test]
    fn another_request_node_gateway_or_key_is_refused() {
        let gw = Keys::generate();
        let st = sign_time_statement(&gw, "gateway:main", "node:a", NOW, ECHO);
        let pk = gw.sign_pk();
        let v = |st: &TimeStatement, gateway: &str, key: &VerifyingKey, node: &str, echo: &str| {
            verify_time_statement(st, gateway, key, node, echo).unwrap_err()
        };
        assert_eq!(
            v(&st, "gateway:main", &pk, "node:a", "b3RoZXItcmVxdWVzdA"),
            TimeStatementError::WrongEcho
        );
        assert_eq!(
            v(&st, "gateway:main", &pk, "node:b", ECHO),
            TimeStatementError::WrongNode
        );
        assert!(matches!(
            v(&st, "gateway:other", &pk, "node:a", ECHO),
            TimeStatementError::WrongGateway(_)
        ));
        let stranger = Keys::generate().sign_pk();
        assert_eq!(
            v(&st, "gateway:main", &stranger, "node:a", ECHO),
            TimeStatementError::BadSignature
        );
    }

    #[test]
    fn a_tampered_statement_is_refused() {
        let gw = Keys::generate();
        let pk = gw.sign_pk();
        let st = sign_time_statement(&gw, "gateway:main", "node:a", NOW, ECHO);
        let earlier = TimeStatement {
            now_ms: NOW - 7 * 86_400_000,
            ..st.clone()
        };
        let relabelled = TimeStatement {
            node_id: "node:b".into(),
            ..st.clone()
        };
        let garbled = TimeStatement {
            sig: "AAAA".into(),
            ..st.clone()
        };
        for bad in [&earlier, &garbled] {
            assert_eq!(
                verify_time_statement(bad, "gateway:main", &pk, "node:a", ECHO),
                Err(TimeStatementError::BadSignature)
            );
        }
        // Re-addressed to the node it is presented to: the signature no longer covers it.
        assert_eq!(
            verify_time_statement(&relabelled, "gateway:main", &pk, "node:b", ECHO),
            Err(TimeStatementError::BadSignature)
        );
    }

    #[test]
    fn the_signed_bytes_are_domain_separated_from_request_signatures() {
        let b = time_statement_signed_bytes("gateway:main", "node:a", NOW, ECHO);
        assert_eq!(&b[..8], &5u64.to_le_bytes());
        assert_eq!(&b[16..16 + TIME_DOMAIN.len()], TIME_DOMAIN.as_bytes());
        assert!(b
            .windows(NOW.to_string().len())
            .any(|w| w == NOW.to_string().as_bytes()));
    }
}
