//! A small JSON Schema validator for tool arguments.
//!
//! Supported keywords (draft 2020-12 meaning), enough for tool contracts:
//! `type` (a name or an array of names: `null`, `boolean`, `object`, `array`, `number`,
//! `string`, `integer` — a number with no fractional part), `properties`, `required`,
//! `additionalProperties` (`false` or a schema), `enum`, `const`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum` (numbers), `minLength`, `maxLength` (counted in
//! Unicode scalar values), `items` (one schema for every element), `minItems`,
//! `maxItems`. The boolean schemas `true` and `false` work too.
//!
//! Every other keyword (`$ref`, `anyOf`, `pattern`, `format`, …) is **ignored**, as a
//! JSON Schema validator must do with unknown keywords — a tool author relying on one
//! gets no enforcement from us, so the tool must still check its own input.
//! [`check_schema`] (run by `config check`) rejects supported keywords with wrong types
//! so a typo like `"minimum": "3"` fails at startup, not silently at call time.
//!
//! Errors name the failing location as a JSON Pointer (`/items/2/name`) so a client
//! knows which field to fix; the message never echoes the value itself.

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", if path.is_empty() { "(root)" } else { path.as_str() })]
pub struct SchemaError {
    /// JSON Pointer to the offending value in the instance; empty for the root.
    pub path: String,
    pub message: String,
}

/// Validate `instance` against `schema`; the first violation found is returned.
pub fn validate(schema: &Value, instance: &Value) -> Result<(), SchemaError> {
    let mut path = String::new();
    check(schema, instance, &mut path)
}

fn err(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_string(),
        message: message.into(),
    }
}

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => is_integer(v),
        _ => false,
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64()
                || n.is_u64()
                || n.as_f64()
                    .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Push one JSON Pointer segment (RFC 6901 escaping) for the duration of `f`.
fn with_segment<T>(path: &mut String, seg: &str, f: impl FnOnce(&mut String) -> T) -> T {
    let len = path.len();
    path.push('/');
    path.push_str(&seg.replace('~', "~0").replace('/', "~1"));
    let out = f(path);
    path.truncate(len);
    out
}

fn check(schema: &Value, v: &Value, path: &mut String) -> Result<(), SchemaError> {
    let s = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(err(path, "no value is allowed here")),
        Value::Object(s) => s,
        // Not a schema; check_schema reports it at config time.
        _ => return Ok(()),
    };
    check_type(s, v, path)?;
    if let Some(Value::Array(options)) = s.get("enum") {
        if !options.iter().any(|o| o == v) {
            return Err(err(path, "value is not one of the allowed values"));
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            return Err(err(path, "value is not the required constant"));
        }
    }
    match v {
        Value::Number(n) => check_number(s, n.as_f64().unwrap_or(f64::NAN), path)?,
        Value::String(text) => check_string(s, text, path)?,
        Value::Array(items) => check_array(s, items, path)?,
        Value::Object(obj) => check_object(s, obj, path)?,
        _ => {}
    }
    Ok(())
}

