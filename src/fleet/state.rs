//! Desired and reported state (PROTOCOL §16.4): JSON documents with versions that only
//! grow, changed by whole documents or RFC 7396 merge patches, and the `delta` between
//! them. Pure: both roles apply patches and compare versions here; storage and transport
//! are the callers'.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A desired or reported document's size limit (its JSON text).
pub const MAX_STATE_BYTES: usize = 64 * 1024;

/// Why a state write is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("a state document is a JSON object")]
    NotAnObject,
    #[error("the document would be {0} bytes, over the 65,536-byte limit")]
    TooLarge(usize),
    #[error("the document is at version {current}, not {expected} (If-Match)")]
    VersionConflict { current: u64, expected: u64 },
}

/// A document and its version (0: never set; the first write makes it 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Versioned {
    pub doc: Value,
    pub version: u64,
}

impl Default for Versioned {
    fn default() -> Self {
        Self {
            doc: Value::Object(Map::new()),
            version: 0,
        }
    }
}

/// How a write changes a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Replace it (PUT).
    Replace(Value),
    /// Apply an RFC 7396 merge patch (PATCH).
    Merge(Value),
}

impl Versioned {
    /// The document after `write`, one version on, if `if_match` (when given) names the
    /// current version. A write that changes nothing still makes a new version (the
    /// writer asked for one; a node told of it reports against it).
    pub fn write(&self, write: &Write, if_match: Option<u64>) -> Result<Versioned, StateError> {
        if let Some(expected) = if_match {
            if expected != self.version {
                return Err(StateError::VersionConflict {
                    current: self.version,
                    expected,
                });
            }
        }
        let doc = match write {
            // A null member means absent, in a whole document as in a patch (the
            // document never holds one, so the delta never asks for one).
            Write::Replace(v) => {
                let mut d = Value::Object(Map::new());
                merge_patch(&mut d, v);
                d
            }
            Write::Merge(p) => {
                let mut d = self.doc.clone();
                merge_patch(&mut d, p);
                d
            }
        };
        if !doc.is_object() {
            return Err(StateError::NotAnObject);
        }
        let len = serde_json::to_vec(&doc)
            .map(|b| b.len())
            .unwrap_or(usize::MAX);
        if len > MAX_STATE_BYTES {
            return Err(StateError::TooLarge(len));
        }
        Ok(Versioned {
            doc,
            version: self.version + 1,
        })
    }

    /// Take `other` if it is newer (a coalesced delivery: an older version never
    /// replaces a newer one).
    pub fn newer(self, other: Versioned) -> Versioned {
        if other.version > self.version {
            other
        } else {
            self
        }
    }
}

/// RFC 7396: apply `patch` to `target`.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// The desired members whose values differ from reported, recursively (objects are
/// compared member by member; any other value, arrays included, as a whole): what a
/// node still has to do. `None` when in sync.
pub fn delta(desired: &Value, reported: &Value) -> Option<Value> {
    match (desired, reported) {
        (Value::Object(d), Value::Object(r)) => {
            let mut out = Map::new();
            for (k, dv) in d {
                match r.get(k) {
                    Some(rv) => {
                        if let Some(x) = delta(dv, rv) {
                            out.insert(k.clone(), x);
                        }
                    }
                    None => {
                        out.insert(k.clone(), dv.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (d, r) if d == r => None,
        (d, _) => Some(d.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn rfc7396_examples() {
        // The test cases of RFC 7396, appendix A.
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (mut t, p, want) in cases {
            merge_patch(&mut t, &p);
            assert_eq!(t, want, "patch {p}");
        }
    }

    #[test]
    fn delta_is_what_desired_has_that_reported_lacks() {
        let d = json!({"fan": {"speed": 3, "mode": "auto"}, "led": "on", "list": [1, 2]});
        let r = json!({"fan": {"speed": 2, "mode": "auto"}, "led": "on", "list": [1], "extra": 1});
        assert_eq!(
            delta(&d, &r),
            Some(json!({"fan": {"speed": 3}, "list": [1, 2]}))
        );
        let r2 =
            json!({"fan": {"speed": 3, "mode": "auto", "rpm": 900}, "led": "on", "list": [1, 2]});
        assert_eq!(delta(&d, &r2), None, "in sync: reported may hold more");
        assert_eq!(delta(&json!({}), &json!({"a": 1})), None);
        assert_eq!(delta(&json!({"a": {}}), &json!({})), Some(json!({"a": {}})));
    }

    #[test]
    fn versions_grow_and_if_match_guards_a_stale_write() {
        let v0 = Versioned::default();
        let v1 = v0.write(&Write::Replace(json!({"a": 1})), None).unwrap();
        assert_eq!(v1.version, 1);
        let v2 = v1.write(&Write::Merge(json!({"b": 2})), Some(1)).unwrap();
        assert_eq!((v2.version, &v2.doc), (2, &json!({"a": 1, "b": 2})));
        assert_eq!(
            v2.write(&Write::Merge(json!({"c": 3})), Some(1)),
            Err(StateError::VersionConflict {
                current: 2,
                expected: 1
            })
        );
        assert_eq!(
            v2.write(&Write::Replace(json!([1])), None),
            Err(StateError::NotAnObject)
        );
        let big = json!({ "x": "y".repeat(MAX_STATE_BYTES) });
        assert!(matches!(
            v2.write(&Write::Replace(big), None),
            Err(StateError::TooLarge(_))
        ));
        assert_eq!(v2.clone().newer(v1.clone()), v2);
        assert_eq!(v1.newer(v2.clone()), v2);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..5).prop_map(|n| json!(n)),
            "[ab]".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map("[abc]", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A document with no nulls (what a merge patch leaves in an object).
    fn no_nulls(v: &Value) -> bool {
        match v {
            Value::Null => false,
            Value::Object(m) => m.values().all(no_nulls),
            Value::Array(_) => true,
            _ => true,
        }
    }

    proptest! {
        /// Once reported takes what desired asks (reported merge-patched with desired),
        /// there is no delta; and delta is None exactly when desired ⊆ reported.
        #[test]
        fn reporting_the_desired_state_leaves_no_delta(d in json_value(), r in json_value()) {
            prop_assume!(d.is_object() && no_nulls(&d));
            let mut r = r;
            merge_patch(&mut r, &d);
            prop_assert_eq!(delta(&d, &r), None);
        }

        /// Applying a patch twice is the same as once (merge patches are idempotent).
        #[test]
        fn merge_patch_is_idempotent(t in json_value(), p in json_value()) {
            let mut once = t.clone();
            merge_patch(&mut once, &p);
            let mut twice = once.clone();
            merge_patch(&mut twice, &p);
            prop_assert_eq!(once, twice);
        }
    }
}
