//! The node's local HTTP API (PROTOCOL §10). One file per route group; every handler
//! returns `ApiResult`, so every failure has the documented JSON shape.

mod envelopes;
mod health;
mod inbox;
mod messages;
mod outbox;
mod state;
mod tools;
pub mod wire;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, patch, post};
use axum::Router;

use crate::app::core::NodeCore;

pub type Core = Arc<NodeCore>;

pub fn router(core: Core) -> Router {
    let limit = core.cfg().max_body_bytes as usize;
    let routes = Router::new()
        .route("/v1/tools", get(tools::list))
        .route("/v1/tool_call", post(tools::call))
        .route("/v1/envelopes", post(envelopes::receive))
        .route("/v1/inbox", get(inbox::list))
        .route("/v1/inbox/{message_id}/ack", post(inbox::ack))
        .route("/v1/outbox", post(outbox::queue))
        .route("/v1/messages/{message_id}", get(messages::status))
        .route("/v1/state", get(state::get))
        .route("/v1/state/reported", patch(state::patch_reported))
        .route("/openapi.json", get(crate::api::openapi::node));
    crate::api::health::routes(routes)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            core.clone(),
            crate::api::health::count::<NodeCore>,
        ))
        .with_state(core)
}
