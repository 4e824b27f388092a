//! Cross-cutting tests of the envelope module: public vectors, outpost's own known-answer
//! vectors, the tamper matrix and parser robustness.

mod hpke_reference;
pub(crate) mod kat;
pub(crate) mod props;
mod public_vectors;
pub(crate) mod tamper;

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

/// Compare `value` with the checked-in vector file, or rewrite the file when
/// `OUTPOST_REGEN_VECTORS=1` (then review the diff: a changed vector is a wire break).
pub(crate) fn check_or_regen(rel: &str, value: &serde_json::Value) {
    let path = vector_path(rel);
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    if std::env::var("OUTPOST_REGEN_VECTORS").as_deref() == Ok("1") {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let on_disk: serde_json::Value = read_json(rel);
    assert!(
        &on_disk == value,
        "{rel} differs from what the code produces; if the change is intended, run \
         OUTPOST_REGEN_VECTORS=1 cargo test --lib envelope:: token:: and review the diff"
    );
}
