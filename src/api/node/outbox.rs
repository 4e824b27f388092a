use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{bearer, Core};
use crate::api::json::JsonBody;
use crate::api::ApiResult;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxRequest {
    pub to: String,
    pub payload_type: String,
    pub payload: Value,
    pub ttl_s: Option<u64>,
    pub priority: Option<u8>,
}

pub async fn queue(
    State(core): State<Core>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<OutboxRequest>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    core.authorize_admin(bearer(&headers).as_deref())?;
    let id = core
        .queue_outbox(
            &req.to,
            &req.payload_type,
            &req.payload,
            req.ttl_s,
            req.priority.unwrap_or(0),
        )
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"queued": true, "message_id": id})),
    ))
}
