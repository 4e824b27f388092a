use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;

use super::wire::{OutboxQueued, OutboxRequest};
use super::Core;
use crate::api::json::JsonBody;
use crate::api::{bearer, idempotency_key};
use crate::api::{ApiError, ApiResult};
use crate::app::outbox::message_id_for_key;

pub async fn queue(
    State(core): State<Core>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<OutboxRequest>,
) -> ApiResult<(StatusCode, Json<OutboxQueued>)> {
    core.auth.authorize_admin(bearer(&headers))?;
    // `Idempotency-Key: …` (any client string) or `message_id` (a UUID) in the body.
    let from_key =
        idempotency_key(&headers)?.map(|key| message_id_for_key(&core.cfg().node_id, key));
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
        Json(OutboxQueued {
            message_id: id,
            queued: true,
        }),
    ))
}
