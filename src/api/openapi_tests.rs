//! `docs/openapi/{node,gateway}.json` checked against the Rust types that parse each
//! request body and write each JSON answer, not against source text: one table names,
//! for every documented JSON body (request bodies and 2xx answers), the type behind it,
//! and the schema the document gives is compared with the one `schemars` derives from
//! that type, as serde reads (requests) or writes (answers) it.
//!
//! What must agree, recursing into nested objects and arrays where both sides describe
//! them: the property names, the `required` set, each property's JSON type (`const` and
//! `enum` count as their values' types, `anyOf`/`oneOf` as the union of their branches),
//! the values where both sides list them, and for request bodies whether unknown
//! properties are refused. A `serde_json::Value` (and a document's `{}`) is any JSON:
//! nothing to compare. `null` on an optional property: an answer leaves the property out
//! instead, so it does not count; a request whose document allows `null` must have a type
//! that takes it (a document may leave out a `null` its type would also take).

use std::collections::{BTreeMap, BTreeSet};

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::Value;

use self::Body::{Skip, Type};
use crate::api::health::Health;
use crate::api::node::wire as node;
use crate::envelope::Envelope;
use crate::telemetry::status::Status;

/// Whether serde reads the body (a request) or writes it (an answer): an `Option` may be
/// missing from a request; an answer writes it unless told to skip it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Request,
    Answer,
}

