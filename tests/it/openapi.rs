//! `/openapi.json` (issue #18) kept true: the documents in `docs/openapi/` against the
//! routes the routers register, the answers running daemons give, and the error codes
//! the code can produce.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::harness::{http, rust_files, Home};

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

fn doc(role: &str) -> Value {
    let p = format!("{}/docs/openapi/{role}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// (path, method) of every operation in a document.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in item.as_object().unwrap().keys() {
            assert!(METHODS.contains(&m.as_str()), "{path}: {m}");
            out.insert((path.clone(), m.clone()));
        }
    }
    out
}

fn error_codes(doc: &Value) -> BTreeSet<String> {
    doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

fn sources() -> Vec<(std::path::PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let t = std::fs::read_to_string(&f).unwrap();
            (f, t)
        })
        .collect()
}

/// The first string literal at or after `from`.
fn next_literal(text: &str, from: usize) -> Option<(String, usize)> {
    let start = text[from..].find('"')? + from + 1;
    let end = text[start..].find('"')? + start;
    Some((text[start..end].to_string(), end + 1))
}

/// The text from `open` (just after a `(`) to its matching `)`.
fn call_args(text: &str, open: usize) -> &str {
    let mut depth = 1;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open..open + i];
                }
            }
            _ => {}
        }
    }
    &text[open..]
}

/// Every `.route("path", get(..).post(..))` in `src/`, wherever the routers live.
fn registered_routes() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (_, text) in sources() {
        let mut at = 0;
        while let Some(i) = text[at..].find(".route(") {
            let open = at + i + ".route(".len();
            let args = call_args(&text, open);
            let (path, after) = next_literal(args, 0).expect("a route path literal");
            at = open;
            // The operator's console (`/ui`, docs/CONSOLE.md) is HTML for browsers behind
            // a session cookie, not part of the JSON API these documents describe.
            if path == "/ui" || path.starts_with("/ui/") {
                continue;
            }
            let handlers = &args[after..];
            for m in METHODS {
                // `get(` as a word: not the tail of `forget(`.
                let mut k = 0;
                while let Some(j) = handlers[k..].find(&format!("{m}(")) {
                    let pos = k + j;
                    let before = handlers[..pos].chars().last().unwrap_or(' ');
                    if !(before.is_alphanumeric() || before == '_') {
                        out.insert((path.clone(), m.to_string()));
                    }
                    k = pos + m.len();
                }
            }
            at = open;
        }
    }
    out
}

/// Every error code the code can answer with: the code argument of each
/// `ApiError::new`/`not_found` call, and what each `code()` mapping returns.
fn codes_in_source() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let snake = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
    };
    for (path, text) in sources() {
        let mut calls = vec!["ApiError::new(", "ApiError::not_found("];
        if path.ends_with("src/api/error.rs") {
            calls.push("Self::new(");
        }
        for call in calls {
            let mut at = 0;
            while let Some(i) = text[at..].find(call) {
                let open = at + i + call.len();
                if let Some((lit, _)) = next_literal(call_args(&text, open), 0) {
                    if snake(&lit) {
                        out.insert(lit);
                    }
                }
                at = open;
            }
        }
        // Enrollment's refusal codes are constants in one module (PROTOCOL §15.4).
        for sig in [
            "fn code(&self) -> &'static str {",
            "impl DenyCode {",
            "pub mod codes {",
        ] {
            let mut at = 0;
            while let Some(i) = text[at..].find(sig) {
                let open = at + i + sig.len();
                let body = call_args(&text.replace('{', "(").replace('}', ")"), open).to_string();
                let mut k = 0;
                while let Some((lit, next)) = next_literal(&body, k) {
                    if snake(&lit) {
                        out.insert(lit);
                    }
                    k = next;
                }
                at = open;
            }
        }
    }
    // The envelope pipeline's `duplicate` is a 200 on the node, a 409 code at the gateway.
    out
}

/// A route added to a router without being documented (or documented and removed)
/// fails here.
#[test]
fn the_documents_list_exactly_the_routes_the_routers_register() {
    let documented: BTreeSet<_> = operations(&doc("node"))
        .union(&operations(&doc("gateway")))
        .cloned()
        .collect();
    let registered = registered_routes();
    assert!(registered.len() > 20, "the route scan found {registered:?}");
    let missing: Vec<_> = registered.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&registered).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "registered but not documented: {missing:?}\ndocumented but not registered: {extra:?}"
    );
}

