//! Arbitrary bytes into the token parser (`inspect`) and the full `check` decision.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use outpost::envelope::{IdentityDocument, Keys, Rights, TrustStore};
use outpost::token::{check, inspect, Decision, Request};

fn trust() -> &'static TrustStore {
    static T: OnceLock<TrustStore> = OnceLock::new();
    T.get_or_init(|| {
        let gw = Keys::from_secret_bytes(&[0x11; 32], &[0x12; 32]);
        let mut trust = TrustStore::new();
        let doc = IdentityDocument::new("gateway:main", "gateway", &gw, "2025-11-22T08:00:00Z");
        if trust.add(doc, Rights { send: true, issue: true }).is_err() {
            std::process::abort();
        }
        trust
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    let _ = inspect(token);
    let d = check(token, &Request::tool("node:pump-17", "echo"), 1_763_798_400_000, 300_000, trust(), &|_| false);
    // Only a genuine gateway signature can allow (e.g. the known-answer token used as a
    // seed), and then the claims must name that issuer.
    if let Decision::Allow { claims } = d {
        assert_eq!(claims.iss, "gateway:main");
    }
});
