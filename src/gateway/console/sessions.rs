//! Console sign-in sessions, in this gateway process's memory.
//!
//! A session is made when an operator signs in with a gateway token (the HTTP edge has
//! checked it). The browser holds a random 256-bit id in a cookie; this table keeps only
//! the id's SHA-256, so a copy of the table (a core dump) names no usable cookie. Each
//! session carries the token's id (`jti`, re-checked against the revocation list on
//! every request by the edge), whether the token has `admin`, and a CSRF token that
//! every form must echo. It ends at the earlier of [`SESSION_MS`] after sign-in and the
//! token's own expiry, or at sign-out.
//!
//! Limits, by design (docs/CONSOLE.md): a gateway restart signs everyone out, and with
//! replicas on PostgreSQL a session is valid only at the replica that made it (a load
//! balancer in front of replicas needs session affinity for the console).
//!
//! Failed sign-ins drain a per-process token bucket ([`FAILED_BURST`], one back every
//! [`FAILED_REFILL_MS`]); while it is empty every sign-in is refused without looking at
//! the token.

use std::collections::HashMap;
use std::sync::Mutex;

use rand::RngCore;
use sha2::{Digest, Sha256};

/// A session lasts at most this long (and never past its token's expiry).
pub const SESSION_MS: u64 = 12 * 3_600_000;
/// Sessions held at once; past it the oldest goes (bounded memory).
pub const MAX_SESSIONS: usize = 10_000;
/// Failed sign-ins allowed in a burst…
pub const FAILED_BURST: u32 = 10;
/// …and one more each this often.
pub const FAILED_REFILL_MS: u64 = 6_000;

/// One signed-in operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The token's subject (who acts).
    pub subject: String,
    /// The token's id: the session ends when it is revoked.
    pub jti: String,
    /// The token has `admin`: the session may act, not only look.
    pub admin: bool,
    pub created_ms: u64,
    pub expires_ms: u64,
    /// What every form of this session must carry (hex, 256 bits).
    pub csrf: String,
}

/// The claims a checked token gave the sign-in.
#[derive(Debug, Clone)]
pub struct SignIn {
    pub subject: String,
    pub jti: String,
    pub admin: bool,
    pub token_expires_ms: u64,
}

/// The failed sign-in limiter's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    tokens: u32,
    /// When the last token was added back (or the bucket was full).
    at_ms: u64,
}

impl Bucket {
    fn refill(&mut self, now_ms: u64) {
        if self.tokens >= FAILED_BURST {
            self.at_ms = now_ms;
            return;
        }
        let back = now_ms.saturating_sub(self.at_ms) / FAILED_REFILL_MS;
        if back > 0 {
            self.tokens = (self.tokens as u64 + back).min(FAILED_BURST as u64) as u32;
            self.at_ms += back * FAILED_REFILL_MS;
        }
    }
}

pub struct Sessions {
    by_hash: Mutex<HashMap<[u8; 32], Session>>,
    failed: Mutex<Bucket>,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// 256 random bits, hex.
pub fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex(&b)
}

fn digest(cookie: &str) -> [u8; 32] {
    Sha256::digest(cookie.as_bytes()).into()
}