/// Every error code the code can answer is in a document's `Error` schema, and every
/// code listed there exists.
#[test]
fn the_documents_list_exactly_the_error_codes_the_code_answers() {
    let documented: BTreeSet<_> = error_codes(&doc("node"))
        .union(&error_codes(&doc("gateway")))
        .cloned()
        .collect();
    let found = codes_in_source();
    assert!(found.len() > 20, "the code scan found {found:?}");
    let missing: Vec<_> = found.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&found).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "answered but not documented: {missing:?}\ndocumented but never answered: {extra:?}"
    );
}

/// `/v1/inbox/{message_id}/ack` → `/v1/inbox/{}/ack`.
fn template(path: &str) -> String {
    let mut out = String::new();
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            _ if in_param => {}
            c => out.push(c),
        }
    }
    out
}

/// The fallback's answers: an unknown route or a known route with another method.
fn is_fallback(status: u16, body: &Value) -> bool {
    (status == 404 && body["error"]["message"] == "no such route") || status == 405
}

async fn probe(base: &str, path: &str, method: &str) -> (u16, Value, String) {
    let url = format!(
        "{base}{}",
        path.replace("{message_id}", "x").replace("{id}", "node:x")
    );
    let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let mut req = http().request(m, &url);
    if method != "get" {
        req = req.header("content-type", "application/json").body("{}");
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if ct.starts_with("text/event-stream") {
        return (status, Value::Null, ct);
    }
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        ct,
    )
}

/// Both daemons serve their document, answer every documented operation with a
/// documented status (errors in the `Error` shape with a listed code), refuse the
/// other role's routes as unknown, and answer a wrong method with a JSON 405.
#[tokio::test(flavor = "multi_thread")]
async fn both_daemons_serve_what_their_documents_describe() {
    let gw_home = Home::init("gateway", "gateway:oa", "");
    let node_home = Home::init("node", "node:oa", "");
    let gw = gw_home.start();
    let node = node_home.start();
    let all: BTreeSet<_> = operations(&doc("node"))
        .union(&operations(&doc("gateway")))
        .cloned()
        .collect();
    for (role, d) in [("node", &node), ("gateway", &gw)] {
        let spec = doc(role);
        let base = d.url("");
        // Served, and the same document.
        let r = http().get(d.url("/openapi.json")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let served: Value = r.json().await.unwrap();
        assert_eq!(
            served, spec,
            "{role}: /openapi.json is not docs/openapi/{role}.json"
        );

        let codes = error_codes(&spec);
        // The same route may name its parameter differently in the two roles.
        let mine: std::collections::BTreeMap<_, _> = operations(&spec)
            .into_iter()
            .map(|(p, m)| ((template(&p), m), p))
            .collect();
        for (other_path, method) in &all {
            let key = (template(other_path), method.clone());
            let path = mine.get(&key).unwrap_or(other_path);
            let (status, body, ct) = probe(&base, path, method).await;
            let what = format!("{role} {} {path}: {status} {body}", method.to_uppercase());
            if mine.contains_key(&key) {
                assert!(
                    !is_fallback(status, &body),
                    "documented, not served: {what}"
                );
                let responses = &spec["paths"][path][method]["responses"];
                assert!(
                    responses.get(status.to_string()).is_some(),
                    "status not documented: {what}"
                );
                if status >= 400 {
                    assert!(ct.starts_with("application/json"), "{what}: {ct}");
                    assert_eq!(body["ok"], false, "{what}");
                    let code = body["error"]["code"].as_str().unwrap_or("");
                    assert!(codes.contains(code), "code not in the Error schema: {what}");
                }
            } else {
                assert!(is_fallback(status, &body), "served, not documented: {what}");
            }
            if status == 405 || (status == 404 && body["error"]["code"] == "not_found") {
                assert!(
                    ct.starts_with("application/json") && body["ok"] == false,
                    "the fallback's answer is not the error shape: {what} ({ct})"
                );
            }
        }
        // A query parameter of the wrong type: refused in the error shape, like a body.
        for (path, method) in operations(&spec) {
            let params = spec["paths"][&path][&method]["parameters"]
                .as_array()
                .cloned();
            for p in params.unwrap_or_default() {
                if p["in"] != "query" || p["schema"]["type"] != "integer" {
                    continue;
                }
                let q = format!("{path}?{}=not-a-number", p["name"].as_str().unwrap());
                let (status, body, ct) = probe(&base, &q, &method).await;
                assert!(
                    status >= 400 && ct.starts_with("application/json") && body["ok"] == false,
                    "{role} {method} {q}: {status} {ct} {body}"
                );
            }
        }
        // Every method a documented path does not list: a 405 in the error shape.
        for path in spec["paths"].as_object().unwrap().keys() {
            for m in METHODS {
                if spec["paths"][path].get(m).is_some() {
                    continue;
                }
                let (status, body, ct) = probe(&base, path, m).await;
                assert_eq!(status, 405, "{role} {m} {path}: {status} {body}");
                assert!(
                    ct.starts_with("application/json")
                        && body["error"]["code"] == "method_not_allowed",
                    "{role} {m} {path}: 405 not in the error shape: {ct} {body}"
                );
            }
        }
    }
}

/// `docs/PROTOCOL.md` is the whole contract: it names every route and every error code
/// of both documents and sends the reader to nothing outside the repository (before
/// #18 it referred to a `SPEC.md` the repository does not have and never mentioned
/// `GET /v1/nodes/{id}/audit`).
#[test]
fn protocol_md_is_self_contained_and_names_every_route_and_error_code() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/PROTOCOL.md")).unwrap();
    assert!(!text.contains("SPEC"), "PROTOCOL.md refers to the SPEC");
    assert!(
        !text.contains("../"),
        "PROTOCOL.md refers outside the repository"
    );
    // Nor to another document for something it needs (the repository's other docs say
    // why and how; this one says what), nor to a web page: public standards are named
    // (RFC 9180, C2SP signed-note), not linked.
    for (i, line) in text.lines().enumerate() {
        assert!(
            !line.contains(".md") && !line.contains("http://") && !line.contains("https://"),
            "PROTOCOL.md line {} sends the reader elsewhere: {line}",
            i + 1
        );
    }
    for role in ["node", "gateway"] {
        let d = doc(role);
        for (path, method) in operations(&d) {
            assert!(
                text.contains(&path),
                "PROTOCOL.md does not describe {} {path} ({role})",
                method.to_uppercase()
            );
        }
        for code in error_codes(&d) {
            assert!(
                text.contains(&format!("`{code}`")),
                "PROTOCOL.md does not list the error code {code}"
            );
        }
    }
}

