use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde_json::Value;

use super::wire::ToolList;
use super::Core;
use crate::api::bearer;
use crate::api::json::JsonBody;
use crate::api::{ApiError, ApiResult};
use crate::app::calls::ToolCallRequest;

pub async fn list(State(core): State<Core>) -> Json<ToolList> {
    Json(ToolList {
        tools: core.calls.tools().contracts(),
    })
}

pub async fn call(
    State(core): State<Core>,
    headers: HeaderMap,
    JsonBody(mut req): JsonBody<ToolCallRequest>,
) -> ApiResult<Json<Value>> {
    if let Some(b) = bearer(&headers) {
        if req.token.as_deref().is_some_and(|t| t != b) {
            return Err(ApiError::bad_request(
                "token in the body and in Authorization differ",
            ));
        }
        req.token = Some(b.to_string());
    }
    Ok(core.calls.tool_call(req, "local").await.map(Json)?)
}
