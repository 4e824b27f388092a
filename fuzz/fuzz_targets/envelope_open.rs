//! Arbitrary bytes into the envelope parser and the full receive pipeline.
//!
//! The fixed world (trusted gateway, our node keys) lets inputs that get past parsing
//! reach the trust, signature and replay stages; a genuine seed envelope is in
//! docs/FUZZING.md's corpus recipe.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use outpost::envelope::{open, Envelope, IdentityDocument, Keys, OpenContext, Rights, TrustStore};

struct World {
    node: Keys,
    trust: TrustStore,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let gw = Keys::from_secret_bytes(&[0x11; 32], &[0x12; 32]);
        let node = Keys::from_secret_bytes(&[0x41; 32], &[0x42; 32]);
        let mut trust = TrustStore::new();
        let doc = IdentityDocument::new("gateway:main", "gateway", &gw, "2025-11-22T08:00:00Z");
        if trust.add(doc, Rights { send: true, issue: true }).is_err() {
            std::process::abort();
        }
        World { node, trust }
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = Envelope::from_json(data);
    let w = world();
    let ctx = OpenContext {
        me: "node:pump-17",
        keys: &w.node,
        previous_keys: None,
        trust: &w.trust,
        now_ms: 1_763_798_400_000,
        skew_ms: 300_000,
        max_bytes: 1 << 20,
        max_ttl_ms: 7 * 86_400_000,
        pruned_ahead: None,
    };
    if let Err(e) = open(data, &ctx, &|_, _| false) {
        // Every refusal has a stable code.
        assert!(!e.code().is_empty());
    }
});
