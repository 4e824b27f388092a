//! What a daemon answers while it starts (a gateway waiting for its database, a store
//! recovering): it listens at once, so a probe or an operator learns *why* it is not
//! ready instead of "connection refused". `/healthz` is 200 (the process is alive and
//! must not be restarted for this), everything else 503 `not_ready` with the reason.

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::ApiError;

/// Why the daemon is not ready yet, as the start sees it (updated on every retry).
#[derive(Clone, Default)]
pub struct Starting {
    reason: Arc<Mutex<String>>,
}

impl Starting {
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: Arc::new(Mutex::new(reason.into())),
        }
    }

    pub fn set(&self, reason: impl Into<String>) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason.into();
    }

    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The router served until the real one takes over.
pub fn router(starting: Starting) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .fallback(not_ready)
        .with_state(starting)
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn not_ready(axum::extract::State(s): axum::extract::State<Starting>) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_ready",
        format!("starting: {}", s.reason()),
    )
}
