use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::wire::{EnvelopeAccepted, EnvelopeDuplicate};
use super::Core;
use crate::api::ApiResult;
use crate::app::inbound::Received;

/// A signed envelope from a trusted peer (pushed directly, e.g. on a LAN).
pub async fn receive(State(core): State<Core>, body: Bytes) -> ApiResult<Response> {
    Ok(match core.inbound.receive_envelope(&body).await? {
        Received::Accepted { message_id } => (
            StatusCode::ACCEPTED,
            Json(EnvelopeAccepted {
                accepted: true,
                message_id,
            }),
        )
            .into_response(),
        Received::Duplicate { message_id } => Json(EnvelopeDuplicate {
            duplicate: true,
            message_id,
        })
        .into_response(),
    })
}
