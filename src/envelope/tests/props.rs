//! Robustness: arbitrary bytes and arbitrary JSON never panic the envelope parser or the
//! open pipeline, always yield a typed error, and random corruption of a genuine envelope
//! is never accepted.

use proptest::prelude::*;

use std::sync::OnceLock;

use super::tamper::{ctx, sealed, world, World, T0};
use crate::envelope::{open, Envelope};

/// Arbitrary JSON values, biased toward envelope-shaped objects.
pub(crate) fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        ".{0,40}".prop_map(serde_json::Value::from),
        "[A-Za-z0-9_-]{0,90}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 48, 12, |inner| {
        let keys = prop_oneof![
            Just("v".to_string()),
            Just("suite".to_string()),
            Just("message_id".to_string()),
            Just("sender_node_id".to_string()),
            Just("recipient_node_id".to_string()),
            Just("created_at_ms".to_string()),
            Just("expires_at_ms".to_string()),
            Just("payload_type".to_string()),
            Just("priority".to_string()),
            Just("enc".to_string()),
            Just("ciphertext".to_string()),
            Just("signature".to_string()),
            "[a-z_]{1,10}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(keys, inner, 0..14)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Built once: key setup and sealing dominate a debug-build case otherwise.
fn fixture() -> &'static (World, Vec<u8>) {
    static F: OnceLock<(World, Vec<u8>)> = OnceLock::new();
    F.get_or_init(|| {
        let w = world();
        let bytes = sealed(&w).to_json();
        // The uncorrupted envelope opens, so refusals below are due to the corruption.
        assert!(open(&bytes, &ctx(&w, T0), &|_, _| false).is_ok());
        (w, bytes)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let (w, _) = fixture();
        let r = open(&bytes, &ctx(w, T0), &|_, _| false);
        prop_assert!(r.is_err());
        let _ = Envelope::from_json(&bytes);
    }

    #[test]
    fn arbitrary_json_never_panics(v in arb_json()) {
        let (w, _) = fixture();
        let bytes = serde_json::to_vec(&v).unwrap();
        let err = open(&bytes, &ctx(w, T0), &|_, _| false).unwrap_err();
        prop_assert!(!err.code().is_empty());
        prop_assert!(!err.to_string().is_empty());
    }

    #[test]
    fn corrupted_genuine_envelope_is_refused(pos in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let (w, genuine) = fixture();
        let mut bytes = genuine.clone();
        let i = pos.index(bytes.len());
        bytes[i] ^= xor;
        prop_assert!(open(&bytes, &ctx(w, T0), &|_, _| false).is_err());
    }
}
