//! `GET /openapi.json`: the OpenAPI 3.1 description of each role's API.
//!
//! Written by hand in `docs/openapi/{node,gateway}.json` and embedded at build time, so
//! what a daemon serves is the document in the repository. `tests/it/openapi.rs` keeps it
//! true: every route of both routers is documented, every documented route and method is
//! served, and every error code the code can answer is listed; the unit test in
//! `openapi_tests.rs` checks every JSON body it describes against the Rust type that
//! parses or writes it; `scripts/schemathesis.sh` checks live answers against it.

use axum::http::header;
use axum::response::IntoResponse;

pub const NODE: &str = include_str!("../../docs/openapi/node.json");
#[cfg(feature = "gateway")]
pub const GATEWAY: &str = include_str!("../../docs/openapi/gateway.json");

fn json(doc: &'static str) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], doc)
}

/// The node's local API.
pub async fn node() -> impl IntoResponse {
    json(NODE)
}

/// The gateway's client and node-facing API.
#[cfg(feature = "gateway")]
pub async fn gateway() -> impl IntoResponse {
    json(GATEWAY)
}

#[cfg(test)]
mod tests {
    /// Both documents parse and say they are OpenAPI 3.1.
    #[test]
    fn the_embedded_documents_are_openapi_3_1_json() {
        #[cfg(feature = "gateway")]
        let docs = [super::NODE, super::GATEWAY];
        #[cfg(not(feature = "gateway"))]
        let docs = [super::NODE];
        for doc in docs {
            let v: serde_json::Value = serde_json::from_str(doc).unwrap();
            assert_eq!(v["openapi"], "3.1.0");
            assert!(v["paths"]["/openapi.json"]["get"].is_object());
        }
    }
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod types;
