//! Cross-cutting tests of the envelope module: public vectors, outpost's own known-answer
//! vectors, the tamper matrix and parser robustness.

mod kat;
mod props;
mod public_vectors;
mod tamper;

use std::path::PathBuf;

/// `tests/vectors/<rel>` in the repository.
pub(crate) fn vector_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(rel)
}

pub(crate) fn read_json(rel: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(vector_path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_json::from_str(&text).unwrap()
}

pub(crate) fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub(crate) fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