fn check_type(s: &Map<String, Value>, v: &Value, path: &str) -> Result<(), SchemaError> {
    let ok = match s.get("type") {
        None => true,
        Some(Value::String(t)) => type_matches(t, v),
        Some(Value::Array(ts)) => ts
            .iter()
            .any(|t| t.as_str().is_some_and(|t| type_matches(t, v))),
        Some(_) => true,
    };
    if ok {
        Ok(())
    } else {
        let want = match s.get("type") {
            Some(Value::String(t)) => t.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        Err(err(path, format!("expected {want}, got {}", type_name(v))))
    }
}

fn check_number(s: &Map<String, Value>, n: f64, path: &str) -> Result<(), SchemaError> {
    let bound = |k: &str| s.get(k).and_then(Value::as_f64);
    if let Some(min) = bound("minimum") {
        if n < min {
            return Err(err(path, format!("must be >= {min}")));
        }
    }
    if let Some(max) = bound("maximum") {
        if n > max {
            return Err(err(path, format!("must be <= {max}")));
        }
    }
    if let Some(min) = bound("exclusiveMinimum") {
        if n <= min {
            return Err(err(path, format!("must be > {min}")));
        }
    }
    if let Some(max) = bound("exclusiveMaximum") {
        if n >= max {
            return Err(err(path, format!("must be < {max}")));
        }
    }
    Ok(())
}

fn check_string(s: &Map<String, Value>, text: &str, path: &str) -> Result<(), SchemaError> {
    let len = text.chars().count() as u64;
    if let Some(min) = s.get("minLength").and_then(Value::as_u64) {
        if len < min {
            return Err(err(path, format!("must be at least {min} characters")));
        }
    }
    if let Some(max) = s.get("maxLength").and_then(Value::as_u64) {
        if len > max {
            return Err(err(path, format!("must be at most {max} characters")));
        }
    }
    Ok(())
}

fn check_array(
    s: &Map<String, Value>,
    items: &[Value],
    path: &mut String,
) -> Result<(), SchemaError> {
    let n = items.len() as u64;
    if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
        if n < min {
            return Err(err(path, format!("must have at least {min} items")));
        }
    }
    if let Some(max) = s.get("maxItems").and_then(Value::as_u64) {
        if n > max {
            return Err(err(path, format!("must have at most {max} items")));
        }
    }
    if let Some(item_schema) = s.get("items") {
        for (i, item) in items.iter().enumerate() {
            with_segment(path, &i.to_string(), |p| check(item_schema, item, p))?;
        }
    }
    Ok(())
}

fn check_object(
    s: &Map<String, Value>,
    obj: &Map<String, Value>,
    path: &mut String,
) -> Result<(), SchemaError> {
    if let Some(Value::Array(required)) = s.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(name) {
                return with_segment(path, name, |p| Err(err(p, "is required")));
            }
        }
    }
    let props = s.get("properties").and_then(Value::as_object);
    let additional = s.get("additionalProperties");
    for (name, value) in obj {
        match props.and_then(|p| p.get(name)) {
            Some(prop_schema) => with_segment(path, name, |p| check(prop_schema, value, p))?,
            None => match additional {
                Some(Value::Bool(false)) => {
                    return with_segment(path, name, |p| Err(err(p, "is not an allowed property")));
                }
                Some(extra) => with_segment(path, name, |p| check(extra, value, p))?,
                None => {}
            },
        }
    }
    Ok(())
}

/// Check that a schema uses the supported keywords with the right types.
///
/// Unknown keywords pass (see the module docs); this only catches mistakes in the
/// keywords we enforce.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    let mut path = String::new();
    check_schema_at(schema, &mut path)
}

fn check_schema_at(schema: &Value, path: &mut String) -> Result<(), String> {
    let s = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(s) => s,
        _ => {
            return Err(format!(
                "{}: a schema must be an object or a boolean",
                show(path)
            ))
        }
    };
    let bad = |k: &str, want: &str| format!("{}/{k}: must be {want}", show(path));
    for (k, v) in s {
        let ok = match k.as_str() {
            "type" => match v {
                Value::String(t) => is_type_name(t),
                Value::Array(ts) => ts.iter().all(|t| t.as_str().is_some_and(is_type_name)),
                _ => false,
            },
            "properties" => v.is_object(),
            "required" => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "additionalProperties" | "items" => v.is_object() || v.is_boolean(),
            "enum" => v.is_array(),
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => v.is_number(),
            "minLength" | "maxLength" | "minItems" | "maxItems" => v.is_u64(),
            _ => true,
        };
        if !ok {
            let want = match k.as_str() {
                "type" => "a type name or an array of type names",
                "properties" => "an object of schemas",
                "required" => "an array of strings",
                "enum" => "an array",
                "minLength" | "maxLength" | "minItems" | "maxItems" => "a non-negative integer",
                "additionalProperties" | "items" => "a schema",
                _ => "a number",
            };
            return Err(bad(k, want));
        }
    }
    if let Some(Value::Object(props)) = s.get("properties") {
        for (name, sub) in props {
            let len = path.len();
            path.push_str("/properties/");
            path.push_str(name);
            let r = check_schema_at(sub, path);
            path.truncate(len);
            r?;
        }
    }
    for k in ["additionalProperties", "items"] {
        if let Some(sub) = s.get(k) {
            let len = path.len();
            path.push('/');
            path.push_str(k);
            let r = check_schema_at(sub, path);
            path.truncate(len);
            r?;
        }
    }
    Ok(())
}