/// What one documented body is checked against.
enum Body {
    /// The schema of the type that parses (request) or writes (answer) it.
    Type(fn(Dir) -> Value),
    /// Left out of the check, and why.
    Skip(&'static str),
}

/// `("METHOD /path what", body)`, `what` being `request` or the answer's status.
type Case = (&'static str, Body);

const REQUEST: &str = "request";

/// A table of cases, one `"METHOD /path what" => body` a line.
macro_rules! table {
    ($($key:literal => $body:expr),* $(,)?) => {
        &[$(($key, $body)),*]
    };
}

fn of<T: JsonSchema>(dir: Dir) -> Value {
    let settings = SchemaSettings::draft2020_12();
    let settings = match dir {
        Dir::Request => settings.for_deserialize(),
        Dir::Answer => settings.for_serialize(),
    };
    settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

const DOCUMENT: &str = "the OpenAPI document itself";

// Only JSON bodies have entries: `GET /metrics` is text, the gateway's `GET /v1/events`
// an event stream, and the console under `/ui` is not in the documents.
const NODE: &[Case] = table! {
    "GET /healthz 200" => Type(of::<Health>),
    "GET /readyz 200" => Type(of::<Health>),
    "GET /v1/status 200" => Type(of::<Status>),
    "GET /openapi.json 200" => Skip(DOCUMENT),
    "GET /v1/tools 200" => Type(of::<node::ToolList>),
    "POST /v1/tool_call request" => Type(of::<node::ToolCallBody>),
    "POST /v1/tool_call 200" => Type(of::<node::ToolCallAnswer>),
    "POST /v1/envelopes request" => Type(of::<Envelope>),
    "POST /v1/envelopes 200" => Type(of::<node::EnvelopeDuplicate>),
    "POST /v1/envelopes 202" => Type(of::<node::EnvelopeAccepted>),
    "GET /v1/inbox 200" => Type(of::<node::InboxList>),
    "POST /v1/inbox/{message_id}/ack 200" => Type(of::<node::InboxAcked>),
    "POST /v1/outbox request" => Type(of::<node::OutboxRequest>),
    "POST /v1/outbox 202" => Type(of::<node::OutboxQueued>),
    "GET /v1/messages/{message_id} 200" => Type(of::<node::MessageAnswer>),
    "GET /v1/state 200" => Type(of::<node::StateAnswer>),
    "PATCH /v1/state/reported request" => Type(of::<serde_json::Value>),
    "PATCH /v1/state/reported 200" => Type(of::<node::StateAnswer>),
};

#[cfg(feature = "gateway")]
mod gateway_cases {
    use super::{of, Case, Health, Skip, Status, Type, DOCUMENT};
    use crate::api::gateway::wire as gw;
    use crate::enroll;
    use crate::envelope::KeyRotation;
    use crate::sync::wire as sync;

    pub const GATEWAY: &[Case] = table! {
        "GET /healthz 200" => Type(of::<Health>),
        "GET /readyz 200" => Type(of::<Health>),
        "GET /v1/status 200" => Type(of::<Status>),
        "GET /openapi.json 200" => Skip(DOCUMENT),
        "POST /v1/tool_call request" => Type(of::<gw::ToolCallBody>),
        "POST /v1/tool_call 200" => Type(of::<gw::ToolCallAnswer>),
        "POST /v1/tool_call 202" => Type(of::<gw::ToolCallQueued>),
        "POST /v1/commands request" => Type(of::<gw::CommandBody>),
        "POST /v1/commands 202" => Type(of::<gw::CommandQueued>),
        "GET /v1/messages/{id} 200" => Type(of::<gw::MessageAnswer>),
        "GET /v1/nodes 200" => Type(of::<gw::NodeList>),
        "GET /v1/inbox 200" => Type(of::<gw::InboxList>),
        "POST /v1/inbox/{id}/ack 200" => Type(of::<gw::InboxAcked>),
        "POST /v1/revocations request" => Type(of::<gw::RevokeBody>),
        "POST /v1/revocations 200" => Type(of::<gw::RevocationDuplicate>),
        "POST /v1/revocations 201" => Type(of::<gw::RevocationAdded>),
        "GET /v1/enroll 200" => Type(of::<enroll::Hello>),
        "POST /v1/enroll request" => Type(of::<enroll::Request>),
        "POST /v1/enroll 200" => Type(of::<enroll::Answer>),
        "POST /v1/enroll 202" => Type(of::<enroll::Answer>),
        "GET /v1/enrollments 200" => Type(of::<gw::EnrollmentList>),
        "POST /v1/enrollments/{node_id}/approve 200" => Type(of::<gw::EnrollmentView>),
        "POST /v1/enrollments/{node_id}/reject 200" => Type(of::<gw::EnrollmentView>),
        "POST /v1/node_revocations request" => Type(of::<gw::RetireBody>),
        "POST /v1/node_revocations 200" => Type(of::<gw::Retired>),
        "POST /v1/node_grace_ends request" => Type(of::<gw::EndGraceBody>),
        "POST /v1/node_grace_ends 200" => Type(of::<gw::GraceEnded>),
        "GET /v1/nodes/{id}/pull 200" => Type(of::<sync::PullAnswer>),
        "POST /v1/nodes/{id}/ack request" => Type(of::<sync::AckRequest>),
        "POST /v1/nodes/{id}/ack 200" => Type(of::<sync::AckAnswer>),
        "POST /v1/nodes/{id}/upload request" => Type(of::<sync::UploadRequest>),
        "POST /v1/nodes/{id}/upload 200" => Type(of::<sync::UploadAnswer>),
        "POST /v1/nodes/{id}/audit request" => Type(of::<sync::AuditUpload>),
        "POST /v1/nodes/{id}/audit 200" => Type(of::<sync::AuditAnswer>),
        "GET /v1/nodes/{id}/audit 200" => Type(of::<sync::AuditStatus>),
        "GET /v1/nodes/{id}/revocations 200" => Type(of::<sync::Revocations>),
        "POST /v1/nodes/{id}/rotate request" => Type(of::<KeyRotation>),
        "POST /v1/nodes/{id}/rotate 200" => Type(of::<sync::RotateAnswer>),
        "GET /v1/nodes/{id} 200" => Type(of::<crate::gateway::fleet::NodeDetail>),
        "PATCH /v1/nodes/{id}/labels request" => Type(of::<crate::fleet::LabelChange>),
        "PATCH /v1/nodes/{id}/labels 200" => Type(of::<gw::LabelsAnswer>),
        "PUT /v1/nodes/{id}/desired request" => Type(of::<serde_json::Value>),
        "PUT /v1/nodes/{id}/desired 200" => Type(of::<gw::DesiredWritten>),
        "PATCH /v1/nodes/{id}/desired request" => Type(of::<serde_json::Value>),
        "PATCH /v1/nodes/{id}/desired 200" => Type(of::<gw::DesiredWritten>),
        "GET /v1/nodes/{id}/state 200" => Type(of::<crate::gateway::node_state::StateView>),
        "POST /v1/nodes/{id}/report request" => Type(of::<sync::StateReport>),
        "POST /v1/nodes/{id}/report 200" => Type(of::<sync::ReportAnswer>),
        "POST /v1/rollouts request" => Type(of::<crate::gateway::rollout::plan::Spec>),
        "POST /v1/rollouts 201" => Type(of::<crate::gateway::rollout::RolloutView>),
        "POST /v1/rollouts 200" => Type(of::<crate::gateway::rollout::RolloutView>),
        "GET /v1/rollouts 200" => Type(of::<gw::RolloutList>),
        "GET /v1/rollouts/{id} 200" => Type(of::<crate::gateway::rollout::RolloutView>),
        "GET /v1/rollouts/{id}/nodes 200" => Type(of::<gw::RolloutNodes>),
        "POST /v1/rollouts/{id}/cancel 200" => Type(of::<crate::gateway::rollout::RolloutView>),
        "POST /v1/rollouts/{id}/resume 200" => Type(of::<crate::gateway::rollout::RolloutView>),
    };
}

/// Each role's document and table.
fn roles() -> Vec<(&'static str, &'static str, &'static [Case])> {
    vec![
        ("node", super::NODE, NODE),
        #[cfg(feature = "gateway")]
        ("gateway", super::GATEWAY, gateway_cases::GATEWAY),
    ]
}

/// `"METHOD /path what"` of every JSON body a document describes.
fn json_bodies(doc: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let json = |v: &Value| v["content"]["application/json"]["schema"].is_object();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            let key = |what: &str| format!("{} {path} {what}", method.to_uppercase());
            if json(&op["requestBody"]) {
                out.insert(key(REQUEST));
            }
            for (status, answer) in op["responses"].as_object().into_iter().flatten() {
                if status.starts_with('2') && json(answer) {
                    out.insert(key(status));
                }
            }
        }
    }
    out
}

/// The document's schema for the body `"METHOD /path what"`, and which way serde goes.
fn documented<'a>(doc: &'a Value, key: &str) -> (&'a Value, Dir) {
    let mut parts = key.split(' ');
    let (method, path, what) = (
        parts.next().unwrap_or("").to_lowercase(),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let op = &doc["paths"][path][method];
    let (body, dir) = if what == REQUEST {
        (&op["requestBody"], Dir::Request)
    } else {
        (&op["responses"][what], Dir::Answer)
    };
    (&body["content"]["application/json"]["schema"], dir)
}

/// One comparison: the document and the derived schema (each the root its `$ref`s point
/// into), and which way serde goes.
struct Cx<'a> {
    doc: &'a Value,
    rust: &'a Value,
    dir: Dir,
}

