//! The fleet's nodes and their state (PROTOCOL §16.6): the listing (with a selector),
//! one node's detail, its labels, its desired state and its state as both sides hold
//! it. Thin: parse, check the token, call `gateway::fleet` or `gateway::node_state`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use super::auth::{as_named, node_address, require_caller};
use super::wire::{DesiredWritten, LabelsAnswer, NodeList};
use crate::api::json::{JsonBody, QueryParams};
use crate::api::{ApiError, ApiResult};
use crate::fleet::{LabelChange, Selector, Write};
use crate::gateway::fleet::NodeDetail;
use crate::gateway::node_state::StateView;
use crate::gateway::Gateway;
use crate::token::Need;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodesQuery {
    pub selector: Option<String>,
}

/// `GET /v1/nodes?selector=`.
pub async fn nodes(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    QueryParams(q): QueryParams<NodesQuery>,
) -> ApiResult<Json<NodeList>> {
    let caller = require_caller(&gw, &headers, Need::Scope("read"))?;
    let selector = q
        .selector
        .as_deref()
        .map(Selector::parse)
        .transpose()
        .map_err(crate::gateway::error::GatewayError::from)?;
    let nodes = gw.fleet().nodes_for(&caller, selector.as_ref()).await?;
    Ok(Json(NodeList { nodes }))
}

/// `GET /v1/nodes/{id}`.
pub async fn node(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<NodeDetail>> {
    let caller = require_caller(&gw, &headers, Need::Scope("read"))?;
    Ok(Json(gw.fleet().node_for(&caller, &id).await?))
}

/// `PATCH /v1/nodes/{id}/labels` (admin).
pub async fn labels(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(change): JsonBody<LabelChange>,
) -> ApiResult<Json<LabelsAnswer>> {
    let caller = require_caller(&gw, &headers, Need::Scope("admin"))?;
    let address = node_address(&caller, &id)?;
    let labels = as_named(
        &id,
        gw.node_states()
            .change_labels(&address, &change, &caller.principal())
            .await,
    )?;
    Ok(Json(LabelsAnswer {
        labels,
        node_id: id,
    }))
}

/// `If-Match: <version>` (bare or quoted like an ETag); absent is `None`.
pub fn if_match(headers: &HeaderMap) -> ApiResult<Option<u64>> {
    let Some(v) = headers.get(axum::http::header::IF_MATCH) else {
        return Ok(None);
    };
    let text = v.to_str().unwrap_or("").trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    match text.parse::<u64>() {
        Ok(n) if !text.starts_with('+') => Ok(Some(n)),
        _ => Err(ApiError::bad_request(
            "If-Match must be a document version (a decimal number)",
        )),
    }
}

async fn write_desired(
    gw: &Gateway,
    headers: &HeaderMap,
    id: String,
    write: Write,
) -> ApiResult<Json<DesiredWritten>> {
    let caller = require_caller(gw, headers, Need::Scope("admin"))?;
    let expected = if_match(headers)?;
    let address = node_address(&caller, &id)?;
    let version = as_named(
        &id,
        gw.node_states()
            .write_desired(&address, &write, expected, &caller.principal())
            .await,
    )?;
    Ok(Json(DesiredWritten {
        node_id: id,
        version,
    }))
}

/// `PUT /v1/nodes/{id}/desired` (admin): the whole document.
pub async fn desired_put(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(doc): JsonBody<Value>,
) -> ApiResult<Json<DesiredWritten>> {
    write_desired(&gw, &headers, id, Write::Replace(doc)).await
}

/// `PATCH /v1/nodes/{id}/desired` (admin): an RFC 7396 merge patch.
pub async fn desired_patch(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(patch): JsonBody<Value>,
) -> ApiResult<Json<DesiredWritten>> {
    write_desired(&gw, &headers, id, Write::Merge(patch)).await
}

/// `GET /v1/nodes/{id}/state`.
pub async fn state(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<StateView>> {
    let caller = require_caller(&gw, &headers, Need::Scope("read"))?;
    Ok(Json(gw.fleet().node_for(&caller, &id).await?.state))
}
