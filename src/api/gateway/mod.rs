//! The gateway's HTTP API (PROTOCOL §11–12), beside the node's: routes and thin handlers that
//! parse, authenticate, call a `gateway::` flow and shape the answer. Errors become
//! HTTP only here ([`error`]).

pub mod admin;
pub mod auth;
pub mod client;
pub mod enroll;
pub mod error;
pub mod events;
pub mod fleet;
mod health;
pub mod node;
pub mod rollouts;
pub mod ui;
pub mod wire;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, patch, post, put};
use axum::Router;

use crate::gateway::Gateway;

/// All routes of PROTOCOL §11 and §12 plus health, readiness, metrics, `POST /v1/revocations` and
/// `GET /v1/nodes/{id}/audit`, and the operator's console under `/ui` ([`ui`]).
pub fn router(gw: Arc<Gateway>) -> Router {
    let limit = gw.cfg().max_body_bytes as usize;
    let routes = Router::new()
        .route("/v1/tool_call", post(client::tool_call))
        .route("/v1/commands", post(client::commands))
        .route("/v1/messages/{id}", get(client::message))
        .route("/v1/events", get(client::events))
        .route("/v1/nodes", get(fleet::nodes))
        .route("/v1/nodes/{id}", get(fleet::node))
        .route("/v1/nodes/{id}/labels", patch(fleet::labels))
        .route(
            "/v1/nodes/{id}/desired",
            put(fleet::desired_put).patch(fleet::desired_patch),
        )
        .route("/v1/nodes/{id}/state", get(fleet::state))
        .route("/v1/nodes/{id}/report", post(node::report))
        .route("/v1/rollouts", post(rollouts::create).get(rollouts::list))
        .route("/v1/rollouts/{id}", get(rollouts::get))
        .route("/v1/rollouts/{id}/nodes", get(rollouts::nodes))
        .route("/v1/rollouts/{id}/cancel", post(rollouts::cancel))
        .route("/v1/rollouts/{id}/resume", post(rollouts::resume))
        .route("/v1/inbox", get(admin::inbox))
        .route("/v1/inbox/{id}/ack", post(admin::inbox_ack))
        .route("/v1/revocations", post(admin::revoke))
        .route("/v1/enroll", get(enroll::hello).post(enroll::enroll))
        .route("/v1/enrollments", get(enroll::list))
        .route("/v1/enrollments/{node_id}/approve", post(enroll::approve))
        .route("/v1/enrollments/{node_id}/reject", post(enroll::reject))
        .route("/v1/node_revocations", post(enroll::revoke_node))
        .route("/v1/node_grace_ends", post(enroll::end_grace))
        .route("/v1/nodes/{id}/pull", get(node::pull))
        .route("/v1/nodes/{id}/ack", post(node::ack))
        .route("/v1/nodes/{id}/upload", post(node::upload))
        .route(
            "/v1/nodes/{id}/audit",
            post(node::audit_upload).get(node::audit_status),
        )
        .route("/v1/nodes/{id}/revocations", get(node::revocations))
        .route("/v1/nodes/{id}/rotate", post(node::rotate))
        .route("/openapi.json", get(crate::api::openapi::gateway))
        .merge(ui::router(gw.clone()));
    crate::api::health::routes(routes)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            gw.clone(),
            crate::api::health::count::<Gateway>,
        ))
        .with_state(gw)
}