/// Follows `$ref`s (`#/components/schemas/…` or `#/$defs/…`) within `root`.
fn resolve<'a>(root: &'a Value, mut s: &'a Value) -> &'a Value {
    for _ in 0..16 {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                s = root
                    .pointer(r.trim_start_matches('#'))
                    .unwrap_or_else(|| panic!("$ref {r} points nowhere"))
            }
            None => break,
        }
    }
    s
}

/// The alternatives a schema allows: `anyOf`/`oneOf` flattened, `$ref`s followed.
fn branches<'a>(root: &'a Value, s: &'a Value) -> Vec<&'a Value> {
    let s = resolve(root, s);
    match s
        .get("anyOf")
        .or_else(|| s.get("oneOf"))
        .and_then(Value::as_array)
    {
        Some(alts) => alts.iter().flat_map(|a| branches(root, a)).collect(),
        None => vec![s],
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The JSON types a schema allows; `None` for any JSON.
fn types(root: &Value, s: &Value) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for b in branches(root, s) {
        let mut these: Vec<String> = match b.get("type") {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            _ => Vec::new(),
        };
        if these.is_empty() {
            let listed = b
                .get("enum")
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            let values = b.get("const").into_iter().chain(listed);
            these.extend(values.map(|v| json_type(v).to_string()));
            if b.get("properties").is_some() {
                these.push("object".to_string());
            }
            if b.get("items").is_some() {
                these.push("array".to_string());
            }
        }
        if these.is_empty() {
            return None;
        }
        out.extend(these);
    }
    Some(out)
}

/// The values a schema lists (`const`/`enum`, `null` aside), if every branch lists them.
fn values(root: &Value, s: &Value) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for b in branches(root, s) {
        if b.get("type") == Some(&Value::from("null")) {
            continue;
        }
        match (b.get("const"), b.get("enum").and_then(Value::as_array)) {
            (Some(c), _) => {
                out.insert(c.to_string());
            }
            (None, Some(vs)) => out.extend(vs.iter().map(Value::to_string)),
            (None, None) => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The object a schema describes: its one object branch, or, for alternatives of
/// objects (a tagged enum), one object with every branch's properties (each the union
/// of its branches) and as required what every branch requires.
fn object(root: &Value, s: &Value) -> Option<Value> {
    let objects: Vec<&Value> = branches(root, s)
        .into_iter()
        .filter(|b| b.get("properties").is_some_and(Value::is_object))
        .collect();
    if objects.len() < 2 {
        return objects.first().map(|o| (*o).clone());
    }
    let mut props = serde_json::Map::new();
    let mut all_need: Option<BTreeSet<String>> = None;
    for o in &objects {
        for (name, schema) in o["properties"].as_object().into_iter().flatten() {
            let merged = props
                .entry(name.clone())
                .or_insert_with(|| serde_json::json!({"anyOf": []}));
            if let Some(alts) = merged["anyOf"].as_array_mut() {
                alts.push(schema.clone());
            }
        }
        let need = required(o);
        all_need = Some(match all_need {
            None => need,
            Some(before) => before.intersection(&need).cloned().collect(),
        });
    }
    Some(serde_json::json!({"properties": props, "required": all_need.unwrap_or_default()}))
}

/// What an array's items are, where a branch says.
fn items<'a>(root: &'a Value, s: &'a Value) -> Option<&'a Value> {
    branches(root, s).into_iter().find_map(|b| b.get("items"))
}

fn required(o: &Value) -> BTreeSet<String> {
    o["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

fn names(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

impl Cx<'_> {
    /// The differences between the document's schema `d` and the type's `r` at `at`
    /// (a property path; `optional`: the property may be left out).
    fn compare(&self, at: &str, d: &Value, r: &Value, optional: bool, out: &mut Vec<String>) {
        let here = if at.is_empty() { "the body" } else { at };
        if let (Some(td), Some(tr)) = (types(self.doc, d), types(self.rust, r)) {
            let strip = |t: &BTreeSet<String>| -> BTreeSet<String> {
                t.iter()
                    .filter(|x| !optional || *x != "null")
                    .cloned()
                    .collect()
            };
            if strip(&td) != strip(&tr) {
                out.push(format!(
                    "{here}: the document says [{}], the Rust type [{}]",
                    names(&td),
                    names(&tr)
                ));
            } else if optional
                && self.dir == Dir::Request
                && td.contains("null")
                && !tr.contains("null")
            {
                out.push(format!(
                    "{here}: the document allows null, the Rust type refuses it"
                ));
            }
        }
        if let (Some(vd), Some(vr)) = (values(self.doc, d), values(self.rust, r)) {
            if vd != vr {
                out.push(format!(
                    "{here}: the document lists [{}], the Rust type [{}]",
                    names(&vd),
                    names(&vr)
                ));
            }
        }
        if let (Some(od), Some(or)) = (object(self.doc, d), object(self.rust, r)) {
            self.compare_objects(at, &od, &or, out);
        }
        if let (Some(id), Some(ir)) = (items(self.doc, d), items(self.rust, r)) {
            self.compare(&format!("{at}[]"), id, ir, false, out);
        }
    }

    fn compare_objects(&self, at: &str, od: &Value, or: &Value, out: &mut Vec<String>) {
        let props = |o: &Value| -> BTreeMap<String, Value> {
            o["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .collect()
        };
        let (pd, pr) = (props(od), props(or));
        let (rd, rr) = (required(od), required(or));
        let dot = |p: &str| {
            if at.is_empty() {
                p.to_string()
            } else {
                format!("{at}.{p}")
            }
        };
        for p in pd.keys().filter(|p| !pr.contains_key(*p)) {
            out.push(format!("{}: in the document, not in the Rust type", dot(p)));
        }
        for p in pr.keys().filter(|p| !pd.contains_key(*p)) {
            out.push(format!("{}: in the Rust type, not in the document", dot(p)));
        }
        let (always, never) = match self.dir {
            Dir::Request => ("the Rust type needs it", "the Rust type can do without it"),
            Dir::Answer => (
                "the Rust type always writes it",
                "the Rust type may leave it out",
            ),
        };
        for p in rd.difference(&rr).filter(|p| pr.contains_key(*p)) {
            out.push(format!("{}: required by the document, but {never}", dot(p)));
        }
        for p in rr.difference(&rd).filter(|p| pd.contains_key(*p)) {
            out.push(format!(
                "{}: not required by the document, but {always}",
                dot(p)
            ));
        }
        let closed = |o: &Value| o.get("additionalProperties") == Some(&Value::Bool(false));
        if self.dir == Dir::Request && closed(od) != closed(or) {
            let says = |c: bool| if c { "refuses" } else { "takes" };
            out.push(format!(
                "{}: the document {} unknown properties, the Rust type {} them",
                if at.is_empty() { "the body" } else { at },
                says(closed(od)),
                says(closed(or))
            ));
        }
        for (p, d) in &pd {
            if let Some(r) = pr.get(p) {
                let optional = !(rd.contains(p) && rr.contains(p));
                self.compare(&dot(p), d, r, optional, out);
            }
        }
    }
}

/// Every documented JSON body has an entry in its role's table, and every entry a
/// documented JSON body.
fn coverage(role: &str, doc: &Value, cases: &[Case], out: &mut Vec<String>) {
    let documented = json_bodies(doc);
    let listed: BTreeSet<String> = cases.iter().map(|(k, _)| k.to_string()).collect();
    for k in documented.difference(&listed) {
        out.push(format!(
            "{role} {k}: a documented JSON body with no type in the table (add one, or a Skip with the reason)"
        ));
    }
    for k in listed.difference(&documented) {
        out.push(format!(
            "{role} {k}: in the table, but the document has no JSON body there"
        ));
    }
    for (k, body) in cases {
        if matches!(body, Skip(why) if why.trim().is_empty()) {
            out.push(format!("{role} {k}: left out without a reason"));
        }
    }
}

/// The differences between each documented body in `doc` and its type in `cases`.
fn check(role: &str, doc: &Value, cases: &[Case]) -> Vec<String> {
    let mut out = Vec::new();
    coverage(role, doc, cases, &mut out);
    for (key, body) in cases {
        let Type(schema) = body else { continue };
        let (d, dir) = documented(doc, key);
        if d.is_null() {
            continue;
        }
        let rust = schema(dir);
        let cx = Cx {
            doc,
            rust: &rust,
            dir,
        };
        let mut diffs = Vec::new();
        cx.compare("", d, &rust, false, &mut diffs);
        out.extend(diffs.into_iter().map(|d| format!("{role} {key}: {d}")));
    }
    out
}

/// Every error answer of both documents is `components/schemas/Error`: it matches the
/// one error body the code writes (`api::error::ErrorBody`).
#[test]
fn the_error_schema_matches_the_error_body() {
    let rust = of::<crate::api::error::ErrorBody<'static>>(Dir::Answer);
    let mut problems = Vec::new();
    for (role, doc, _) in roles() {
        let doc: Value = serde_json::from_str(doc).unwrap();
        let cx = Cx {
            doc: &doc,
            rust: &rust,
            dir: Dir::Answer,
        };
        let mut diffs = Vec::new();
        cx.compare(
            "",
            &doc["components"]["schemas"]["Error"],
            &rust,
            false,
            &mut diffs,
        );
        problems.extend(diffs.into_iter().map(|d| format!("{role} Error: {d}")));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A property renamed, added, dropped, retyped or made optional on one side only fails
/// here, naming the route, the status and the property.
#[test]
fn every_documented_json_body_matches_its_rust_type() {
    let mut problems = Vec::new();
    for (role, text, cases) in roles() {
        let doc: Value = serde_json::from_str(text).unwrap();
        problems.extend(check(role, &doc, cases));
    }
    assert!(
        problems.is_empty(),
        "docs/openapi/*.json and the Rust types disagree:\n{}",
        problems.join("\n")
    );
}

#[derive(serde::Deserialize, serde::Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Sample {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(default)]
    tags: Vec<u32>,
    any: Value,
}

/// The comparison itself sees each kind of difference (and none where there is none).
#[test]
fn the_comparison_names_each_difference() {
    let doc = |body: Value| -> Value {
        serde_json::json!({"paths": {"/x": {"post": {
            "requestBody": {"content": {"application/json": {"schema": body}}},
            "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/S"}}}}}
        }}}, "components": {"schemas": {"S": {"type": "object",
            "properties": {"id": {"type": "string"}, "note": {"type": "string"},
                           "tags": {"type": "array", "items": {"type": "integer"}}, "any": {}},
            "required": ["id", "tags", "any"]}}}})
    };
    let cases: &[Case] = &[
        ("POST /x request", Type(of::<Sample>)),
        ("POST /x 200", Type(of::<Sample>)),
    ];
    let good = serde_json::json!({"type": "object", "additionalProperties": false,
        "properties": {"id": {"type": "string"}, "note": {"type": ["string", "null"]},
                       "tags": {"type": "array", "items": {"type": "integer"}}, "any": {"type": "object"}},
        "required": ["id", "any"]});
    assert_eq!(check("t", &doc(good.clone()), cases), Vec::<String>::new());

    let mut bad = good;
    bad["properties"]["ident"] = bad["properties"]["id"].take();
    bad["properties"].as_object_mut().unwrap().remove("id");
    bad["properties"]["tags"]["items"]["type"] = "string".into();
    bad["properties"]["tags"]["type"] = serde_json::json!(["array", "null"]);
    bad["required"] = serde_json::json!(["ident", "any", "note"]);
    bad.as_object_mut().unwrap().remove("additionalProperties");
    let found = check("t", &doc(bad), cases);
    for want in [
        "t POST /x request: ident: in the document, not in the Rust type",
        "t POST /x request: id: in the Rust type, not in the document",
        "t POST /x request: tags: the document allows null, the Rust type refuses it",
        "t POST /x request: tags[]: the document says [string], the Rust type [integer]",
        "t POST /x request: note: required by the document, but the Rust type can do without it",
        "t POST /x request: the body: the document takes unknown properties, the Rust type refuses them",
    ] {
        assert!(
            found.iter().any(|f| f == want),
            "{want:?} not in {found:#?}"
        );
    }
    assert_eq!(found.len(), 6, "{found:#?}");

    let missing: &[Case] = &[("POST /x request", Skip("test"))];
    let found = check("t", &doc(serde_json::json!({"type": "object"})), missing);
    assert_eq!(
        found,
        ["t POST /x 200: a documented JSON body with no type in the table (add one, or a Skip with the reason)"]
    );
}
