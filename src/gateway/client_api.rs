//! Client side of the gateway (SPEC §6): operators and dashboards queue tool calls and
//! commands for nodes, follow them, and read what nodes sent upstream.
//!
//! Scopes: `tool:<name>` for a tool call, `command:<type>` for a command, `read` for
//! status/events/nodes, `admin` for everything (inbox, revocations).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rand_core::OsRng;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::auth::require;
use super::events::GatewayEvent;
use super::state::{
    job_key, store_error, Gateway, JobRecord, KV_JOBS, KV_REQUESTS, KV_RESULTS, Q_NODE,
};
use crate::api::json::JsonBody;
use crate::api::{ApiError, ApiResult};
use crate::envelope::{seal, IdentityDocument, SealParams};
use crate::store::{EnqueueOutcome, NewMessage, WriteOp};
use crate::sync::wire::TaskRequest;
use crate::telemetry::MessageEvent;
use crate::token::{issue, Claims, Need};

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
}

fn target_doc(gw: &Gateway, node_id: &str) -> Result<IdentityDocument, ApiError> {
    gw.enrolled(node_id).ok_or_else(|| {
        ApiError::not_found(
            "unknown_node",
            format!("{node_id:?} is not an enrolled node (add it with `outpost trust add --send`)"),
        )
    })
}

/// Seal `plaintext` to `to` and enqueue it durably (with any extra ops in the same
/// transaction). Answers only after the fsync.
async fn seal_and_enqueue(
    gw: &Gateway,
    to: &IdentityDocument,
    payload_type: &str,
    ttl_s: u64,
    plaintext: &impl serde::Serialize,
    message_id: &str,
    extra: Vec<WriteOp>,
) -> Result<u64, ApiError> {
    let now = gw.now_ms();
    let params = SealParams {
        message_id: message_id.to_string(),
        created_at_ms: now,
        expires_at_ms: now + ttl_s * 1000,
        payload_type: payload_type.to_string(),
        priority: 0,
    };
    let pt = serde_json::to_vec(plaintext).unwrap_or_default();
    let env = seal(&gw.keys, &gw.cfg.node_id, to, &params, &pt, &mut OsRng)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let live = gw.polling(&to.node_id);
    let mut ops = extra;
    ops.push(WriteOp::Enqueue(NewMessage {
        queue: Q_NODE.into(),
        peer: to.node_id.clone(),
        message_id: message_id.to_string(),
        payload_type: payload_type.to_string(),
        priority: 0,
        created_at_ms: now,
        expires_at_ms: params.expires_at_ms,
        body: env.to_json(),
        max_attempts: Some(gw.cfg.queue.max_attempts),
        dedup_until_ms: None,
    }));
    let out = gw.store.write(ops).await.map_err(store_error)?;
    if out.iter().any(|o| {
        matches!(
            o,
            crate::store::OpOutcome::Enqueued(EnqueueOutcome::Duplicate)
        )
    }) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "duplicate",
            "message id already used",
        ));
    }
    if live {
        gw.mark_live_sent(message_id);
    }
    MessageEvent {
        queue: Q_NODE,
        event: "enqueued",
        peer: &to.node_id,
        message_id,
        reason: None,
    }
    .emit(&gw.metrics);
    gw.publish(GatewayEvent::Queued {
        message_id: message_id.to_string(),
        node_id: to.node_id.clone(),
        payload_type: payload_type.to_string(),
        expires_at_ms: params.expires_at_ms,
    });
    gw.wake_node(&to.node_id);
    Ok(params.expires_at_ms)
}

fn result_of(gw: &Gateway, message_id: &str) -> Option<Value> {
    let b = gw.store.kv_get(KV_RESULTS, message_id).ok()??;
    serde_json::from_slice(&b).ok()
}