/// Found by schemathesis signing as a node: an ack whose `rejected` names an empty id
/// reached the store's own input check and was answered 500 `internal` (the store
/// refuses ids that are empty, longer than 255 bytes or contain NUL). A malformed
/// request is the node's fault: 400 `bad_request`, and nothing is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_ack_with_an_impossible_message_id_is_a_bad_request() {
    let f = crate::gateway::start();
    let pq = format!("/v1/nodes/{}/ack", crate::gateway::NODE);
    let long = "x".repeat(256);
    for body in [
        serde_json::json!({"message_ids": [], "rejected": [{"id": "", "code": "expired"}]}),
        serde_json::json!({"message_ids": [], "rejected": [{"id": "a\u{0}b", "code": "expired"}]}),
        serde_json::json!({"message_ids": [long], "rejected": []}),
        serde_json::json!({"message_ids": [""]}),
    ] {
        let (status, answer) = f.signed("POST", &pq, Some(&body), |_, _| {}).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "bad_request", "{body}: {answer}");
    }
    // A well-formed ack of unknown ids is still fine.
    let body = serde_json::json!({"message_ids": ["nope"], "rejected": [{"id": "nada", "code": "expired"}]});
    let (status, answer) = f.signed("POST", &pq, Some(&body), |_, _| {}).await;
    assert_eq!(status, 200, "{answer}");
}

/// Seen in schemathesis's log: the gateway queued a `TASK_REQUEST` for a tool name no
/// node can have (`""`, `Echo!`), answered 202, and the caller learnt of the typo only
/// when the node refused it, possibly days later. The name's grammar is the node's
/// (`[a-z][a-z0-9_]{0,63}`), checked before anything is queued.
#[tokio::test(flavor = "multi_thread")]
async fn the_gateway_refuses_a_tool_name_no_node_can_have() {
    let f = crate::gateway::start();
    for name in ["", "Echo!", "echo tool"] {
        let body = serde_json::json!({"target": {"node_id": crate::gateway::NODE},
                                      "tool_name": name, "wait_s": 0});
        let (status, answer) = f.client("/v1/tool_call", Some(body)).await;
        assert_eq!(status, 400, "{name:?}: {answer}");
        assert_eq!(answer["error"]["code"], "bad_request", "{answer}");
    }
    let body = serde_json::json!({"target": {"node_id": crate::gateway::NODE},
                                  "tool_name": "echo", "wait_s": 0});
    let (status, answer) = f.client("/v1/tool_call", Some(body)).await;
    assert_eq!(status, 202, "{answer}");
}
