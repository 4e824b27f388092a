//! Gateway inbox (messages nodes sent upstream, other than results) and token revocation.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::auth::require;
use super::wire::{InboxAcked, InboxList, RevocationAdded, RevocationDuplicate, RevokeBody};
use crate::api::json::{JsonBody, QueryParams};
use crate::api::ApiResult;
use crate::gateway::storage::Revoked;
use crate::gateway::Gateway;
use crate::token::Need;

#[derive(Debug, Deserialize)]
pub struct InboxQuery {
    pub from: Option<String>,
}

/// `GET /v1/inbox?from=ID`: oldest first, decrypted, same shape as the node's inbox.
pub async fn inbox(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    QueryParams(q): QueryParams<InboxQuery>,
) -> ApiResult<Json<InboxList>> {
    require(&gw, &headers, Need::Scope("admin"))?;
    let messages = gw.inbox().list(q.from.as_deref()).await?;
    Ok(Json(InboxList { messages }))
}

/// `POST /v1/inbox/{message_id}/ack`.
pub async fn inbox_ack(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<InboxAcked>> {
    require(&gw, &headers, Need::Scope("admin"))?;
    let acked = gw.inbox().ack(&id).await?;
    Ok(Json(InboxAcked {
        acked,
        message_id: id,
        ok: true,
    }))
}

/// `POST /v1/revocations` (admin): add a token id to the list nodes fetch.
pub async fn revoke(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<RevokeBody>,
) -> ApiResult<Response> {
    let by = require(&gw, &headers, Need::Scope("admin"))?;
    Ok(match gw.delivery().revoke(&by, &b.jti).await? {
        Revoked::Duplicate => Json(RevocationDuplicate {
            duplicate: true,
            jti: b.jti,
            ok: true,
        })
        .into_response(),
        Revoked::Added { version } => (
            StatusCode::CREATED,
            Json(RevocationAdded {
                jti: b.jti,
                ok: true,
                version,
            }),
        )
            .into_response(),
    })
}
