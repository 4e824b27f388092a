//! `GET /v1/state` and `PATCH /v1/state/reported` (PROTOCOL §10.4).

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde_json::Value;

use super::wire::StateAnswer;
use super::Core;
use crate::api::json::JsonBody;
use crate::api::{bearer, ApiError, ApiResult};

pub async fn get(State(core): State<Core>, headers: HeaderMap) -> ApiResult<Json<StateAnswer>> {
    core.auth.authorize_scope(bearer(&headers), "state:read")?;
    Ok(Json(core.state.get()?.into()))
}

pub async fn patch_reported(
    State(core): State<Core>,
    headers: HeaderMap,
    JsonBody(patch): JsonBody<Value>,
) -> ApiResult<Json<StateAnswer>> {
    core.auth.authorize_scope(bearer(&headers), "state:write")?;
    let if_match = if_match(&headers)?;
    let docs = core.state.patch_reported(&patch, if_match).await?;
    if let Some(u) = core.outbox.upstream() {
        u.report_state();
    }
    Ok(Json(docs.into()))
}

/// `If-Match: <version>` (a decimal number; quotes, as an ETag has them, allowed).
fn if_match(headers: &HeaderMap) -> ApiResult<Option<u64>> {
    let Some(v) = headers.get(axum::http::header::IF_MATCH) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .map(|s| s.trim().trim_matches('"'))
        .and_then(|s| s.parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| ApiError::bad_request("If-Match must be a version number"))
}
