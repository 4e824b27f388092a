use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::Core;
use crate::api::{ApiError, ApiResult};

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub async fn readyz(State(core): State<Core>) -> ApiResult<Json<Value>> {
    if core.is_ready() {
        Ok(Json(json!({"status": "ready"})))
    } else {
        Err(ApiError::not_ready())
    }
}

pub async fn metrics(State(core): State<Core>) -> impl IntoResponse {
    core.refresh_gauges();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        core.metrics().render(),
    )
}

pub async fn status(State(core): State<Core>) -> ApiResult<Json<Value>> {
    Ok(Json(core.status_json()?))
}
