//! Node-side HTTP request signatures (PROTOCOL §5).
//!
//! `Outpost-Signature` = Ed25519 over PAE("outpost/http/v1", node_id, method,
//! path_and_query, timestamp text, SHA-256(body)). The timestamp is signed as the exact
//! header text and must be canonical decimal, so one request has exactly one valid
//! signature string — which is what makes the seen-signature cache a complete replay
//! defence within the ±skew window.

use std::collections::{HashSet, VecDeque};

use ed25519_dalek::Signature;
use sha2::{Digest as _, Sha256};

use super::keys::Keys;
use super::pae::{b64_decode_array, b64_encode, pae};
use super::trust::{Rights, TrustStore};

/// Domain of the request-signature PAE.
pub const HTTP_DOMAIN: &str = "outpost/http/v1";
/// Header names.
pub const HEADER_NODE: &str = "Outpost-Node";
pub const HEADER_TIMESTAMP: &str = "Outpost-Timestamp";
pub const HEADER_SIGNATURE: &str = "Outpost-Signature";

/// The bytes a request signature covers.
pub fn request_signed_bytes(
    node_id: &str,
    method: &str,
    path_and_query: &str,
    timestamp: &str,
    body: &[u8],
) -> Vec<u8> {
    let digest = Sha256::digest(body);
    pae(&[
        HTTP_DOMAIN.as_bytes(),
        node_id.as_bytes(),
        method.as_bytes(),
        path_and_query.as_bytes(),
        timestamp.as_bytes(),
        &digest,
    ])
}

/// Sign a request; returns the `Outpost-Signature` value. Send `timestamp_ms` as decimal
/// in `Outpost-Timestamp` and `node_id` in `Outpost-Node`.
pub fn sign_request(
    keys: &Keys,
    node_id: &str,
    method: &str,
    path_and_query: &str,
    timestamp_ms: u64,
    body: &[u8],
) -> String {
    let msg = request_signed_bytes(
        node_id,
        method,
        path_and_query,
        &timestamp_ms.to_string(),
        body,
    );
    b64_encode(&keys.sign(&msg))
}

/// Why a signed request was refused. All map to HTTP 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestSigError {
    #[error("missing or malformed request signature headers")]
    Malformed,
    /// The signature verified: only the timestamp is outside the skew.
    #[error("request timestamp outside the allowed clock skew")]
    Stale,
    #[error("unknown node")]
    UnknownNode,
    #[error("request signature does not verify")]
    BadSignature,
    #[error("request signature already seen")]
    Replayed,
    #[error("too many recent requests to remember; retry later")]
    CacheFull,
}

impl RequestSigError {
    pub fn code(&self) -> &'static str {
        "unauthorized"
    }
}

/// A request that passed [`verify_request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedRequest {
    pub timestamp_ms: u64,
    pub signature: [u8; 64],
    /// The peer's rights, for the caller's authorization decision.
    pub rights: Rights,
    /// Where the trust store keeps the signer ([`crate::envelope::Peer::address`]): its
    /// node id, or `<node id>@<tenant>` on a gateway with tenants.
    pub address: String,
}

/// Verify header values against the body. Does not consult the seen-cache: call
/// [`SeenSignatures::insert`] with the result (after verification, so forged requests
/// cannot fill the cache).
#[allow(clippy::too_many_arguments)]
pub fn verify_request(
    trust: &TrustStore,
    node_id: &str,
    method: &str,
    path_and_query: &str,
    timestamp: &str,
    signature_b64: &str,
    body: &[u8],
    now_ms: u64,
    skew_ms: u64,
) -> Result<VerifiedRequest, RequestSigError> {
    let ts: u64 = parse_canonical_u64(timestamp).ok_or(RequestSigError::Malformed)?;
    let sig = b64_decode_array::<64>(signature_b64).ok_or(RequestSigError::Malformed)?;
    let msg = request_signed_bytes(node_id, method, path_and_query, timestamp, body);
    // The retired key of a rotation still signs while its grace lasts: a node retrying
    // the rotation request whose answer it lost, or one that has not switched yet.
    let signature = Signature::from_bytes(&sig);
    // On a gateway with tenants one node id may be trusted in several tenants, each
    // with its own key (PROTOCOL §18): the peer is the one whose key verifies.
    let mut known = false;
    let found = trust.with_node_id(node_id).find(|p| {
        known = true;
        p.sign_keys(now_ms)
            .any(|k| k.verify_strict(&msg, &signature).is_ok())
    });
    let peer = match found {
        Some(p) => p,
        None if known => return Err(RequestSigError::BadSignature),
        None => return Err(RequestSigError::UnknownNode),
    };
    // After the signature: `Stale` says the node is who it claims and only its clock is
    // off, so the gateway may answer it with its own signed time (PROTOCOL §5). It costs
    // a stale request one verification more than checking the time first did.
    if ts.abs_diff(now_ms) > skew_ms {
        return Err(RequestSigError::Stale);
    }
    Ok(VerifiedRequest {
        timestamp_ms: ts,
        signature: sig,
        rights: peer.rights,
        address: peer.address(),
    })
}

