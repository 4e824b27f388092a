use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;

use super::wire::{ToolCallAnswer, ToolCallBody, ToolList};
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
    JsonBody(body): JsonBody<ToolCallBody>,
) -> ApiResult<Json<ToolCallAnswer>> {
    let mut token = body.token;
    if let Some(b) = bearer(&headers) {
        if token.as_deref().is_some_and(|t| t != b) {
            return Err(ApiError::bad_request(
                "token in the body and in Authorization differ",
            ));
        }
        token = Some(b.to_string());
    }
    let req = ToolCallRequest {
        job_id: body.job_id,
        tool_name: body.tool_name,
        tool_args: body.tool_args,
        token,
    };
    let done = core.calls.tool_call(req, "local").await?;
    Ok(Json(ToolCallAnswer { ok: true, done }))
}
