//! Enrollment routes (PROTOCOL §15): the node-facing exchange (`GET`/`POST /v1/enroll`,
//! unauthenticated, budgeted per client address: a node has no credential yet) and the operator's
//! (`admin` scope): pending enrollments, approve / reject, retiring a node.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::auth::require;
use super::wire::{EndGraceBody, EnrollmentList, EnrollmentView, GraceEnded, RetireBody, Retired};
use crate::api::json::{JsonBody, QueryParams};
use crate::api::{ApiError, ApiResult};
use crate::enroll::{Hello, Standing};
use crate::gateway::Gateway;
use crate::token::Need;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloQuery {
    pub node_id: String,
    pub nonce: String,
}

/// `GET /v1/enroll?node_id=&nonce=`: the gateway's identity document and its time.
pub async fn hello(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    QueryParams(q): QueryParams<HelloQuery>,
) -> ApiResult<Json<Hello>> {
    Ok(Json(gw.enrollment().hello(
        peer.ip(),
        &q.node_id,
        &q.nonce,
    )?))
}

/// `POST /v1/enroll`: 200 enrolled, 202 pending (both signed), or a refusal code.
pub async fn enroll(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    JsonBody(req): JsonBody<crate::enroll::Request>,
) -> ApiResult<Response> {
    let a = gw.enrollment().enroll(peer.ip(), req).await?;
    let status = match a.standing {
        Standing::Enrolled => StatusCode::OK,
        Standing::Pending => StatusCode::ACCEPTED,
    };
    Ok((status, Json(a.answer)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// `pending` (default) or `all`.
    pub state: Option<String>,
}

/// `GET /v1/enrollments?state=pending|all` (`read`).
pub async fn list(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    QueryParams(q): QueryParams<ListQuery>,
) -> ApiResult<Json<EnrollmentList>> {
    require(&gw, &headers, Need::Scope("read"))?;
    let records = match q.state.as_deref() {
        None | Some("pending") => gw.enrollment().pending().await?,
        Some("all") => gw.enrollment().records().await?,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "state must be pending or all, not {other:?}"
            )))
        }
    };
    Ok(Json(EnrollmentList {
        enrollments: records.into_iter().map(Into::into).collect(),
    }))
}

/// `POST /v1/enrollments/{node_id}/approve` (`admin`).
pub async fn approve(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(node_id): Path<String>,
) -> ApiResult<Json<EnrollmentView>> {
    let operator = require(&gw, &headers, Need::Scope("admin"))?;
    Ok(Json(
        gw.enrollment()
            .settle(&operator, &node_id, true)
            .await?
            .into(),
    ))
}

/// `POST /v1/enrollments/{node_id}/reject` (`admin`).
pub async fn reject(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(node_id): Path<String>,
) -> ApiResult<Json<EnrollmentView>> {
    let operator = require(&gw, &headers, Need::Scope("admin"))?;
    Ok(Json(
        gw.enrollment()
            .settle(&operator, &node_id, false)
            .await?
            .into(),
    ))
}

/// `POST /v1/node_revocations` (`admin`): retire a node.
pub async fn revoke_node(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<RetireBody>,
) -> ApiResult<Json<Retired>> {
    let operator = require(&gw, &headers, Need::Scope("admin"))?;
    let ids = gw.enrollment().revoke_node(&operator, &b.node_id).await?;
    Ok(Json(Retired {
        ok: true,
        node_id: b.node_id,
        refused_messages: ids,
    }))
}

/// `POST /v1/node_grace_ends` (`admin`): the retired key of a node's last rotation is
/// refused from now on (it was compromised).
pub async fn end_grace(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<EndGraceBody>,
) -> ApiResult<Json<GraceEnded>> {
    let operator = require(&gw, &headers, Need::Scope("admin"))?;
    let ended = gw.rotations().end_grace(&operator, &b.node_id).await?;
    Ok(Json(GraceEnded {
        ok: true,
        node_id: b.node_id,
        ended,
    }))
}
