use axum::extract::{Path, State};
use axum::Json;

use super::wire::MessageAnswer;
use super::Core;
use crate::api::{ApiError, ApiResult};

pub async fn status(
    State(core): State<Core>,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageAnswer>> {
    match core.inbox.message_status(&id)? {
        Some(s) => Ok(Json(MessageAnswer::new(id, s))),
        None => Err(ApiError::not_found("not_found", "no message with that id")),
    }
}
