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

use super::auth::{as_named_at, node_address, require_caller};
use super::wire::{EndGraceBody, EnrollmentList, EnrollmentView, GraceEnded, RetireBody, Retired};
use crate::api::json::{JsonBody, QueryParams};
use crate::api::{ApiError, ApiResult};
use crate::enroll::{Hello, Standing};
use crate::gateway::caller::Caller;
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
    Ok(Json(
        gw.enrollment()
            .hello(peer.ip(), &q.node_id, &q.nonce)
            .await?,
    ))
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
    let caller = require_caller(&gw, &headers, Need::Scope("read"))?;
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
        enrollments: records
            .into_iter()
            .filter(|r| caller.sees(&r.node_id))
            .map(|mut r| {
                r.node_id = caller.shown(&r.node_id).to_string();
                r.into()
            })
            .collect(),
    }))
}

/// Approve (or reject) the enrollment of the node `caller` names `node_id`; another
/// tenant's answers as one that does not exist.
async fn settle(
    gw: &Gateway,
    caller: &Caller,
    node_id: &str,
    approve: bool,
) -> ApiResult<Json<EnrollmentView>> {
    let unknown = || {
        let what = if approve {
            "pending or rejected"
        } else {
            "pending"
        };
        ApiError::from(crate::gateway::error::GatewayError::NotFound(
            "not_found",
            format!("no enrollment of {node_id} is {what}"),
        ))
    };
    let address = caller.address(node_id).ok_or_else(unknown)?;
    let mut r = as_named_at(
        node_id,
        &address,
        gw.enrollment()
            .settle(&caller.principal(), &address, approve)
            .await,
    )?;
    r.node_id = node_id.to_string();
    Ok(Json(r.into()))
}

/// `POST /v1/enrollments/{node_id}/approve` (`admin`).
pub async fn approve(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(node_id): Path<String>,
) -> ApiResult<Json<EnrollmentView>> {
    let caller = require_caller(&gw, &headers, Need::Scope("admin"))?;
    settle(&gw, &caller, &node_id, true).await
}

/// `POST /v1/enrollments/{node_id}/reject` (`admin`).
pub async fn reject(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(node_id): Path<String>,
) -> ApiResult<Json<EnrollmentView>> {
    let caller = require_caller(&gw, &headers, Need::Scope("admin"))?;
    settle(&gw, &caller, &node_id, false).await
}

/// `POST /v1/node_revocations` (`admin`): retire a node.
pub async fn revoke_node(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<RetireBody>,
) -> ApiResult<Json<Retired>> {
    let caller = require_caller(&gw, &headers, Need::Scope("admin"))?;
    let address = node_address(&caller, &b.node_id)?;
    let ids = as_named_at(
        &b.node_id,
        &address,
        gw.enrollment()
            .revoke_node(&caller.principal(), &address)
            .await,
    )?;
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
    let caller = require_caller(&gw, &headers, Need::Scope("admin"))?;
    let address = node_address(&caller, &b.node_id)?;
    let ended = as_named_at(
        &b.node_id,
        &address,
        gw.rotations()
            .end_grace(&caller.principal(), &address)
            .await,
    )?;
    Ok(Json(GraceEnded {
        ok: true,
        node_id: b.node_id,
        ended,
    }))
}
