//! What a daemon answers while it starts (a gateway waiting for its database, a store
//! recovering): it listens at once, so a probe or an operator learns *why* it is not
//! ready instead of "connection refused". `/healthz` is 200 (the process is alive and
//! must not be restarted for this), everything else 503 `not_ready` with the reason.

use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};

use super::health::Health;
use super::ApiError;
pub use crate::daemon::starting::Starting;

/// The router served until the real one takes over.
pub fn router(starting: Starting) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .fallback(not_ready)
        .with_state(starting)
}

async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

async fn not_ready(axum::extract::State(s): axum::extract::State<Starting>) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_ready",
        format!("starting: {}", s.reason()),
    )
}
