use super::*;

fn who(exp: u64) -> SignIn {
    SignIn {
        tenant: None,
        subject: "alice".into(),
        jti: "j1".into(),
        admin: true,
        token_expires_ms: exp,
    }
}

#[test]
fn a_revoked_tokens_sessions_remember_why_they_ended_and_only_so_many() {
    let s = Sessions::new();
    let (c1, _) = s.create(who(u64::MAX), 1);
    let (c2, _) = s.create(who(u64::MAX), 2);
    let mut other = who(u64::MAX);
    other.jti = "j2".into();
    let (c3, _) = s.create(other, 3);
    s.remove(&c2);
    assert_eq!(s.end_reason(&c2), None, "a sign-out has no reason to tell");
    s.end_token("j1");
    assert_eq!(s.end_reason(&c1), Some(Ended::TokenRevoked));
    assert!(s.get(&c1, 4).is_none());
    assert_eq!(s.end_reason(&c3), None);
    assert!(s.get(&c3, 4).is_some());
    // Bounded: the oldest reasons are forgotten first.
    for i in 0..ENDED_KEPT {
        let mut w = who(u64::MAX);
        w.jti = format!("x{i}");
        s.create(w, 5);
        s.end_token(&format!("x{i}"));
    }
    assert_eq!(s.end_reason(&c1), None);
    assert!(lock(&s.ended).len() <= ENDED_KEPT);
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
    assert!(!lock(&s.table).by_hash.contains_key(cookie.as_bytes()));
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

fn token(subject: &str, jti: &str) -> SignIn {
    SignIn {
        tenant: None,
        subject: subject.into(),
        jti: jti.into(),
        admin: false,
        token_expires_ms: u64::MAX,
    }
}

/// Regression: 10,001 sign-ins with one read token signed the admin out (the table
/// made room by dropping its oldest session, whoever's it was).
#[test]
fn one_token_signing_in_again_and_again_ends_only_its_own_sessions() {
    let s = Sessions::new();
    let (admin, _) = s.create(token("operator", "admin-jti"), 0);
    let mut read = Vec::new();
    for i in 1..=MAX_SESSIONS as u64 + 1 {
        read.push(s.create(token("operator", "read-jti"), i).0);
    }
    assert!(s.get(&admin, 1).is_some(), "the admin is still signed in");
    assert_eq!(s.len(), 1 + MAX_PER_TOKEN);
    let live = read.iter().filter(|c| s.get(c, 1).is_some()).count();
    assert_eq!(live, MAX_PER_TOKEN);
    assert!(
        s.get(read.last().unwrap(), 1).is_some(),
        "the newest is kept"
    );
    assert!(s.get(&read[0], 1).is_none(), "the token's oldest made room");
}

#[test]
fn a_full_subject_makes_room_from_its_biggest_token_and_never_from_another_subject() {
    let s = Sessions::new();
    let (bob, _) = s.create(token("bob", "bob-1"), 0);
    let per = MAX_PER_TOKEN as u64;
    let mut first_of = Vec::new();
    for t in 0..(MAX_PER_SUBJECT as u64 / per) {
        for i in 0..per {
            let (c, _) = s.create(token("operator", &format!("t{t}")), 1 + t * per + i);
            if i == 0 {
                first_of.push(c);
            }
        }
    }
    assert_eq!(s.len(), 1 + MAX_PER_SUBJECT);
    // One more token of the full subject: the oldest session of one of its biggest
    // tokens makes room; bob's session stays.
    let (newcomer, _) = s.create(token("operator", "fresh"), 10_000);
    assert!(s.get(&newcomer, 10_001).is_some());
    assert!(s.get(&bob, 10_001).is_some());
    assert_eq!(s.len(), 1 + MAX_PER_SUBJECT);
    let gone = first_of
        .iter()
        .filter(|c| s.get(c, 10_001).is_none())
        .count();
    assert_eq!(gone, 1);
    // That token signs in again: now it makes room from its own sessions.
    s.create(token("operator", "fresh"), 10_002);
    assert!(s.get(&newcomer, 10_003).is_none());
    assert_eq!(s.len(), 1 + MAX_PER_SUBJECT);
}

#[test]
fn the_table_is_bounded_and_a_full_table_makes_room_from_the_biggest_subject() {
    let s = Sessions::new();
    let (admin, _) = s.create(token("admin", "a"), 0);
    let (crowd, _) = s.create(token("crowd", "c0"), 1);
    s.create(token("crowd", "c0"), 2);
    for i in 3..MAX_SESSIONS as u64 {
        s.create(token(&format!("s{i}"), &format!("j{i}")), i);
    }
    assert_eq!(s.len(), MAX_SESSIONS);
    let (new, _) = s.create(token("newcomer", "n"), 20_000);
    assert_eq!(s.len(), MAX_SESSIONS);
    assert!(s.get(&new, 20_001).is_some());
    assert!(s.get(&admin, 20_001).is_some());
    assert!(
        s.get(&crowd, 20_001).is_none(),
        "the biggest subject's oldest"
    );
    // Expired sessions are dropped first.
    let s = Sessions::new();
    let mut short = token("x", "short");
    short.token_expires_ms = 10;
    let (gone, _) = s.create(short, 0);
    for i in 1..MAX_SESSIONS as u64 {
        s.create(token(&format!("s{i}"), &format!("j{i}")), 11);
    }
    let (first, _) = s.create(token("s1", "j1"), 12);
    assert!(s.get(&first, 13).is_some());
    assert_eq!(s.len(), MAX_SESSIONS);
    assert!(s.get(&gone, 13).is_none());
}

#[test]
fn a_session_ends_on_its_cancellation_token_when_removed_or_revoked() {
    let s = Sessions::new();
    let (a, _) = s.create(token("operator", "j1"), 0);
    let (b, _) = s.create(token("operator", "j1"), 0);
    let (c, _) = s.create(token("operator", "j2"), 0);
    let (ea, eb, ec) = (
        s.ended(&a).unwrap(),
        s.ended(&b).unwrap(),
        s.ended(&c).unwrap(),
    );
    assert!(s.ended(&random_hex()).is_none());
    s.remove(&a);
    assert!(ea.is_cancelled() && !eb.is_cancelled());
    s.end_token("j1");
    assert!(eb.is_cancelled() && !ec.is_cancelled());
    assert!(s.get(&b, 1).is_none());
    assert!(s.get(&c, 1).is_some());
}

#[test]
fn same_compares_whole_strings() {
    assert!(same("abc", "abc"));
    assert!(!same("abc", "abd"));
    assert!(!same("abc", "ab"));
    assert!(!same("", "a"));
}
