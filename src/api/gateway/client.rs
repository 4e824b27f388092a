//! Client side of the gateway: operators and dashboards queue tool calls and commands
//! for nodes and follow them (the fleet's nodes and their state: `fleet.rs`). Thin: parse, check the token, call
//! `gateway::commands`, shape the answer.
//!
//! Scopes: `tool:<name>` for a tool call, `command:<type>` for a command, `read` for
//! status/events/nodes, `admin` for everything (inbox, revocations).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::auth::{as_named, node_address, require_caller};
use super::wire::{
    CommandBody, CommandQueued, MessageAnswer, ToolCallAnswer, ToolCallBody, ToolCallQueued,
};
use crate::api::json::JsonBody;
use crate::api::{ApiError, ApiResult};
use crate::gateway::commands::{self, Command};
use crate::gateway::commands::{ToolCall, ToolCallOutcome};
use crate::gateway::Gateway;
use crate::token::Need;

/// Default and maximum time a tool call waits for the node's answer.
pub const DEFAULT_WAIT_S: u64 = 10;
pub const MAX_WAIT_S: u64 = 60;

fn accepted(body: impl serde::Serialize) -> Response {
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// `POST /v1/tool_call`.
pub async fn tool_call(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<ToolCallBody>,
) -> ApiResult<Response> {
    let caller = require_caller(&gw, &headers, Need::Tool(&b.tool_name))?;
    let named = b.target.node_id.clone();
    let call = ToolCall {
        node_id: node_address(&caller, &b.target.node_id)?,
        tool_name: b.tool_name,
        tool_args: b.tool_args,
        job_id: b.job_id,
        ttl_s: b.ttl_s,
        wait: Duration::from_secs(b.wait_s.unwrap_or(DEFAULT_WAIT_S).min(MAX_WAIT_S)),
        token: b.token,
    };
    let outcome = gw.commands().tool_call(&caller.principal(), call).await;
    Ok(match as_named(&named, outcome)? {
        ToolCallOutcome::Answered {
            message_id,
            tool_name,
            result,
        } => Json(ToolCallAnswer::new(message_id, tool_name, result)).into_response(),
        ToolCallOutcome::Queued { message_id, job_id } => accepted(ToolCallQueued {
            job_id,
            message_id,
            ok: false,
            queued: true,
        }),
    })
}

/// `POST /v1/commands`.
pub async fn commands(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<CommandBody>,
) -> ApiResult<Response> {
    let scope = format!("command:{}", b.command_type);
    let caller = require_caller(&gw, &headers, Need::Scope(&scope))?;
    let sub = caller.principal();
    let message_id = client_message_id(&headers, &sub, b.message_id)?;
    let named = b.target.node_id.clone();
    let c = Command {
        node_id: node_address(&caller, &b.target.node_id)?,
        command_type: b.command_type,
        body: b.body,
        ttl_s: b.ttl_s,
        message_id,
    };
    let (message_id, expires) = as_named(&named, gw.commands().command(&sub, c).await)?;
    Ok(accepted(CommandQueued {
        expires_at_ms: expires,
        message_id,
        ok: false,
        queued: true,
    }))
}

/// The caller's own message id: from `Idempotency-Key` (any 1..255 visible ASCII
/// characters, scoped to the caller) or `message_id` in the body (a UUID), as the node's
/// `POST /v1/outbox` takes them; both only when they agree.
fn client_message_id(
    headers: &HeaderMap,
    subject: &str,
    in_body: Option<String>,
) -> ApiResult<Option<String>> {
    let from_key =
        crate::api::idempotency_key(headers)?.map(|key| commands::message_id_for_key(subject, key));
    if let Some(id) = &in_body {
        if uuid::Uuid::try_parse(id)
            .map(|u| u.hyphenated().to_string() != *id)
            .unwrap_or(true)
        {
            return Err(ApiError::bad_request(
                "message_id must be a lowercase hyphenated UUID",
            ));
        }
    }
    match (from_key, in_body) {
        // Two ids for one request: as if the key had been used for another request.
        (Some(a), Some(b)) if a != b => Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "idempotency_conflict",
            "the Idempotency-Key and the message_id name different commands: give one of them",
        )),
        (a, b) => Ok(a.or(b)),
    }
}

/// `GET /v1/messages/{id}`: status as on the node, plus `result` once it arrived.
pub async fn message(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageAnswer>> {
    let caller = require_caller(&gw, &headers, Need::Scope("read"))?;
    let view = gw.fleet().message_for(&caller, &id).await?;
    Ok(Json(MessageAnswer::new(id, view)))
}

/// `GET /v1/events` (SSE).
pub async fn events(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> ApiResult<Response> {
    let caller = super::events::Viewer::Client(require_caller(&gw, &headers, Need::Scope("read"))?);
    // A reconnecting EventSource sends the id of the last event it saw.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let rx = gw.events().subscribe();
    let backlog = match after {
        Some(after) => super::events::backlog(&gw, &caller, after).await,
        None => (Vec::new(), gw.events().last_id()),
    };
    Ok(super::events::sse_response(
        rx,
        backlog,
        caller,
        gw.shutdown().clone(),
    ))
}
