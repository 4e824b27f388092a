//! The token gate both roles put in front of what a token allows (PROTOCOL §4): check
//! the token against the role's trust store and revocation list, read the trust store
//! once more when the issuer is unknown (`outpost trust add` may have written it since),
//! and explain a refusal in words. The node's local API (`app::auth`) and the gateway's
//! client API (`gateway::client_auth`) each hold one [`Gate`] and hand it their [`Book`].

use std::sync::Arc;

use crate::envelope::TrustStore;

use super::check::{check_cached, explain, Decision, DenyCode, DenyReason, Request, VerifyCache};
use super::claims::Claims;

/// What a role's gate reads: its clock, its trust store (and how to read it again) and
/// its revocation list.
pub trait Book {
    fn now_ms(&self) -> u64;
    fn skew_ms(&self) -> u64;
    fn trust(&self) -> Arc<TrustStore>;
    /// The issuer was unknown: read the trust store again before refusing.
    fn reread_trust(&self);
    /// Whether token id `jti` is revoked. A book that cannot read its list answers
    /// `true` (a token is refused, never honoured, when its revocation is unknown) and
    /// says so to its caller itself.
    fn is_revoked(&self, jti: &str) -> bool;
}

/// Why a token was refused: the code the edge answers, the reason, and the sentence
/// that says it (safe to show: it names nothing secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: DenyCode,
    pub reason: DenyReason,
    pub message: String,
}

/// One role's token gate, with its memo of signature checks (a client sends the same
/// token with every call; time window, audience, scope and revocation are decided on
/// every call).
pub struct Gate {
    cache: VerifyCache,
}

impl Gate {
    /// A gate remembering the signature checks of up to `tokens` distinct tokens.
    pub fn new(tokens: usize) -> Self {
        Self {
            cache: VerifyCache::new(tokens),
        }
    }

    /// `token` (empty when the caller sent none) for `req`: its claims, or why not.
    pub fn check(
        &self,
        book: &dyn Book,
        token: &str,
        req: &Request<'_>,
    ) -> Result<Claims, Refusal> {
        let revoked = |jti: &str| book.is_revoked(jti);
        let decide = |trust: &TrustStore| {
            check_cached(
                token,
                req,
                book.now_ms(),
                book.skew_ms(),
                trust,
                &revoked,
                Some(&self.cache),
            )
        };
        let mut d = decide(&book.trust());
        if matches!(
            d,
            Decision::Deny {
                reason: DenyReason::UnknownIssuer,
                ..
            }
        ) {
            book.reread_trust();
            d = decide(&book.trust());
        }
        match d {
            Decision::Allow { claims } => Ok(claims),
            Decision::Deny { code, reason } => Err(Refusal {
                code,
                reason,
                message: explain(reason, req),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;
    use crate::envelope::{IdentityDocument, Keys, Rights};
    use crate::token::{issue, Claims};

    /// A book whose trust store an operator fills after the first read.
    struct Fake {
        now: u64,
        shown: RefCell<Arc<TrustStore>>,
        written: Arc<TrustStore>,
        rereads: Cell<u32>,
        revoked: Vec<String>,
    }

    impl Book for Fake {
        fn now_ms(&self) -> u64 {
            self.now
        }
        fn skew_ms(&self) -> u64 {
            60_000
        }
        fn trust(&self) -> Arc<TrustStore> {
            self.shown.borrow().clone()
        }
        fn reread_trust(&self) {
            self.rereads.set(self.rereads.get() + 1);
            *self.shown.borrow_mut() = self.written.clone();
        }
        fn is_revoked(&self, jti: &str) -> bool {
            self.revoked.iter().any(|j| j == jti)
        }
    }

    fn token(keys: &Keys, jti: &str, now: u64) -> String {
        let c = Claims::new(
            "gateway:op",
            "alice",
            "node:a",
            vec!["admin".into()],
            now,
            3_600_000,
            jti,
        )
        .unwrap();
        issue(keys, &c).unwrap()
    }

    fn book(keys: &Keys, revoked: &[&str]) -> Fake {
        let mut t = TrustStore::new();
        let doc = IdentityDocument::new("gateway:op", "gateway", keys, "2026-01-01T00:00:00Z");
        t.add(
            doc,
            Rights {
                send: false,
                issue: true,
            },
        )
        .unwrap();
        Fake {
            now: 1_800_000_000_000,
            shown: RefCell::new(Arc::new(TrustStore::new())),
            written: Arc::new(t),
            rereads: Cell::new(0),
            revoked: revoked.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn an_issuer_added_since_the_last_read_is_found_by_one_more_read() {
        let keys = Keys::generate();
        let b = book(&keys, &[]);
        let gate = Gate::new(4);
        let req = Request::scope("node:a", "admin");
        let claims = gate.check(&b, &token(&keys, "j1", b.now), &req).unwrap();
        assert_eq!((claims.sub.as_str(), b.rereads.get()), ("alice", 1));
        // Known now: no more reads.
        gate.check(&b, &token(&keys, "j2", b.now), &req).unwrap();
        assert_eq!(b.rereads.get(), 1);
    }

    #[test]
    fn a_refusal_says_why_in_words_and_a_revoked_token_stays_refused_when_cached() {
        let keys = Keys::generate();
        let b = book(&keys, &["j1"]);
        let gate = Gate::new(4);
        let req = Request::scope("node:a", "admin");
        for _ in 0..2 {
            let r = gate
                .check(&b, &token(&keys, "j1", b.now), &req)
                .unwrap_err();
            assert_eq!(
                (r.code, r.reason),
                (DenyCode::Forbidden, DenyReason::Revoked)
            );
            assert!(!r.message.is_empty());
        }
        let r = gate.check(&b, "", &req).unwrap_err();
        assert_eq!(r.reason, DenyReason::Missing);
        let stranger = Keys::generate();
        let r = gate
            .check(&b, &token(&stranger, "j3", b.now), &req)
            .unwrap_err();
        assert_eq!(r.code, DenyCode::Unauthorized, "{r:?}");
    }
}