/// Equal without an early exit (CSRF tokens, login nonces).
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Sessions {
    pub fn new() -> Self {
        Self {
            by_hash: Mutex::new(HashMap::new()),
            failed: Mutex::new(Bucket {
                tokens: FAILED_BURST,
                at_ms: 0,
            }),
        }
    }

    /// A new session for `who`; returns the cookie value (only the browser keeps it)
    /// and the session.
    pub fn create(&self, who: SignIn, now_ms: u64) -> (String, Session) {
        let cookie = random_hex();
        let s = Session {
            subject: who.subject,
            jti: who.jti,
            admin: who.admin,
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add(SESSION_MS).min(who.token_expires_ms),
            csrf: random_hex(),
        };
        let mut g = lock(&self.by_hash);
        if g.len() >= MAX_SESSIONS {
            g.retain(|_, s| s.expires_ms > now_ms);
        }
        if g.len() >= MAX_SESSIONS {
            if let Some(oldest) = g.iter().min_by_key(|(_, s)| s.created_ms).map(|(k, _)| *k) {
                g.remove(&oldest);
            }
        }
        g.insert(digest(&cookie), s.clone());
        (cookie, s)
    }

    /// The live session a cookie value names (an expired one is forgotten).
    pub fn get(&self, cookie: &str, now_ms: u64) -> Option<Session> {
        let key = digest(cookie);
        let mut g = lock(&self.by_hash);
        match g.get(&key) {
            Some(s) if s.expires_ms > now_ms => Some(s.clone()),
            Some(_) => {
                g.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Sign-out (or a revoked token): the cookie names nothing any more.
    pub fn remove(&self, cookie: &str) {
        lock(&self.by_hash).remove(&digest(cookie));
    }

    /// How many sessions are held (live or not yet pruned).
    pub fn len(&self) -> usize {
        lock(&self.by_hash).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// May a sign-in be tried now (the failed sign-in bucket is not empty)?
    pub fn sign_in_allowed(&self, now_ms: u64) -> bool {
        let mut b = lock(&self.failed);
        b.refill(now_ms);
        b.tokens > 0
    }

    /// A sign-in failed: one token out of the bucket.
    pub fn sign_in_failed(&self, now_ms: u64) {
        let mut b = lock(&self.failed);
        b.refill(now_ms);
        b.tokens = b.tokens.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(exp: u64) -> SignIn {
        SignIn {
            subject: "alice".into(),
            jti: "j1".into(),
            admin: true,
            token_expires_ms: exp,
        }
    }

    #[test]
    fn a_session_is_found_by_its_cookie_only_and_ends_at_the_earlier_expiry() {
        let s = Sessions::new();
        let (cookie, made) = s.create(who(u64::MAX), 1_000);
        assert_eq!(cookie.len(), 64);
        assert_eq!(made.csrf.len(), 64);
        assert_eq!(made.expires_ms, 1_000 + SESSION_MS);
        assert_eq!(s.get(&cookie, 2_000), Some(made.clone()));
        // The table holds the cookie's hash, never the cookie.
        assert!(!lock(&s.by_hash).contains_key(cookie.as_bytes()));
        assert_eq!(s.get(&random_hex(), 2_000), None);
        assert_eq!(s.get(&cookie, 1_000 + SESSION_MS), None);
        assert!(s.is_empty(), "an expired session is forgotten when seen");
        // A token that expires sooner ends the session sooner.
        let (c2, m2) = s.create(who(5_000), 1_000);
        assert_eq!(m2.expires_ms, 5_000);
        assert!(s.get(&c2, 4_999).is_some());
        assert!(s.get(&c2, 5_000).is_none());
        // Two sign-ins never share a cookie or a CSRF token.
        let (a, sa) = s.create(who(u64::MAX), 1);
        let (b, sb) = s.create(who(u64::MAX), 1);
        assert_ne!(a, b);
        assert_ne!(sa.csrf, sb.csrf);
        s.remove(&a);
        assert_eq!(s.get(&a, 2), None);
        assert!(s.get(&b, 2).is_some());
    }

    #[test]
    fn failed_sign_ins_drain_the_bucket_and_it_refills_over_time() {
        let s = Sessions::new();
        let t0 = 1_000_000;
        for _ in 0..FAILED_BURST {
            assert!(s.sign_in_allowed(t0));
            s.sign_in_failed(t0);
        }
        assert!(!s.sign_in_allowed(t0));
        assert!(!s.sign_in_allowed(t0 + FAILED_REFILL_MS - 1));
        assert!(s.sign_in_allowed(t0 + FAILED_REFILL_MS));
        s.sign_in_failed(t0 + FAILED_REFILL_MS);
        assert!(!s.sign_in_allowed(t0 + FAILED_REFILL_MS));
        // Never more than the burst, however long it rested.
        let later = t0 + 1_000 * FAILED_REFILL_MS;
        for _ in 0..FAILED_BURST {
            assert!(s.sign_in_allowed(later));
            s.sign_in_failed(later);
        }
        assert!(!s.sign_in_allowed(later));
    }

    #[test]
    fn the_table_is_bounded() {
        let s = Sessions::new();
        let (first, _) = s.create(who(u64::MAX), 0);
        for i in 1..=MAX_SESSIONS as u64 {
            s.create(who(u64::MAX), i);
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        assert_eq!(s.get(&first, 1), None, "the oldest made room");
    }

    #[test]
    fn same_compares_whole_strings() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
        assert!(!same("", "a"));
    }
}
