//! The node's local HTTP API (PROTOCOL §10). One file per route group; every handler
//! returns `ApiResult`, so every failure has the documented JSON shape.

mod envelopes;
mod health;
mod inbox;
mod messages;
mod outbox;
mod tools;
pub mod wire;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use super::ApiError;
use crate::app::core::NodeCore;

pub type Core = Arc<NodeCore>;

pub fn router(core: Core) -> Router {
    let limit = core.cfg().max_body_bytes as usize;
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/status", get(health::status))
        .route("/v1/tools", get(tools::list))
        .route("/v1/tool_call", post(tools::call))
        .route("/v1/envelopes", post(envelopes::receive))
        .route("/v1/inbox", get(inbox::list))
        .route("/v1/inbox/{message_id}/ack", post(inbox::ack))
        .route("/v1/outbox", post(outbox::queue))
        .route("/v1/messages/{message_id}", get(messages::status))
        .route("/openapi.json", get(crate::api::openapi::node))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(core.clone(), count_requests))
        .with_state(core)
}

async fn not_found() -> ApiError {
    ApiError::not_found("not_found", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this route",
    )
}

async fn count_requests(State(core): State<Core>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    crate::api::count_response(core.metrics(), &resp);
    core.note_served();
    resp
}
