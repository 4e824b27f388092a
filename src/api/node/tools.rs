use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::Core;
use crate::api::bearer;
use crate::api::json::JsonBody;
use crate::api::{ApiError, ApiResult};
use crate::app::calls::{ToolCallDone, ToolCallRequest};

pub async fn list(State(core): State<Core>) -> Json<Value> {
    Json(json!({"tools": core.calls.tools().contracts()}))
}

/// `POST /v1/tool_call`'s body (PROTOCOL §10).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallBody {
    pub job_id: Option<String>,
    pub tool_name: String,
    #[serde(default = "empty_object")]
    pub tool_args: Value,
    pub token: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Its answer: the call that ran (or the kept one, for a repeat of its job id).
#[derive(Debug, Serialize)]
pub struct ToolCallAnswer {
    /// Always `true`: failures answer the error shape.
    pub ok: bool,
    #[serde(flatten)]
    pub done: ToolCallDone,
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
