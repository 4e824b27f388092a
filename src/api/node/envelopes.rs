use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::Core;
use crate::api::ApiResult;
use crate::app::inbound::Received;

/// A signed envelope from a trusted peer (pushed directly, e.g. on a LAN).
pub async fn receive(
    State(core): State<Core>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    match core.inbound.receive_envelope(&body).await? {
        Received::Accepted { message_id } => Ok((
            StatusCode::ACCEPTED,
            Json(json!({"accepted": true, "message_id": message_id})),
        )),
        Received::Duplicate { message_id } => Ok((
            StatusCode::OK,
            Json(json!({"duplicate": true, "message_id": message_id})),
        )),
    }
}
