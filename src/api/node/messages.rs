use axum::extract::{Path, State};
use axum::Json;
use serde_json::Value;

use super::Core;
use crate::api::{ApiError, ApiResult};

pub async fn status(State(core): State<Core>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    match core.inbox.message_status(&id)? {
        Some(v) => Ok(Json(v)),
        None => Err(ApiError::not_found("not_found", "no message with that id")),
    }
}
