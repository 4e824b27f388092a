//! The deny matrix: each way a token can be wrong maps to the right reason and HTTP class.

use super::{world, World, ME, SKEW, T0};
use crate::envelope::{b64_encode, Keys};
use crate::token::{
    check, check_cached, issue, paseto, Claims, Decision, DenyCode, DenyReason, Request,
    VerifyCache,
};

fn claims(iss: &str, aud: &str, scopes: &[&str]) -> Claims {
    Claims::new(
        iss,
        "ops@example",
        aud,
        scopes.iter().map(|s| s.to_string()).collect(),
        T0,
        3_600_000,
        "jti-1",
    )
    .unwrap()
}

fn decide(w: &World, token: &str, req: Request<'_>, now: u64) -> Decision {
    check(token, &req, now, SKEW, &w.trust, &|jti: &str| {
        jti == "revoked-jti"
    })
}

fn reason(d: Decision) -> Option<DenyReason> {
    match d {
        Decision::Allow { .. } => None,
        Decision::Deny { code, reason } => {
            assert_eq!(code, reason.code());
            Some(reason)
        }
    }
}

#[test]
fn valid_token_allows_and_returns_claims() {
    let w = world();
    let c = claims("gateway:main", ME, &["tool:echo"]);
    let t = issue(&w.gw, &c).unwrap();
    match decide(&w, &t, Request::tool(ME, "echo"), T0 + 1) {
        Decision::Allow { claims } => assert_eq!(claims, c),
        other => panic!("{other:?}"),
    }
}

