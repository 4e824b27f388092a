//! Robustness of the token parser and `check`: arbitrary text, arbitrary bytes inside a
//! well-formed `v4.public` shell, and arbitrary JSON claims correctly signed by a trusted
//! issuer — never a panic, never an `Allow` for junk.

use proptest::prelude::*;
use std::sync::OnceLock;

use super::{world, World, ME, SKEW, T0};
use crate::envelope::b64_encode;
use crate::envelope::tests::props::arb_json;
use crate::token::{check, inspect, paseto, Decision, Request};

fn w() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(world)
}

fn decide(token: &str) -> Decision {
    check(
        token,
        &Request::tool(ME, "echo"),
        T0,
        SKEW,
        &w().trust,
        &|_| false,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_is_denied(s in ".{0,300}") {
        prop_assert!(!decide(&s).is_allow());
        let _ = inspect(&s);
    }

    #[test]
    fn arbitrary_bytes_in_public_shell_are_denied(
        body in prop::collection::vec(any::<u8>(), 0..300),
        footer in prop::collection::vec(any::<u8>(), 0..60),
    ) {
        let t = format!("v4.public.{}.{}", b64_encode(&body), b64_encode(&footer));
        prop_assert!(!decide(&t).is_allow());
        let _ = inspect(&t);
    }

    #[test]
    fn arbitrary_signed_json_claims_are_denied(v in arb_json()) {
        let body = serde_json::to_vec(&v).unwrap();
        let token = paseto::sign(&w().gw, &body, br#"{"kid":"gateway:main"}"#, b"").unwrap();
        prop_assert!(!decide(&token).is_allow());
        let _ = inspect(&token);
    }
}
