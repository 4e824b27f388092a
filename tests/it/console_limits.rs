//! The console's limits against a real gateway (docs/CONSOLE.md, "Security model"):
//! failed sign-ins are budgeted per client address and never lock out a valid token;
//! one token signing in over and over is held back without touching anyone else's
//! session; an event stream ends with its session (sign-out, revocation).
//!
//! Clients bind to loopback aliases (127.0.0.2, 127.0.0.3, …) so the gateway sees
//! several addresses while an operator signs in from 127.0.0.1.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use crate::console::{sign_in, sign_in_from, Session};
use crate::harness::{http, Home};

fn alias(n: u8) -> Option<IpAddr> {
    Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
}

/// Floods of failed sign-ins from several addresses: each flooding address is held back
/// (429) once its own budget is spent, without its token being shown to be wrong; an
/// admin at another address signs in at once, every time; and a valid token signs in
/// even from a flooding address.
#[tokio::test(flavor = "multi_thread")]
async fn failed_sign_ins_flood_per_address_and_never_lock_out_a_valid_token() {
    let home = Home::init("gateway", "gateway:main", "");
    let gw = home.start();
    let admin = home.token("gateway:main", &["admin"], "1h");
    let floods = [alias(2), alias(3), alias(4)];
    let mut held_back = 0;
    for round in 0..15 {
        for from in floods {
            let (r, s) = sign_in_from(&gw, "v4.public.wrong", from).await;
            assert!(s.is_none());
            match r.status().as_u16() {
                401 => {}
                429 => held_back += 1,
                other => panic!("{from:?}: {other}"),
            }
        }
        // The admin from 127.0.0.1, in the middle of the floods (every third round:
        // a token's own sign-ins are budgeted too).
        if round % 3 != 0 {
            continue;
        }
        let (r, s) = sign_in(&gw, &admin).await;
        assert_eq!(r.status(), 303, "round {round}: the admin was refused");
        assert!(s.is_some());
    }
    assert!(
        held_back >= 3 * 3,
        "each flooding address held back past its burst: {held_back}"
    );
    // A valid token from a flooding address: its signature is checked, and it signs in.
    let (r, s) = sign_in_from(&gw, &admin, alias(2)).await;
    assert_eq!(r.status(), 303, "a valid token from a flooding address");
    assert!(s.is_some());
    // A token that does not verify from there is still held back.
    let (r, _) = sign_in_from(&gw, "v4.public.wrong", alias(2)).await;
    assert_eq!(r.status(), 429);
}

/// One read token signing in again and again is held back after its burst (429), and
/// however often it signs in, the admin's session (another token) stays.
#[tokio::test(flavor = "multi_thread")]
async fn one_token_signing_in_again_and_again_signs_no_one_else_out() {
    let home = Home::init("gateway", "gateway:main", "");
    let gw = home.start();
    let admin = home.token("gateway:main", &["admin"], "1h");
    let read = home.token("gateway:main", &["read"], "1h");
    let (_, s) = sign_in(&gw, &admin).await;
    let s = s.expect("the admin's session");
    let mut codes = Vec::new();
    for _ in 0..30 {
        codes.push(sign_in(&gw, &read).await.0.status().as_u16());
    }
    let made = codes.iter().filter(|c| **c == 303).count();
    assert!(
        (1..=10).contains(&made),
        "a token's sign-ins are limited: {codes:?}"
    );
    assert!(codes.iter().all(|c| *c == 303 || *c == 429), "{codes:?}");
    assert_eq!(s.get("/ui").await.status(), 200, "the admin is still in");
}

/// Read the stream until it ends; how long that took, or `None` if it did not within
/// `secs`.
async fn ends_within(mut r: reqwest::Response, secs: u64) -> Option<Duration> {
    let t0 = Instant::now();
    tokio::time::timeout(Duration::from_secs(secs), async {
        while let Ok(Some(_)) = r.chunk().await {}
    })
    .await
    .ok()
    .map(|_| t0.elapsed())
}

async fn open_stream(s: &Session) -> reqwest::Response {
    let r = s.get("/ui/events").await;
    assert_eq!(r.status(), 200);
    r
}

/// An open `/ui/events` stream ends when its session does: at sign-out, and when the
/// session's token is revoked (by the JSON API, not through this session).
#[tokio::test(flavor = "multi_thread")]
async fn an_event_stream_ends_with_its_session() {
    let home = Home::init("gateway", "gateway:main", "");
    let gw = home.start();
    let admin = home.token("gateway:main", &["admin"], "1h");
    let read = home.token("gateway:main", &["read"], "1h");

    // Sign-out.
    let (_, s) = sign_in(&gw, &admin).await;
    let s = s.expect("a session");
    let stream = open_stream(&s).await;
    let csrf = s.csrf().await;
    let r = s
        .post("/ui/logout", Some(&s.origin), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status(), 303);
    let took = ends_within(stream, 5).await;
    assert!(took.is_some(), "the stream outlived its signed-out session");

    // Revocation of the session's token.
    let (_, s) = sign_in(&gw, &read).await;
    let s = s.expect("a read session");
    let stream = open_stream(&s).await;
    let jti = outpost::token::inspect(&read).unwrap().0.jti;
    let r = http()
        .post(gw.url("/v1/revocations"))
        .bearer_auth(&admin)
        .json(&serde_json::json!({ "jti": jti }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let took = ends_within(stream, 5).await;
    assert!(took.is_some(), "the stream outlived its token's revocation");
    assert_eq!(s.get("/ui/fleet/rows").await.status(), 401);
}
