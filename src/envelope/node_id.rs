//! Node id syntax (PROTOCOL §2): `^[a-z][a-z0-9-]{0,31}:[A-Za-z0-9._-]{1,64}$`.
//!
//! Checked by hand (no regex engine) because it runs on every envelope and request and the
//! grammar is tiny; the proptest below cross-checks it against the `regex` crate.

/// Why a node id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid node id {0:?}: expected kind:name, kind = [a-z][a-z0-9-]{{0,31}}, name = [A-Za-z0-9._-]{{1,64}}")]
pub struct InvalidNodeId(pub String);

/// Accept `kind:name` exactly as the PROTOCOL §2 pattern says.
pub fn validate_node_id(id: &str) -> Result<(), InvalidNodeId> {
    if is_valid_node_id(id) {
        Ok(())
    } else {
        // Truncate what we echo back: the id may be attacker-supplied and huge.
        Err(InvalidNodeId(id.chars().take(100).collect()))
    }
}

/// Boolean form of [`validate_node_id`].
pub fn is_valid_node_id(id: &str) -> bool {
    let Some((kind, name)) = id.split_once(':') else {
        return false;
    };
    let kb = kind.as_bytes();
    let kind_ok = !kb.is_empty()
        && kb.len() <= 32
        && kb[0].is_ascii_lowercase()
        && kb[1..]
            .iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    let nb = name.as_bytes();
    let name_ok = !nb.is_empty()
        && nb.len() <= 64
        && nb
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    kind_ok && name_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        for ok in ["node:pump-17", "gateway:main", "a:b", "x-1:A.b_c-9"] {
            assert!(validate_node_id(ok).is_ok(), "{ok}");
        }
        let long_kind = format!("{}:x", "a".repeat(33));
        let long_name = format!("node:{}", "n".repeat(65));
        for bad in [
            "",
            "node",
            ":x",
            "node:",
            "Node:x",
            "1node:x",
            "node:a:b",
            "node:a b",
            "node:é",
            long_kind.as_str(),
            long_name.as_str(),
        ] {
            assert!(validate_node_id(bad).is_err(), "{bad}");
        }
        assert!(is_valid_node_id(&format!("{}:x", "a".repeat(32))));
        assert!(is_valid_node_id(&format!("n:{}", "n".repeat(64))));
    }

    proptest! {
        #[test]
        fn agrees_with_spec_regex(s in "[a-zA-Z0-9:._ -]{0,40}|[a-z][a-z0-9-]{0,33}:[A-Za-z0-9._-]{0,66}") {
            let re = regex::Regex::new(r"^[a-z][a-z0-9-]{0,31}:[A-Za-z0-9._-]{1,64}$").unwrap();
            prop_assert_eq!(is_valid_node_id(&s), re.is_match(&s));
        }
    }
}