fn show(path: &str) -> &str {
    if path.is_empty() {
        "schema"
    } else {
        path
    }
}

fn is_type_name(t: &str) -> bool {
    matches!(
        t,
        "null" | "boolean" | "object" | "array" | "number" | "string" | "integer"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["sensor", "samples"],
            "additionalProperties": false,
            "properties": {
                "sensor": {"type": "string", "minLength": 1, "maxLength": 8},
                "samples": {"type": "integer", "minimum": 1, "maximum": 100},
                "mode": {"enum": ["fast", "slow"]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
                "scale": {"type": ["number", "null"], "exclusiveMinimum": 0}
            }
        })
    }

    fn fails_at(instance: Value) -> String {
        validate(&schema(), &instance).unwrap_err().path
    }

    #[test]
    fn accepts_valid_instances() {
        let s = schema();
        validate(&s, &json!({"sensor": "t1", "samples": 3})).unwrap();
        validate(
            &s,
            &json!({"sensor": "t1", "samples": 3.0, "mode": "fast", "tags": ["a"], "scale": null}),
        )
        .unwrap();
        validate(&s, &json!({"sensor": "ü", "samples": 100, "scale": 0.5})).unwrap();
    }

    #[test]
    fn names_the_failing_field() {
        assert_eq!(fails_at(json!({"samples": 1})), "/sensor");
        assert_eq!(fails_at(json!({"sensor": "x", "samples": 1.5})), "/samples");
        assert_eq!(fails_at(json!({"sensor": "x", "samples": 0})), "/samples");
        assert_eq!(fails_at(json!({"sensor": "x", "samples": 101})), "/samples");
        assert_eq!(fails_at(json!({"sensor": "", "samples": 1})), "/sensor");
        assert_eq!(
            fails_at(json!({"sensor": "123456789", "samples": 1})),
            "/sensor"
        );
        assert_eq!(
            fails_at(json!({"sensor": "x", "samples": 1, "mode": "x"})),
            "/mode"
        );
        assert_eq!(
            fails_at(json!({"sensor": "x", "samples": 1, "tags": []})),
            "/tags"
        );
        assert_eq!(
            fails_at(json!({"sensor": "x", "samples": 1, "tags": ["a", "b", "c"]})),
            "/tags"
        );
        assert_eq!(
            fails_at(json!({"sensor": "x", "samples": 1, "tags": ["a", 2]})),
            "/tags/1"
        );
        assert_eq!(
            fails_at(json!({"sensor": "x", "samples": 1, "scale": 0})),
            "/scale"
        );
        assert_eq!(
            fails_at(json!({"sensor": "x", "samples": 1, "a/b": 0})),
            "/a~1b"
        );
        assert_eq!(fails_at(json!([1])), "");
        let e = validate(&schema(), &json!({"sensor": 5, "samples": 1})).unwrap_err();
        assert_eq!(e.to_string(), "/sensor: expected string, got number");
    }

    #[test]
    fn unknown_keywords_are_ignored_and_booleans_work() {
        validate(&json!({"pattern": "^a$", "format": "email"}), &json!("zzz")).unwrap();
        validate(&json!(true), &json!({"x": 1})).unwrap();
        assert!(validate(&json!(false), &json!(1)).is_err());
        validate(&json!({"type": "object"}), &json!({"anything": [1, 2]})).unwrap();
        assert!(validate(
            &json!({"additionalProperties": {"type": "integer"}}),
            &json!({"a": "x"})
        )
        .is_err());
    }

    #[test]
    fn check_schema_catches_wrongly_typed_keywords() {
        check_schema(&schema()).unwrap();
        check_schema(&json!({"type": "object", "x-custom": 1})).unwrap();
        assert!(check_schema(&json!({"minimum": "3"})).is_err());
        assert!(check_schema(&json!({"type": "float"})).is_err());
        assert!(check_schema(&json!({"properties": {"a": {"maxLength": -1}}})).is_err());
        assert!(check_schema(&json!({"required": "a"})).is_err());
        assert!(check_schema(&json!(3)).is_err());
    }
}