fn parse_canonical_u64(text: &str) -> Option<u64> {
    let ok = !text.is_empty()
        && text.len() <= 20
        && text.bytes().all(|c| c.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if ok {
        text.parse().ok()
    } else {
        None
    }
}

/// Bounded memory of recently accepted request signatures.
///
/// An entry is needed only while its timestamp could still pass the skew check
/// (`timestamp + skew`), so pruning by time keeps the set small; the hard cap turns a
/// flood into `CacheFull` (refuse) rather than unbounded memory or forgotten entries
/// (which would re-open replays).
///
/// A signature is remembered by its first [`SEEN_KEY_BYTES`] bytes (of its `R`, which
/// `verify_strict` binds to the message and key): a gateway holds every node's requests
/// of the last skew window (at 10,000 nodes, over 100,000), and the full 64 bytes twice
/// over were ~200 B an entry where this is ~60. Keying on a prefix refuses at least what
/// the whole signature would: a replay, malleated or not, repeats its `R`; two fresh
/// signatures share 16 bytes of `R` with negligible probability (2^-128 a pair).
#[derive(Debug)]
pub struct SeenSignatures {
    skew_ms: u64,
    max_entries: usize,
    set: HashSet<SeenKey>,
    order: VecDeque<(u64, SeenKey)>,
}

/// How many leading bytes of a signature [`SeenSignatures`] keeps.
pub const SEEN_KEY_BYTES: usize = 16;
type SeenKey = [u8; SEEN_KEY_BYTES];

fn seen_key(sig: &[u8; 64]) -> SeenKey {
    let mut k = [0u8; SEEN_KEY_BYTES];
    k.copy_from_slice(&sig[..SEEN_KEY_BYTES]);
    k
}

impl SeenSignatures {
    pub fn new(skew_ms: u64, max_entries: usize) -> Self {
        Self {
            skew_ms,
            max_entries,
            set: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// Record `req`; `Err(Replayed)` if it was seen before.
    pub fn insert(&mut self, req: &VerifiedRequest, now_ms: u64) -> Result<(), RequestSigError> {
        self.prune(now_ms);
        let key = seen_key(&req.signature);
        if self.set.contains(&key) {
            return Err(RequestSigError::Replayed);
        }
        if self.set.len() >= self.max_entries {
            return Err(RequestSigError::CacheFull);
        }
        let until = req.timestamp_ms.saturating_add(self.skew_ms);
        self.set.insert(key);
        self.order.push_back((until, key));
        // Entries usually arrive in time order; keep the deque sorted cheaply when not.
        if self.order.len() >= 2 && self.order[self.order.len() - 2].0 > until {
            self.order.make_contiguous().sort_by_key(|(t, _)| *t);
        }
        Ok(())
    }

    /// Forget entries whose timestamps can no longer pass the skew check.
    pub fn prune(&mut self, now_ms: u64) {
        while let Some(&(until, sig)) = self.order.front() {
            if until >= now_ms {
                break;
            }
            self.order.pop_front();
            self.set.remove(&sig);
        }
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{IdentityDocument, Rights};

    fn setup() -> (Keys, TrustStore) {
        let k = Keys::generate();
        let mut t = TrustStore::new();
        t.add(
            IdentityDocument::new("node:a", "node", &k, "2026-11-22T06:00:00Z"),
            Rights {
                send: true,
                issue: false,
            },
        )
        .unwrap();
        (k, t)
    }

    #[test]
    fn sign_verify_and_tamper() {
        let (k, t) = setup();
        let now = 1_763_798_400_000;
        let sig = sign_request(&k, "node:a", "POST", "/v1/nodes/node:a/ack", now, b"{}");
        let ts = now.to_string();
        let ok = verify_request(
            &t,
            "node:a",
            "POST",
            "/v1/nodes/node:a/ack",
            &ts,
            &sig,
            b"{}",
            now + 1000,
            300_000,
        )
        .unwrap();
        assert!(ok.rights.send);
        let v = |n: &str, m: &str, p: &str, ts: &str, s: &str, b: &[u8], at: u64| {
            verify_request(&t, n, m, p, ts, s, b, at, 300_000).unwrap_err()
        };
        assert_eq!(
            v(
                "node:a",
                "GET",
                "/v1/nodes/node:a/ack",
                &ts,
                &sig,
                b"{}",
                now
            ),
            RequestSigError::BadSignature
        );
        assert_eq!(
            v(
                "node:a",
                "POST",
                "/v1/nodes/node:a/ack?x",
                &ts,
                &sig,
                b"{}",
                now
            ),
            RequestSigError::BadSignature
        );
        assert_eq!(
            v(
                "node:a",
                "POST",
                "/v1/nodes/node:a/ack",
                &ts,
                &sig,
                b"{ }",
                now
            ),
            RequestSigError::BadSignature
        );
        assert_eq!(
            v(
                "node:a",
                "POST",
                "/v1/nodes/node:a/ack",
                &(now + 1).to_string(),
                &sig,
                b"{}",
                now
            ),
            RequestSigError::BadSignature
        );
        assert_eq!(
            v(
                "node:b",
                "POST",
                "/v1/nodes/node:a/ack",
                &ts,
                &sig,
                b"{}",
                now
            ),
            RequestSigError::UnknownNode
        );
        assert_eq!(
            v(
                "node:a",
                "POST",
                "/v1/nodes/node:a/ack",
                &format!("0{ts}"),
                &sig,
                b"{}",
                now
            ),
            RequestSigError::Malformed
        );
        assert_eq!(
            v(
                "node:a",
                "POST",
                "/v1/nodes/node:a/ack",
                &ts,
                "AAAA",
                b"{}",
                now
            ),
            RequestSigError::Malformed
        );
        assert_eq!(
            v(
                "node:a",
                "POST",
                "/v1/nodes/node:a/ack",
                &ts,
                &sig,
                b"{}",
                now + 300_001
            ),
            RequestSigError::Stale
        );
        assert_eq!(
            v(
                "node:a",
                "POST",
                "/v1/nodes/node:a/ack",
                &ts,
                &sig,
                b"{}",
                now - 300_001
            ),
            RequestSigError::Stale
        );
    }

    /// `Stale` earns a signed time statement from the gateway (RELIABILITY F2), so
    /// only a request whose signature verifies may get it: a forged or unknown one
    /// outside the window is refused for what it is.
    #[test]
    fn a_stale_timestamp_is_reported_only_after_the_signature_verifies() {
        let (k, t) = setup();
        let week_ahead = 1_763_798_400_000 + 7 * 86_400_000;
        let now = 1_763_798_400_000;
        let ts = week_ahead.to_string();
        let sig = sign_request(&k, "node:a", "GET", "/x", week_ahead, b"");
        let v = |node: &str, sig: &str, body: &[u8]| {
            verify_request(&t, node, "GET", "/x", &ts, sig, body, now, 300_000).unwrap_err()
        };
        assert_eq!(v("node:a", &sig, b""), RequestSigError::Stale);
        assert_eq!(v("node:a", &sig, b"x"), RequestSigError::BadSignature);
        let forged = sign_request(&Keys::generate(), "node:a", "GET", "/x", week_ahead, b"");
        assert_eq!(v("node:a", &forged, b""), RequestSigError::BadSignature);
        assert_eq!(v("node:z", &sig, b""), RequestSigError::UnknownNode);
    }

    #[test]
    fn seen_cache_refuses_replays_and_prunes_by_time() {
        let (k, t) = setup();
        let mut seen = SeenSignatures::new(300_000, 2);
        let now = 1_763_798_400_000;
        let req = |ts: u64| {
            let s = sign_request(&k, "node:a", "GET", "/x", ts, b"");
            verify_request(
                &t,
                "node:a",
                "GET",
                "/x",
                &ts.to_string(),
                &s,
                b"",
                now,
                300_000,
            )
            .unwrap()
        };
        let r1 = req(now);
        seen.insert(&r1, now).unwrap();
        assert_eq!(
            seen.insert(&r1, now).unwrap_err(),
            RequestSigError::Replayed
        );
        // The same R with another S (a malleated copy) is the same request.
        let mut malleated = r1;
        malleated.signature[63] ^= 1;
        assert_eq!(
            seen.insert(&malleated, now).unwrap_err(),
            RequestSigError::Replayed
        );
        seen.insert(&req(now + 1), now).unwrap();
        assert_eq!(
            seen.insert(&req(now + 2), now).unwrap_err(),
            RequestSigError::CacheFull
        );
        // After the window, entries are forgotten (and could no longer pass verify anyway).
        seen.prune(now + 300_002);
        assert!(seen.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_header_values_never_panic(
            node in ".{0,40}", ts in ".{0,25}", sig in ".{0,100}",
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            static T: std::sync::OnceLock<TrustStore> = std::sync::OnceLock::new();
            let t = T.get_or_init(|| setup().1);
            let r = verify_request(t, &node, "GET", "/x", &ts, &sig, &body, 1_763_798_400_000, 300_000);
            proptest::prop_assert!(r.is_err());
        }
    }
}
