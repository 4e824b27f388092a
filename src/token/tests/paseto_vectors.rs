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

/// `token::paseto` is outpost's own v4.public on ed25519-dalek; `pasetors` (the crate it
/// replaced, now a dev-dependency) must agree with it on every token: the same text when
/// signing (Ed25519 is deterministic), each verifying the other's, the same refusals.
mod against_pasetors {
    use pasetors::keys::{AsymmetricPublicKey, AsymmetricSecretKey};
    use pasetors::token::UntrustedToken;
    use pasetors::version4::{PublicToken, V4};
    use pasetors::Public;
    use proptest::prelude::*;

    use crate::token::paseto::{self, Parsed};

    fn opt(b: &[u8]) -> Option<&[u8]> {
        (!b.is_empty()).then_some(b)
    }

    fn theirs_verify(pk: &[u8], token: &str, implicit: &[u8]) -> Option<Vec<u8>> {
        let pk = AsymmetricPublicKey::<V4>::from(pk).ok()?;
        let t = UntrustedToken::<Public, V4>::try_from(token).ok()?;
        let ok = PublicToken::verify(&pk, &t, None, opt(implicit)).ok()?;
        Some(ok.payload().as_bytes().to_vec())
    }

    fn ours_verify(pk: &[u8], token: &str, implicit: &[u8]) -> Option<Vec<u8>> {
        let t = Parsed::parse(token).ok()?;
        paseto::verify(pk, &t, implicit).ok()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn same_tokens_same_verdicts(
            seed in any::<[u8; 32]>(),
            message in "\\PC{1,80}",
            footer in proptest::collection::vec(any::<u8>(), 0..40),
            implicit in proptest::collection::vec(any::<u8>(), 0..40),
            flip in any::<prop::sample::Index>(),
        ) {
            let sk = ed25519_dalek::SigningKey::from_bytes(&seed);
            let kp = sk.to_keypair_bytes();
            let pk = sk.verifying_key().to_bytes();
            let ours = paseto::sign_with_keypair(&kp, message.as_bytes(), &footer, &implicit).unwrap();
            let theirs_sk = AsymmetricSecretKey::<V4>::from(&kp[..]).unwrap();
            let theirs = PublicToken::sign(&theirs_sk, message.as_bytes(), opt(&footer), opt(&implicit)).unwrap();
            prop_assert_eq!(&ours, &theirs);
            prop_assert_eq!(ours_verify(&pk, &ours, &implicit), Some(message.as_bytes().to_vec()));
            prop_assert_eq!(theirs_verify(&pk, &ours, &implicit), Some(message.as_bytes().to_vec()));
            // One character changed anywhere (header, body, separator, footer): both
            // refuse or both accept (a change that decodes to the same bytes).
            let mut bytes = ours.into_bytes();
            let i = flip.index(bytes.len());
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let tampered = String::from_utf8(bytes).unwrap();
            prop_assert_eq!(ours_verify(&pk, &tampered, &implicit), theirs_verify(&pk, &tampered, &implicit));
            // Another implicit assertion: both refuse.
            prop_assert_eq!(ours_verify(&pk, &tampered, b"x"), None);
            prop_assert_eq!(theirs_verify(&pk, &tampered, b"x"), None);
        }
    }

    /// Shapes a token can have: both parsers accept or refuse each the same way.
    #[test]
    fn same_refusals_for_odd_shapes() {
        let sk = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let pk = sk.verifying_key().to_bytes();
        let good = paseto::sign_with_keypair(&sk.to_keypair_bytes(), b"{}", b"f", b"").unwrap();
        let body = good.split('.').nth(2).unwrap().to_string();
        let short = crate::envelope::b64_encode(&[0u8; 64]);
        for t in [
            good.clone(),
            format!("{good}."),
            format!("{good}.Zg.Zg"),
            format!("v4.public.{body}"),
            format!("v4.public.{body}."),
            format!("v4.public.{body}=="),
            format!("v4.public.{short}"),
            "v4.public.".to_string(),
            "v4.public..Zg".to_string(),
            format!("V4.public.{body}.Zg"),
            format!("v4.local.{body}.Zg"),
            format!("v4.public.{}.Zg", body.replace('-', "+")),
        ] {
            assert_eq!(
                ours_verify(&pk, &t, b""),
                theirs_verify(&pk, &t, b""),
                "{t}"
            );
            assert_eq!(
                Parsed::parse(&t).is_ok(),
                UntrustedToken::<Public, V4>::try_from(t.as_str()).is_ok(),
                "{t}"
            );
        }
    }
}
