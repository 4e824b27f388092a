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
//! The table is bounded without letting one sign-in crowd out another's session: a token
//! (`jti`) holds at most [`MAX_PER_TOKEN`] sessions and a subject at most
//! [`MAX_PER_SUBJECT`]; the whole table at most [`MAX_SESSIONS`]. A new session that
//! meets a bound makes room within its own group: the oldest session of its own token
//! when that token has any; else (a token's first session) the oldest of the token
//! holding the most sessions in its subject, or, when the whole table is full (only many
//! distinct tokens can fill it), in the subject holding the most. So signing in again and
//! again with one token only ever ends that token's older sessions.
//!
//! A session's end (sign-out, revocation, making room) is announced on its
//! [`Sessions::ended`] token, so an open event stream stops at once.

use std::collections::HashMap;
use std::sync::Mutex;

use rand::RngCore;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// A session lasts at most this long (and never past its token's expiry).
pub const SESSION_MS: u64 = 12 * 3_600_000;
/// Sessions held at once (bounded memory).
pub const MAX_SESSIONS: usize = 10_000;
/// Sessions one token (`jti`) holds at once.
pub const MAX_PER_TOKEN: usize = 16;
/// Sessions one subject holds at once, over all its tokens.
pub const MAX_PER_SUBJECT: usize = 128;

/// One signed-in operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The token's subject (who acts).
    pub subject: String,
    /// The token's id: the session ends when it is revoked.
    pub jti: String,
    /// The token has `admin`: the session may act, not only look.
    pub admin: bool,
    /// The token's tenant: the session sees only that tenant's fleet. `None`: the
    /// gateway operator's, over every tenant.
    pub tenant: Option<String>,
    pub created_ms: u64,
    pub expires_ms: u64,
    /// What every form of this session must carry (hex, 256 bits).
    pub csrf: String,
}

impl Session {
    /// Who the session acts as, for what it may see.
    pub fn caller(&self) -> crate::gateway::caller::Caller {
        crate::gateway::caller::Caller {
            subject: self.subject.clone(),
            tenant: self.tenant.clone(),
        }
    }
}

/// The claims a checked token gave the sign-in.
#[derive(Debug, Clone)]
pub struct SignIn {
    pub subject: String,
    pub jti: String,
    pub admin: bool,
    pub tenant: Option<String>,
    pub token_expires_ms: u64,
}

struct Entry {
    session: Session,
    /// Cancelled when the session is removed (never on its own expiry: whoever waits
    /// on it also watches the time).
    ended: CancellationToken,
}

pub struct Sessions {
    table: Mutex<Table>,
    /// Why recently ended sessions ended, by their cookie's hash (at most
    /// [`ENDED_KEPT`], the oldest forgotten first): the sign-in page tells the operator
    /// whose cookie names one.
    ended: Mutex<std::collections::VecDeque<([u8; 32], Ended)>>,
}

/// How many ended sessions' reasons are kept.
pub const ENDED_KEPT: usize = 1_024;