#[test]
fn deny_matrix() {
    let w = world();
    let gw =
        |aud: &str, scopes: &[&str]| issue(&w.gw, &claims("gateway:main", aud, scopes)).unwrap();
    let echo = Request::tool(ME, "echo");
    let mut revoked = claims("gateway:main", ME, &["tool:echo"]);
    revoked.jti = "revoked-jti".into();
    let revoked = issue(&w.gw, &revoked).unwrap();
    // Signed by a key nobody trusts, naming an unknown issuer.
    let unknown = issue(&w.rogue, &claims("gateway:rogue", ME, &["tool:echo"])).unwrap();
    // Claims to be the gateway but signed by the rogue key.
    let forged = issue(&w.rogue, &claims("gateway:main", ME, &["tool:echo"])).unwrap();
    // A trusted peer without the `issue` right.
    let no_right = issue(&w.sender_only, &claims("node:other", ME, &["tool:echo"])).unwrap();
    // Footer kid and iss disagree (signed correctly by the kid's key).
    let body = serde_json::to_vec(&claims("node:other", ME, &["tool:echo"])).unwrap();
    let mismatched = paseto::sign(&w.gw, &body, br#"{"kid":"gateway:main"}"#, b"").unwrap();
    // Payload tampered after signing.
    let good = gw(ME, &["tool:echo"]);
    let mut tampered = good.clone();
    let flip = tampered.len() - 100;
    let ch = if &tampered[flip..flip + 1] == "A" {
        "B"
    } else {
        "A"
    };
    tampered.replace_range(flip..flip + 1, ch);
    let exp_ms = T0 + 3_600_000;

    let cases: Vec<(&str, String, Request<'_>, u64, Option<DenyReason>)> = vec![
        ("valid", good.clone(), echo, T0, None),
        ("aud *", gw("*", &["tool:echo"]), echo, T0, None),
        ("tool:*", gw(ME, &["tool:*"]), echo, T0, None),
        ("admin", gw(ME, &["admin"]), echo, T0, None),
        (
            "admin scope",
            gw(ME, &["admin"]),
            Request::scope(ME, "admin"),
            T0,
            None,
        ),
        (
            "tool:* is not admin",
            gw(ME, &["tool:*"]),
            Request::scope(ME, "admin"),
            T0,
            Some(DenyReason::MissingScope),
        ),
        (
            "wrong audience",
            gw("node:pump-18", &["tool:echo"]),
            echo,
            T0,
            Some(DenyReason::WrongAudience),
        ),
        (
            "missing scope",
            gw(ME, &["tool:sysinfo"]),
            echo,
            T0,
            Some(DenyReason::MissingScope),
        ),
        (
            "prefix is not a scope",
            gw(ME, &["tool:ech"]),
            echo,
            T0,
            Some(DenyReason::MissingScope),
        ),
        (
            "expired at exp",
            good.clone(),
            echo,
            exp_ms,
            Some(DenyReason::Expired),
        ),
        (
            "valid just before exp",
            good.clone(),
            echo,
            exp_ms - 1,
            None,
        ),
        (
            "skew never extends exp",
            good.clone(),
            echo,
            exp_ms + 1,
            Some(DenyReason::Expired),
        ),
        (
            "not yet valid",
            good.clone(),
            echo,
            T0 - SKEW - 1,
            Some(DenyReason::NotYetValid),
        ),
        ("skew helps nbf", good.clone(), echo, T0 - SKEW, None),
        (
            "unknown issuer",
            unknown,
            echo,
            T0,
            Some(DenyReason::UnknownIssuer),
        ),
        (
            "forged signature",
            forged,
            echo,
            T0,
            Some(DenyReason::BadSignature),
        ),
        (
            "tampered payload",
            tampered,
            echo,
            T0,
            Some(DenyReason::BadSignature),
        ),
        (
            "issuer without issue right",
            no_right,
            echo,
            T0,
            Some(DenyReason::IssuerNotAllowed),
        ),
        (
            "iss != kid",
            mismatched,
            echo,
            T0,
            Some(DenyReason::Malformed),
        ),
        ("revoked", revoked, echo, T0, Some(DenyReason::Revoked)),
        (
            "missing",
            String::new(),
            echo,
            T0,
            Some(DenyReason::Missing),
        ),
        (
            "garbage",
            "not a token".into(),
            echo,
            T0,
            Some(DenyReason::Malformed),
        ),
        (
            "local purpose",
            good.replacen("v4.public.", "v4.local.", 1),
            echo,
            T0,
            Some(DenyReason::Malformed),
        ),
        (
            "v3",
            good.replacen("v4.public.", "v3.public.", 1),
            echo,
            T0,
            Some(DenyReason::Malformed),
        ),
        (
            "no footer",
            good.rsplit_once('.').unwrap().0.to_string(),
            echo,
            T0,
            Some(DenyReason::Malformed),
        ),
        (
            "footer swapped to other kid",
            format!(
                "{}.{}",
                good.rsplit_once('.').unwrap().0,
                b64_encode(br#"{"kid":"node:other"}"#)
            ),
            echo,
            T0,
            Some(DenyReason::BadSignature),
        ),
    ];
    for (name, token, req, now, want) in &cases {
        assert_eq!(reason(decide(&w, token, *req, *now)), *want, "{name}");
    }
    // The memo of verifications changes no decision: one shared cache, the whole
    // matrix twice (cold, then with every authentic token already remembered).
    let cache = VerifyCache::new(64);
    for round in ["cold", "warm"] {
        for (name, token, req, now, want) in &cases {
            let d = check_cached(
                token,
                req,
                *now,
                SKEW,
                &w.trust,
                &|jti: &str| jti == "revoked-jti",
                Some(&cache),
            );
            assert_eq!(reason(d), *want, "{name} ({round} cache)");
        }
    }
    assert!(!cache.is_empty());
}

#[test]
fn the_verify_cache_follows_the_trust_store_and_stays_bounded() {
    let w = world();
    let t = issue(&w.gw, &claims("gateway:main", ME, &["tool:echo"])).unwrap();
    let echo = Request::tool(ME, "echo");
    let no = |_: &str| false;
    let cache = VerifyCache::new(2);
    assert!(check_cached(&t, &echo, T0, SKEW, &w.trust, &no, Some(&cache)).is_allow());
    assert_eq!(cache.len(), 1);

    // The issuer was re-keyed: the remembered verification no longer counts.
    let rekeyed = Keys::from_secret_bytes(&[0x61; 32], &[0x62; 32]);
    let mut trust = crate::envelope::TrustStore::new();
    trust
        .add(
            crate::envelope::IdentityDocument::new(
                "gateway:main",
                "gateway",
                &rekeyed,
                "2025-11-22T08:00:00Z",
            ),
            crate::envelope::Rights {
                send: true,
                issue: true,
            },
        )
        .unwrap();
    assert_eq!(
        reason(check_cached(&t, &echo, T0, SKEW, &trust, &no, Some(&cache))),
        Some(DenyReason::BadSignature)
    );
    // The issuer is no longer trusted at all.
    let empty = crate::envelope::TrustStore::new();
    assert_eq!(
        reason(check_cached(&t, &echo, T0, SKEW, &empty, &no, Some(&cache))),
        Some(DenyReason::UnknownIssuer)
    );
    // Revocation and audience are decided per call, cached or not.
    let revoked = |_: &str| true;
    assert_eq!(
        reason(check_cached(
            &t,
            &echo,
            T0,
            SKEW,
            &w.trust,
            &revoked,
            Some(&cache)
        )),
        Some(DenyReason::Revoked)
    );
    assert_eq!(
        reason(check_cached(
            &t,
            &Request::tool("node:else", "echo"),
            T0,
            SKEW,
            &w.trust,
            &no,
            Some(&cache)
        )),
        Some(DenyReason::WrongAudience)
    );
    // Bounded: more distinct tokens than capacity never grow it past capacity.
    for i in 0..5 {
        let mut c = claims("gateway:main", ME, &["tool:echo"]);
        c.jti = format!("jti-{i}");
        let t = issue(&w.gw, &c).unwrap();
        assert!(check_cached(&t, &echo, T0, SKEW, &w.trust, &no, Some(&cache)).is_allow());
        assert!(cache.len() <= 2);
    }
}

#[test]
fn http_classes() {
    use DenyReason::*;
    for r in [
        Missing,
        Malformed,
        UnknownIssuer,
        BadSignature,
        Expired,
        NotYetValid,
    ] {
        assert_eq!(r.code(), DenyCode::Unauthorized, "{}", r.as_str());
    }
    for r in [IssuerNotAllowed, WrongAudience, MissingScope, Revoked] {
        assert_eq!(r.code(), DenyCode::Forbidden, "{}", r.as_str());
    }
}

#[test]
fn issue_refuses_bad_claims_and_inspect_reads_unverified() {
    let w = world();
    let mut c = claims("gateway:main", ME, &["tool:echo"]);
    let t = issue(&w.gw, &c).unwrap();
    let (back, footer) = crate::token::inspect(&t).unwrap();
    assert_eq!((back, footer.kid.as_str()), (c.clone(), "gateway:main"));
    c.scopes.clear();
    assert!(issue(&w.gw, &c).is_err());
    assert!(crate::token::inspect("v4.public.AAAA").is_err());
    let _ = Keys::generate();
}

#[test]
fn a_tenant_token_is_refused_where_tenants_are_unknown_and_decided_where_known() {
    let w = world();
    let mut c = claims("gateway:main", ME, &["tool:echo"]);
    c.tenant = Some("acme".into());
    let t = issue(&w.gw, &c).unwrap();
    // A node (tool/scope requests) knows no tenants: forbidden, whatever the scopes.
    assert_eq!(
        reason(decide(&w, &t, Request::tool(ME, "echo"), T0 + 1)),
        Some(DenyReason::TenantToken)
    );
    assert_eq!(DenyReason::TenantToken.code(), DenyCode::Forbidden);
    // A gateway takes it, and the claim reaches the caller.
    let mut gw = Request::tool(ME, "echo");
    gw.tenants = true;
    match decide(&w, &t, gw, T0 + 1) {
        Decision::Allow { claims } => assert_eq!(claims.tenant.as_deref(), Some("acme")),
        other => panic!("{other:?}"),
    }
    // A token without the claim is the same bytes as before tenants: no "tenant" key.
    let plain = claims("gateway:main", ME, &["tool:echo"]);
    assert!(!serde_json::to_string(&plain).unwrap().contains("tenant"));
}