/// `POST /v1/tool_call`.
pub async fn tool_call(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<ToolCallBody>,
) -> ApiResult<Response> {
    // A name no node can have would wait in the queue for nothing.
    if !crate::tools::valid_tool_name(&b.tool_name) {
        return Err(ApiError::bad_request(
            "tool_name must match [a-z][a-z0-9_]{0,63}",
        ));
    }
    let sub = require(&gw, &headers, Need::Tool(&b.tool_name))?;
    let doc = target_doc(&gw, &b.target.node_id)?;
    let ttl_s = gw
        .cfg
        .queue
        .checked_ttl("TASK_REQUEST", b.ttl_s)
        .map_err(ApiError::from)?;
    let job_id = b
        .job_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    if !crate::tools::valid_job_id(&job_id) {
        return Err(ApiError::bad_request(
            "job_id must be 1..128 characters of [A-Za-z0-9._:-]",
        ));
    }
    // A caller's job id is bound to this node, tool and arguments (held under a lock so
    // that concurrent repeats queue one request).
    let key = job_key(&doc.node_id, &sub, &job_id);
    let args_sha = crate::audit::sha256_hex(&serde_json::to_vec(&b.tool_args).unwrap_or_default());
    let _held = gw.job_locks.lock(&key).await;
    if let Some(bytes) = gw.store.kv_get(KV_JOBS, &key).map_err(store_error)? {
        let rec: JobRecord = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::internal(format!("stored job record: {e}")))?;
        if rec.tool_name != b.tool_name || rec.args_sha256 != args_sha {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "job_id_conflict",
                format!(
                    "job_id {job_id:?} was already used by this caller for {} with other \
                     arguments or another tool; nothing was queued",
                    doc.node_id
                ),
            ));
        }
        // The same job again: answer what is known of it, queue nothing.
        return Ok(match result_of(&gw, &rec.message_id) {
            Some(r) => answered(&rec.message_id, &b.tool_name, r).into_response(),
            None => (
                StatusCode::ACCEPTED,
                Json(json!({"ok": false, "queued": true, "message_id": rec.message_id, "job_id": job_id})),
            )
                .into_response(),
        });
    }
    let message_id = uuid::Uuid::now_v7().to_string();
    let token = match b.token.clone() {
        Some(t) => t,
        None => {
            let claims = Claims::new(
                &gw.cfg.node_id,
                &sub,
                &doc.node_id,
                vec![format!("tool:{}", b.tool_name)],
                gw.now_ms(),
                ttl_s * 1000,
                &uuid::Uuid::now_v7().to_string(),
            )
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
            issue(&gw.keys, &claims).map_err(ApiError::internal)?
        }
    };
    let request = TaskRequest {
        job_id: Some(job_id.clone()),
        token: Some(token),
        tool_args: b.tool_args.clone(),
        tool_name: b.tool_name.clone(),
    };
    let wait = Duration::from_secs(b.wait_s.unwrap_or(DEFAULT_WAIT_S).min(MAX_WAIT_S));
    // Subscribe before enqueueing, so a fast answer cannot slip past us.
    let mut events = gw.bus.subscribe();
    let record = JobRecord {
        message_id: message_id.clone(),
        tool_name: b.tool_name.clone(),
        args_sha256: args_sha,
    };
    let map = vec![
        WriteOp::KvPut {
            ns: KV_JOBS.into(),
            key,
            value: serde_json::to_vec(&record).unwrap_or_default(),
        },
        WriteOp::KvPut {
            ns: KV_REQUESTS.into(),
            key: message_id.clone(),
            value: doc.node_id.clone().into_bytes(),
        },
    ];
    seal_and_enqueue(&gw, &doc, "TASK_REQUEST", ttl_s, &request, &message_id, map).await?;
    drop(_held);
    if gw.connected(&doc.node_id) && !wait.is_zero() {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(r) = result_of(&gw, &message_id) {
                return Ok(answered(&message_id, &b.tool_name, r).into_response());
            }
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok((_, GatewayEvent::Result { .. })) | Err(RecvError::Lagged(_)) => {}
                    Ok(_) => continue,
                    Err(RecvError::Closed) => break,
                },
                _ = tokio::time::sleep_until(deadline) => break,
                _ = gw.shutdown.cancelled() => break,
            }
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"ok": false, "queued": true, "message_id": message_id, "job_id": job_id})),
    )
        .into_response())
}

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
    require(&gw, &headers, Need::Scope(&scope))?;
    let doc = target_doc(&gw, &b.target.node_id)?;
    if b.command_type.is_empty() || b.command_type.len() > 64 {
        return Err(ApiError::bad_request(
            "command_type must be 1..=64 characters",
        ));
    }
    if !gw.cfg.queue.is_queueable(&b.command_type) && !gw.reachable_now(&doc.node_id) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "recipient_offline",
            format!(
                "{} holds no long-poll now and {:?} commands are not queued",
                doc.node_id, b.command_type
            ),
        ));
    }
    let ttl_s = gw
        .cfg
        .queue
        .checked_ttl(&b.command_type, b.ttl_s)
        .map_err(ApiError::from)?;
    let mut payload = match b.body {
        Value::Object(m) => Value::Object(m),
        Value::Null => json!({}),
        other => json!({"value": other}),
    };
    payload["command_type"] = Value::String(b.command_type.clone());
    let message_id = uuid::Uuid::now_v7().to_string();
    let expires =
        seal_and_enqueue(&gw, &doc, "COMMAND", ttl_s, &payload, &message_id, vec![]).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"ok": false, "queued": true, "message_id": message_id, "expires_at_ms": expires})),
    )
        .into_response())
}

