//! Client side of the gateway: operators and dashboards queue tool calls and commands
//! for nodes, follow them, and list nodes. Thin: parse, check the token, call
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
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::require;
use crate::api::json::JsonBody;
use crate::api::{ApiError, ApiResult};
use crate::gateway::commands::{self, Command};
use crate::gateway::tool_calls::{ToolCall, ToolCallOutcome};
use crate::gateway::Gateway;
use crate::token::Need;

/// Default and maximum time a tool call waits for the node's answer.
pub const DEFAULT_WAIT_S: u64 = 10;
pub const MAX_WAIT_S: u64 = 60;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub node_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallBody {
    pub target: Target,
    pub tool_name: String,
    #[serde(default)]
    pub tool_args: Value,
    pub job_id: Option<String>,
    pub ttl_s: Option<u64>,
    pub wait_s: Option<u64>,
    pub token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandBody {
    pub target: Target,
    pub command_type: String,
    #[serde(default)]
    pub body: Value,
    pub ttl_s: Option<u64>,
    /// The caller's own id for this command (a UUID), for retries after a lost answer.
    pub message_id: Option<String>,
}

fn accepted(body: Value) -> Response {
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// `POST /v1/tool_call`.
pub async fn tool_call(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<ToolCallBody>,
) -> ApiResult<Response> {
    let sub = require(&gw, &headers, Need::Tool(&b.tool_name))?;
    let call = ToolCall {
        node_id: b.target.node_id,
        tool_name: b.tool_name,
        tool_args: b.tool_args,
        job_id: b.job_id,
        ttl_s: b.ttl_s,
        wait: Duration::from_secs(b.wait_s.unwrap_or(DEFAULT_WAIT_S).min(MAX_WAIT_S)),
        token: b.token,
    };
    Ok(match gw.commands().tool_call(&sub, call).await? {
        ToolCallOutcome::Answered {
            message_id,
            tool_name,
            result,
        } => answered(&message_id, &tool_name, result).into_response(),
        ToolCallOutcome::Queued { message_id, job_id } => accepted(
            json!({"ok": false, "queued": true, "message_id": message_id, "job_id": job_id}),
        ),
    })
}

/// The node's result in the node's own answer shape.
fn answered(message_id: &str, tool_name: &str, r: Value) -> Json<Value> {
    let mut out = json!({
        "ok": r.get("ok").and_then(|o| o.as_bool()).unwrap_or(false),
        "message_id": message_id,
        "job_id": r.get("job_id").cloned().unwrap_or(Value::Null),
        "tool_name": tool_name,
        "evidence": r.get("evidence").cloned().unwrap_or(Value::Null),
    });
    for k in ["result", "error"] {
        if let Some(v) = r.get(k) {
            out[k] = v.clone();
        }
    }
    Json(out)
}

/// `POST /v1/commands`.
pub async fn commands(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<CommandBody>,
) -> ApiResult<Response> {
    let scope = format!("command:{}", b.command_type);
    let sub = require(&gw, &headers, Need::Scope(&scope))?;
    let message_id = client_message_id(&headers, &sub, b.message_id)?;
    let c = Command {
        node_id: b.target.node_id,
        command_type: b.command_type,
        body: b.body,
        ttl_s: b.ttl_s,
        message_id,
    };
    let (message_id, expires) = gw.commands().command(&sub, c).await?;
    Ok(accepted(
        json!({"ok": false, "queued": true, "message_id": message_id, "expires_at_ms": expires}),
    ))
}

/// The caller's own message id: from `Idempotency-Key` (any 1..255 visible ASCII
/// characters, scoped to the caller) or `message_id` in the body (a UUID), as the node's
/// `POST /v1/outbox` takes them; both only when they agree.
fn client_message_id(
    headers: &HeaderMap,
    subject: &str,
    in_body: Option<String>,
) -> ApiResult<Option<String>> {
    let from_key = match headers.get("idempotency-key") {
        Some(v) => {
            let key = v
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    ApiError::bad_request("Idempotency-Key must be 1..255 visible ASCII characters")
                })?;
            Some(commands::message_id_for_key(subject, key))
        }
        None => None,
    };
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
) -> ApiResult<Json<Value>> {
    require(&gw, &headers, Need::Scope("read"))?;
    let view = gw.fleet().message(&id).await?;
    let mut out = match &view.status {
        Some(s) => json!({
            "message_id": id, "state": s.state.as_str(), "node_id": s.peer,
            "attempts": s.attempts, "next_attempt_at": s.next_attempt_at_ms,
        }),
        None => {
            json!({"message_id": id, "state": "delivered", "attempts": 0, "next_attempt_at": 0})
        }
    };
    if let Some(reason) = view.status.and_then(|s| s.reason) {
        out["reason"] = Value::String(reason);
    }
    if let Some(r) = view.result {
        out["result"] = r;
    }
    Ok(Json(out))
}

/// `GET /v1/events` (SSE).
pub async fn events(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> ApiResult<Response> {
    require(&gw, &headers, Need::Scope("read"))?;
    // A reconnecting EventSource sends the id of the last event it saw.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let rx = gw.events().subscribe();
    let backlog = match after {
        Some(after) => super::events::backlog(&gw, after).await,
        None => (Vec::new(), gw.events().last_id()),
    };
    Ok(super::events::sse_response(
        rx,
        backlog,
        gw.shutdown().clone(),
    ))
}

/// `GET /v1/nodes`.
pub async fn nodes(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> ApiResult<Json<Value>> {
    require(&gw, &headers, Need::Scope("read"))?;
    let nodes = gw.fleet().nodes().await?;
    Ok(Json(json!({ "nodes": nodes })))
}
