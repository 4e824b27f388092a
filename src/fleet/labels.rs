//! Labels: key=value pairs an operator (or the enrollment token) sets on a node, held
//! by the gateway and used to select nodes (PROTOCOL §16.1).
//!
//! A key is 1 to 63 characters of lowercase letters, digits, `.`, `_`, `-` and `/`; a
//! value at most 63 printable ASCII characters (no control characters); a node has at
//! most 32 labels. Pure: parsing, checking and applying a change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Labels a node may carry.
pub const MAX_LABELS: usize = 32;
/// Characters in a key, and at most in a value.
pub const MAX_KEY: usize = 63;
pub const MAX_VALUE: usize = 63;

/// Why a label or a change of labels is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label key {0:?}: 1 to 63 of a-z, 0-9, '.', '_', '-', '/'")]
    Key(String),
    #[error("label {key:?}: its value must be at most 63 printable ASCII characters")]
    Value { key: String },
    #[error("a node has at most {MAX_LABELS} labels ({0} after this change)")]
    TooMany(usize),
    #[error("{0:?} is not key=value or key- (to remove key)")]
    Syntax(String),
    #[error("label {0:?} is both set and removed")]
    Both(String),
}

pub fn is_key_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-' | b'/')
}

/// Check a label key.
pub fn check_key(k: &str) -> Result<(), LabelError> {
    if (1..=MAX_KEY).contains(&k.len()) && k.bytes().all(is_key_char) {
        Ok(())
    } else {
        Err(LabelError::Key(k.to_string()))
    }
}

/// Check a label value.
pub fn check_value(key: &str, v: &str) -> Result<(), LabelError> {
    if v.len() <= MAX_VALUE && v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        Ok(())
    } else {
        Err(LabelError::Value {
            key: key.to_string(),
        })
    }
}

/// A node's labels, in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct Labels(BTreeMap<String, String>);

impl Labels {
    /// Checked labels from pairs (the last of a repeated key wins).
    pub fn from_pairs<I, K, V>(pairs: I) -> Result<Self, LabelError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut m = BTreeMap::new();
        for (k, v) in pairs {
            let (k, v) = (k.into(), v.into());
            check_key(&k)?;
            check_value(&k, &v)?;
            m.insert(k, v);
        }
        if m.len() > MAX_LABELS {
            return Err(LabelError::TooMany(m.len()));
        }
        Ok(Self(m))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// These labels with `change` applied, checked as a whole (nothing is applied when
    /// any part is refused).
    pub fn apply(&self, change: &LabelChange) -> Result<Labels, LabelError> {
        for k in &change.remove {
            check_key(k)?;
            if change.set.contains_key(k) {
                return Err(LabelError::Both(k.clone()));
            }
        }
        let mut m = self.0.clone();
        for k in &change.remove {
            m.remove(k);
        }
        for (k, v) in &change.set {
            check_key(k)?;
            check_value(k, v)?;
            m.insert(k.clone(), v.clone());
        }
        if m.len() > MAX_LABELS {
            return Err(LabelError::TooMany(m.len()));
        }
        Ok(Labels(m))
    }
}

/// `PATCH /v1/nodes/{node_id}/labels`: labels to set and keys to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct LabelChange {
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

impl LabelChange {
    /// The command line's words: `key=value` sets, `key-` removes.
    pub fn parse_args<S: AsRef<str>>(args: &[S]) -> Result<Self, LabelError> {
        let mut c = LabelChange::default();
        for a in args {
            let a = a.as_ref();
            if let Some((k, v)) = a.split_once('=') {
                check_key(k)?;
                check_value(k, v)?;
                c.set.insert(k.to_string(), v.to_string());
            } else if let Some(k) = a.strip_suffix('-') {
                check_key(k)?;
                c.remove.push(k.to_string());
            } else {
                return Err(LabelError::Syntax(a.to_string()));
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_and_values_are_checked() {
        for k in ["site", "a.b/c_d-e", "0", &"k".repeat(63)] {
            assert!(check_key(k).is_ok(), "{k}");
        }
        for k in ["", "Site", "a b", "a=b", &"k".repeat(64), "é"] {
            assert!(check_key(k).is_err(), "{k}");
        }
        assert!(check_value("k", "North 2 (b)").is_ok());
        assert!(check_value("k", "").is_ok());
        assert!(check_value("k", &"v".repeat(64)).is_err());
        assert!(check_value("k", "a\nb").is_err());
        assert!(check_value("k", "é").is_err());
    }

    #[test]
    fn a_change_applies_whole_or_not_at_all() {
        let l = Labels::from_pairs([("site", "north"), ("role", "pump")]).unwrap();
        let c = LabelChange::parse_args(&["site=south", "role-", "tier=1"]).unwrap();
        let n = l.apply(&c).unwrap();
        assert_eq!(
            n.iter().collect::<Vec<_>>(),
            [("site", "south"), ("tier", "1")]
        );
        let bad = LabelChange::parse_args(&["a=1", "Bad=2"]);
        assert_eq!(bad, Err(LabelError::Key("Bad".into())));
        let both = LabelChange {
            set: [("a".to_string(), "1".to_string())].into(),
            remove: vec!["a".into()],
        };
        assert_eq!(l.apply(&both), Err(LabelError::Both("a".into())));
        assert_eq!(
            LabelChange::parse_args(&["nonsense"]),
            Err(LabelError::Syntax("nonsense".into()))
        );
    }

    #[test]
    fn at_most_32_labels() {
        let many: Vec<(String, String)> = (0..32).map(|i| (format!("k{i}"), "v".into())).collect();
        let l = Labels::from_pairs(many).unwrap();
        let c = LabelChange::parse_args(&["one=more"]).unwrap();
        assert_eq!(l.apply(&c), Err(LabelError::TooMany(33)));
        let c = LabelChange::parse_args(&["k0-", "one=more"]).unwrap();
        assert_eq!(l.apply(&c).unwrap().len(), 32);
    }

    proptest! {
        /// Whatever is applied, the result is valid labels or nothing changed.
        #[test]
        fn applied_labels_are_always_valid(
            set in proptest::collection::btree_map("[a-z./_-]{0,4}", "[ -~]{0,5}", 0..6),
            remove in proptest::collection::vec("[a-zA-Z]{0,3}", 0..4),
        ) {
            let l = Labels::from_pairs([("site", "north")]).unwrap();
            let c = LabelChange { set, remove };
            if let Ok(n) = l.apply(&c) {
                prop_assert!(n.len() <= MAX_LABELS);
                for (k, v) in n.iter() {
                    prop_assert!(check_key(k).is_ok() && check_value(k, v).is_ok());
                }
            }
        }
    }
}
