//! Rollouts (PROTOCOL §17): create (admin, `Idempotency-Key` honoured), list, one
//! rollout with its counts, its nodes, cancel and resume. Thin: parse, check the token,
//! call `gateway::rollout`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::auth::require_caller;
use super::wire::{RolloutList, RolloutNodes};
use crate::api::json::{JsonBody, QueryParams};
use crate::api::{ApiError, ApiResult};
use crate::gateway::rollout::plan::{NodeState, Spec};
use crate::gateway::rollout::RolloutView;
use crate::gateway::Gateway;
use crate::token::Need;

/// `POST /v1/rollouts`: 201 with the rollout (200: a repeat of the same request with
/// the same key).
pub async fn create(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Box<serde_json::value::RawValue>>,
) -> ApiResult<Response> {
    // The token first: a stranger learns nothing of what a spec must look like.
    let caller = require_caller(&gw, &headers, Need::Scope("admin"))?;
    let spec: Spec = crate::api::json::parse(body.get().as_bytes())?;
    let key = crate::api::idempotency_key(&headers)?;
    let c = gw.rollouts().create(&caller, spec, key).await?;
    let status = if c.repeat {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(c.rollout)).into_response())
}

/// `GET /v1/rollouts`.
pub async fn list(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
) -> ApiResult<Json<RolloutList>> {
    let caller = require_caller(&gw, &headers, Need::Scope("read"))?;
    Ok(Json(RolloutList {
        rollouts: gw.rollouts().list(&caller).await?,
    }))
}

/// `GET /v1/rollouts/{id}`.
pub async fn get(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<RolloutView>> {
    let caller = require_caller(&gw, &headers, Need::Scope("read"))?;
    Ok(Json(gw.rollouts().get(&caller, &id).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodesQuery {
    pub state: Option<String>,
}

/// `GET /v1/rollouts/{id}/nodes?state=`.
pub async fn nodes(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<NodesQuery>,
) -> ApiResult<Json<RolloutNodes>> {
    let caller = require_caller(&gw, &headers, Need::Scope("read"))?;
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(NodeState::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "state is one of pending, queued, delivered, succeeded, failed, expired, cancelled, not {s:?}"
            ))
        })?),
    };
    Ok(Json(RolloutNodes {
        nodes: gw.rollouts().nodes(&caller, &id, state).await?,
        rollout_id: id,
    }))
}

/// `POST /v1/rollouts/{id}/cancel` (admin).
pub async fn cancel(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<RolloutView>> {
    let caller = require_caller(&gw, &headers, Need::Scope("admin"))?;
    Ok(Json(gw.rollouts().cancel(&caller, &id).await?))
}

/// `POST /v1/rollouts/{id}/resume` (admin).
pub async fn resume(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<RolloutView>> {
    let caller = require_caller(&gw, &headers, Need::Scope("admin"))?;
    Ok(Json(gw.rollouts().resume(&caller, &id).await?))
}
