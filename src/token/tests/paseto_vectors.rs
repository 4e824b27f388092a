//! Every `v4.public` case of the official PASETO v4 vectors, through outpost's
//! `token::paseto` wrappers (the same calls `issue` and `check` make), plus the expected
//! failures: local tokens, v3 tokens and a public token checked with the wrong key.

use crate::envelope::tests::{hex, read_json};
use crate::token::paseto::{self, Parsed};

fn cases() -> Vec<serde_json::Value> {
    let v = read_json("paseto/v4.json");
    v["tests"].as_array().unwrap().clone()
}

fn s<'a>(t: &'a serde_json::Value, k: &str) -> &'a str {
    t[k].as_str().unwrap_or("")
}

#[test]
fn v4_public_success_vectors_sign_and_verify() {
    let mut n = 0;
    for t in cases()
        .iter()
        .filter(|t| !t["expect-fail"].as_bool().unwrap() && s(t, "token").starts_with("v4.public."))
    {
        let (payload, footer, implicit) =
            (s(t, "payload"), s(t, "footer"), s(t, "implicit-assertion"));
        let token = paseto::sign_with_keypair(
            &hex(s(t, "secret-key")),
            payload.as_bytes(),
            footer.as_bytes(),
            implicit.as_bytes(),
        )
        .unwrap();
        assert_eq!(
            token,
            s(t, "token"),
            "{}: signing reproduces the token",
            s(t, "name")
        );
        let parsed = Parsed::parse(&token).unwrap();
        assert_eq!(parsed.footer(), footer.as_bytes());
        let got = paseto::verify(&hex(s(t, "public-key")), &parsed, implicit.as_bytes()).unwrap();
        assert_eq!(got, payload.as_bytes(), "{}", s(t, "name"));
        // Wrong implicit assertion or a different footer must fail.
        assert!(paseto::verify(&hex(s(t, "public-key")), &parsed, b"{\"other\":1}").is_err());
        n += 1;
    }
    assert_eq!(n, 3, "4-S-1..4-S-3");
}

#[test]
fn v4_expected_failures_are_refused() {
    let mut n = 0;
    for t in cases()
        .iter()
        .filter(|t| t["expect-fail"].as_bool().unwrap())
    {
        // Public key if the vector has one, else its symmetric key used as one (4-F-2).
        let key = if t["public-key"].is_string() {
            hex(s(t, "public-key"))
        } else {
            hex(s(t, "key"))
        };
        let outcome = Parsed::parse(s(t, "token"))
            .and_then(|p| paseto::verify(&key, &p, s(t, "implicit-assertion").as_bytes()));
        assert!(outcome.is_err(), "{} must fail", s(t, "name"));
        n += 1;
    }
    assert_eq!(n, 5, "4-F-1..4-F-5");
}

#[test]
fn local_tokens_are_not_public_tokens() {
    for t in cases()
        .iter()
        .filter(|t| s(t, "token").starts_with("v4.local."))
    {
        assert!(Parsed::parse(s(t, "token")).is_err(), "{}", s(t, "name"));
    }
}