/// `GET /v1/messages/{id}`: status as on the node, plus `result` once it arrived.
pub async fn message(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    require(&gw, &headers, Need::Scope("read"))?;
    let status = gw.store.status(&id).map_err(store_error)?;
    let result = result_of(&gw, &id);
    let mut out = match (status, &result) {
        (Some(s), _) => json!({
            "message_id": id, "state": s.state.as_str(), "node_id": s.peer,
            "attempts": s.attempts, "next_attempt_at": s.next_attempt_at_ms,
        }),
        (None, Some(_)) => {
            json!({"message_id": id, "state": "delivered", "attempts": 0, "next_attempt_at": 0})
        }
        (None, None) => return Err(ApiError::not_found("not_found", "no such message")),
    };
    if let Some(Some(reason)) = gw.store.status(&id).ok().flatten().map(|s| s.reason) {
        out["reason"] = Value::String(reason);
    }
    if let Some(r) = result {
        out["result"] = r;
    }
    Ok(Json(out))
}

/// `GET /v1/events` (SSE).
pub async fn events(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> ApiResult<Response> {
    require(&gw, &headers, Need::Scope("read"))?;
    Ok(super::events::sse_response(&gw.bus, gw.shutdown.clone()))
}

/// `GET /v1/nodes`.
pub async fn nodes(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> ApiResult<Json<Value>> {
    require(&gw, &headers, Need::Scope("read"))?;
    let now = gw.now_ms();
    let stats = gw.store.queue_stats(now).map_err(store_error)?;
    let mut out = Vec::new();
    let trust = gw.trust();
    for p in trust.list().filter(|p| p.doc.role == "node") {
        let id = &p.doc.node_id;
        let (live, last_seen) = gw.liveness(id);
        let st = stats.iter().find(|s| s.queue == Q_NODE && &s.peer == id);
        out.push(json!({
            "node_id": id,
            "last_seen": last_seen,
            "liveness": live.as_str(),
            "polling": gw.polling(id),
            "queue_depth": st.map(|s| s.depth).unwrap_or(0),
            "oldest_age_s": st.map(|s| s.oldest_age_s).unwrap_or(0),
            "audit_size": super::audit_sync::confirmed_size(&gw, id).await,
        }));
    }
    Ok(Json(json!({"nodes": out})))
}
