use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::Core;
use crate::api::bearer;
use crate::api::json::JsonBody;
use crate::api::{ApiError, ApiResult};
use crate::app::outbox::message_id_for_key;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxRequest {
    pub to: String,
    pub payload_type: String,
    pub payload: Value,
    pub ttl_s: Option<u64>,
    pub priority: Option<u8>,
    /// The client's own id for this message (a UUID), for retries after a lost answer.
    pub message_id: Option<String>,
}

pub async fn queue(
    State(core): State<Core>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<OutboxRequest>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    core.auth.authorize_admin(bearer(&headers))?;
    // `Idempotency-Key: …` (any client string) or `message_id` (a UUID) in the body.
    let from_key = match headers.get("idempotency-key") {
        Some(v) => {
            let key = v
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    ApiError::bad_request("Idempotency-Key must be 1..255 visible ASCII characters")
                })?;
            Some(message_id_for_key(&core.cfg().node_id, key))
        }
        None => None,
    };
    let client_id = match (from_key, req.message_id) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::bad_request(
                "give either an Idempotency-Key header or a message_id, not both",
            ))
        }
        (a, b) => a.or(b),
    };
    let id = core
        .outbox
        .queue_outbox_as(
            &req.to,
            &req.payload_type,
            &req.payload,
            req.ttl_s,
            req.priority.unwrap_or(0),
            client_id.as_deref(),
        )
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"queued": true, "message_id": id})),
    ))
}
