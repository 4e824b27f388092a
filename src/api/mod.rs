//! HTTP APIs: the node's local API (PROTOCOL §10) and the gateway's (PROTOCOL §11–12). One error
//! type ([`error::ApiError`]) maps every failure to status + code; one extractor
//! ([`json::JsonBody`]) turns every malformed body into that shape.

pub mod error;
pub mod gateway;
pub mod json;
pub mod node;
pub mod openapi;

pub use error::{store_error, ApiError, ApiResult};

/// Counts an answered request in `outpost_http_requests_total` by status class (both
/// roles).
pub fn count_response(metrics: &crate::telemetry::Metrics, resp: &axum::response::Response) {
    let class = match resp.status().as_u16() {
        200..=299 => "2xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    };
    metrics.http_requests_total.inc(&[class]);
}
