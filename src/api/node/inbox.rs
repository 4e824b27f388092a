use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;

use super::wire::{InboxAcked, InboxList};
use super::Core;
use crate::api::bearer;
use crate::api::json::QueryParams;
use crate::api::ApiResult;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxQuery {
    pub from: Option<String>,
    pub limit: Option<u64>,
}

pub async fn list(
    State(core): State<Core>,
    headers: HeaderMap,
    QueryParams(q): QueryParams<InboxQuery>,
) -> ApiResult<Json<InboxList>> {
    core.auth.authorize_admin(bearer(&headers))?;
    let messages = core
        .inbox
        .list(q.from.as_deref(), q.limit.unwrap_or(100).min(1000) as usize)?;
    Ok(Json(InboxList {
        messages: messages.into_iter().map(Into::into).collect(),
    }))
}

pub async fn ack(
    State(core): State<Core>,
    headers: HeaderMap,
    Path(message_id): Path<String>,
) -> ApiResult<Json<InboxAcked>> {
    core.auth.authorize_admin(bearer(&headers))?;
    core.inbox.ack(&message_id).await?;
    Ok(Json(InboxAcked {
        message_id,
        ok: true,
    }))
}