/// Why a session ended before its operator signed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The token it was signed in with was revoked.
    TokenRevoked,
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
            table: Mutex::new(Table::default()),
            ended: Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// A new session for `who`; returns the cookie value (only the browser keeps it)
    /// and the session. Makes room within `who`'s own group when a bound is met (see
    /// the module docs).
    pub fn create(&self, who: SignIn, now_ms: u64) -> (String, Session) {
        let cookie = random_hex();
        let s = Session {
            subject: who.subject,
            jti: who.jti,
            admin: who.admin,
            tenant: who.tenant,
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add(SESSION_MS).min(who.token_expires_ms),
            csrf: random_hex(),
        };
        let mut t = lock(&self.table);
        if t.at_a_bound(&s) {
            t.remove_where(|e| e.expires_ms <= now_ms);
            if let Some(k) = t.make_room(&s) {
                t.remove(&k);
            }
        }
        t.insert(digest(&cookie), s.clone());
        (cookie, s)
    }

    /// The live session a cookie value names (an expired one is forgotten).
    pub fn get(&self, cookie: &str, now_ms: u64) -> Option<Session> {
        let key = digest(cookie);
        let mut t = lock(&self.table);
        match t.by_hash.get(&key) {
            Some(e) if e.session.expires_ms > now_ms => Some(e.session.clone()),
            Some(_) => {
                t.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Cancelled when the session `cookie` names is removed (sign-out, its token's
    /// revocation, making room); `None` if it names none.
    pub fn ended(&self, cookie: &str) -> Option<CancellationToken> {
        lock(&self.table)
            .by_hash
            .get(&digest(cookie))
            .map(|e| e.ended.clone())
    }

    /// Sign-out: the cookie names nothing any more.
    pub fn remove(&self, cookie: &str) {
        lock(&self.table).remove(&digest(cookie));
    }

    /// Token `jti` was revoked: every session it signed in ends, and the reason is
    /// kept for [`Sessions::end_reason`].
    pub fn end_token(&self, jti: &str) {
        let gone = lock(&self.table).remove_where(|s| s.jti == jti);
        let mut ended = lock(&self.ended);
        for k in gone {
            if ended.len() >= ENDED_KEPT {
                ended.pop_front();
            }
            ended.push_back((k, Ended::TokenRevoked));
        }
    }

    /// Why the session `cookie` named ended, when it ended for a reason the operator
    /// did not choose (and it was among the last [`ENDED_KEPT`]).
    pub fn end_reason(&self, cookie: &str) -> Option<Ended> {
        let key = digest(cookie);
        lock(&self.ended)
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, why)| *why)
    }

    /// How many sessions are held (live or not yet pruned).
    pub fn len(&self) -> usize {
        lock(&self.table).by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The sessions by their cookie's hash, and how many each token and subject holds.
#[derive(Default)]
struct Table {
    by_hash: HashMap<[u8; 32], Entry>,
    per_jti: HashMap<String, usize>,
    per_subject: HashMap<String, usize>,
}

fn up(n: &mut HashMap<String, usize>, k: &str) {
    *n.entry(k.to_string()).or_default() += 1;
}

fn down(n: &mut HashMap<String, usize>, k: &str) {
    if let Some(c) = n.get_mut(k) {
        *c -= 1;
        if *c == 0 {
            n.remove(k);
        }
    }
}

impl Table {
    fn insert(&mut self, key: [u8; 32], session: Session) {
        up(&mut self.per_jti, &session.jti);
        up(&mut self.per_subject, &session.subject);
        let ended = CancellationToken::new();
        if let Some(old) = self.by_hash.insert(key, Entry { session, ended }) {
            // A 256-bit random id met twice: never, but keep the counts right.
            self.forget(&old);
        }
    }

    /// Remove the session `key` names, announcing its end.
    fn remove(&mut self, key: &[u8; 32]) {
        if let Some(e) = self.by_hash.remove(key) {
            self.forget(&e);
        }
    }

    fn forget(&mut self, e: &Entry) {
        down(&mut self.per_jti, &e.session.jti);
        down(&mut self.per_subject, &e.session.subject);
        e.ended.cancel();
    }

    /// Remove every session `f` picks; returns their keys.
    fn remove_where(&mut self, f: impl Fn(&Session) -> bool) -> Vec<[u8; 32]> {
        let gone: Vec<[u8; 32]> = self
            .by_hash
            .iter()
            .filter(|(_, e)| f(&e.session))
            .map(|(k, _)| *k)
            .collect();
        for k in &gone {
            self.remove(k);
        }
        gone
    }

    fn of_token(&self, jti: &str) -> usize {
        self.per_jti.get(jti).copied().unwrap_or(0)
    }

    fn of_subject(&self, subject: &str) -> usize {
        self.per_subject.get(subject).copied().unwrap_or(0)
    }

    /// Does a new session `s` meet one of the table's bounds?
    fn at_a_bound(&self, s: &Session) -> bool {
        self.by_hash.len() >= MAX_SESSIONS
            || self.of_token(&s.jti) >= MAX_PER_TOKEN
            || self.of_subject(&s.subject) >= MAX_PER_SUBJECT
    }

    /// The session to end so that `s` fits, if one must (see the module docs).
    fn make_room(&self, s: &Session) -> Option<[u8; 32]> {
        let own = self.of_token(&s.jti);
        let subject_full = self.of_subject(&s.subject) >= MAX_PER_SUBJECT;
        let full = self.by_hash.len() >= MAX_SESSIONS;
        let jti = if own >= MAX_PER_TOKEN || (own > 0 && (subject_full || full)) {
            s.jti.clone()
        } else if subject_full {
            self.biggest_token_of(&s.subject)?
        } else if full {
            let subject = biggest(&self.per_subject)?;
            self.biggest_token_of(&subject)?
        } else {
            return None;
        };
        self.by_hash
            .iter()
            .filter(|(_, e)| e.session.jti == jti)
            .min_by_key(|(_, e)| e.session.created_ms)
            .map(|(k, _)| *k)
    }

    /// The token holding the most of `subject`'s sessions.
    fn biggest_token_of(&self, subject: &str) -> Option<String> {
        let mut n: HashMap<String, usize> = HashMap::new();
        for e in self
            .by_hash
            .values()
            .filter(|e| e.session.subject == subject)
        {
            up(&mut n, &e.session.jti);
        }
        biggest(&n)
    }
}

/// The key with the highest count (ties: the least key, so the choice is stable).
fn biggest(n: &HashMap<String, usize>) -> Option<String> {
    n.iter()
        .max_by_key(|(k, c)| (**c, std::cmp::Reverse(*k)))
        .map(|(k, _)| k.clone())
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
