//! What an admin session can do: queue a command for a node (`gateway::commands::
//! command`, the flow behind `POST /v1/commands`), call a tool on it (`tool_call`,
//! behind `POST /v1/tool_call`), revoke a token by its id (`gateway::delivery::revoke`,
//! behind `POST /v1/revocations`), decide enrollments, one or several at once
//! (`enrollment().settle`, behind `POST /v1/enrollments/{id}/approve|reject`), and
//! retire a node once its id is typed again (`enrollment().revoke_node`). Each checks
//! the session's CSRF token, then admin, then hands over to the domain; its answer is a
//! redirect to the page that shows the outcome. A node form that cannot be sent as typed
//! comes back filled in (400); other refusals are a readable error page with the JSON
//! API's status.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use serde_json::Value;

use super::fleet::{encode, encode_segment, revoked_location};
use super::layout;
use super::node::{self, FormKind, NodeParams, Refused};
use super::session::{admin_refusal, csrf_refusal, PageSession};
use super::Console;
use crate::api::ApiError;
use crate::gateway::commands::Command;
use crate::gateway::commands::{ToolCall, ToolCallOutcome};
use crate::gateway::error::GatewayError;
use axum::http::StatusCode;

#[derive(Debug, Deserialize)]
pub struct CommandForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub command_type: String,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub ttl_s: String,
}

pub(super) fn refused(e: impl Into<ApiError>, title: &str) -> Response {
    let e = e.into();
    layout::error_page(e.status, title, &e.message)
}

/// An optional whole number of seconds; `Err` when something else was typed.
fn ttl(text: &str) -> Result<Option<u64>, ()> {
    match text.trim() {
        "" => Ok(None),
        t => t.parse::<u64>().map(Some).map_err(|_| ()),
    }
}

/// The node page again (400), its form `form` filled with what was typed and `error`
/// above it.
pub(super) async fn sent_back(
    c: &Console,
    s: &PageSession,
    node_id: &str,
    form: FormKind,
    error: String,
    values: Vec<(&'static str, String)>,
) -> Response {
    node::render(
        c,
        s,
        node_id,
        &NodeParams::default(),
        StatusCode::BAD_REQUEST,
        Some(Refused {
            form,
            error,
            values,
        }),
    )
    .await
}

/// `POST /ui/nodes/{id}/commands`.
pub async fn command(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(node_id): Path<String>,
    Form(f): Form<CommandForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    let again = |error: String| {
        let values = vec![
            ("command_type", f.command_type.clone()),
            ("body", f.body.clone()),
            ("ttl_s", f.ttl_s.clone()),
        ];
        sent_back(&c, &s, &node_id, FormKind::Command, error, values)
    };
    let body = match f.body.trim() {
        "" => Value::Null,
        text => match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return again(format!("Not queued: the body is not JSON ({e}).")).await,
        },
    };
    let Ok(ttl_s) = ttl(&f.ttl_s) else {
        return again("Not queued: the TTL must be a whole number of seconds.".into()).await;
    };
    let cmd = Command {
        node_id: node_id.clone(),
        command_type: f.command_type.trim().to_string(),
        body,
        ttl_s,
        message_id: None,
    };
    let caller = s.session.caller();
    let queued = async {
        caller.reaches(&node_id)?;
        c.gw.commands().command(&caller.principal(), cmd).await
    }
    .await;
    match queued {
        Err(GatewayError::BadRequest(m)) => again(format!("Not queued: {m}")).await,
        Ok((message_id, _expires)) => {
            tracing::info!(event = "console_command_queued", subject = %s.session.subject, node = %node_id, message_id = %message_id);
            Redirect::to(&format!(
                "/ui/nodes/{}?sent={}",
                encode_segment(&node_id),
                encode(&message_id)
            ))
            .into_response()
        }
        Err(e) => refused(e, "Command not queued"),
    }
}

#[derive(Debug, Deserialize)]
pub struct RevokeForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub jti: String,
}

/// `POST /ui/revocations`.
pub async fn revoke(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Form(f): Form<RevokeForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    if s.session.tenant.is_some() {
        // The revocation list is the gateway operator's (PROTOCOL §18.2).
        return refused(
            ApiError::not_found("not_found", "no such resource"),
            "Token not revoked",
        );
    }
    let jti = f.jti.trim();
    match c.gw.delivery().revoke(&s.session.subject, jti).await {
        Ok(r) => Redirect::to(&revoked_location(jti, r)).into_response(),
        Err(e) => refused(e, "Token not revoked"),
    }
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

/// `POST /ui/enrollments/{node_id}/approve` and `…/reject`: an operator's decision on a
/// pending enrollment (`gateway::enroll::settle`, behind the same JSON routes).
pub async fn settle(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path((node_id, decision)): Path<(String, String)>,
    Form(f): Form<CsrfForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    let approve = match decision.as_str() {
        "approve" => true,
        "reject" => false,
        _ => {
            return refused(
                ApiError::not_found("not_found", "no such decision"),
                "Not decided",
            )
        }
    };
    match settle_seen(&c, &s, &node_id, approve).await {
        Ok(_) => Redirect::to(&format!(
            "/ui?decided={}&node={}",
            if approve { "approved" } else { "rejected" },
            encode(&node_id)
        ))
        .into_response(),
        Err(e) => refused(e, "Enrollment not decided"),
    }
}

/// The decision on `node_id`'s enrollment when the session sees it; another tenant's
/// answers as one that is not pending.
async fn settle_seen(
    c: &Console,
    s: &PageSession,
    node_id: &str,
    approve: bool,
) -> Result<crate::gateway::enroll::EnrollmentRecord, GatewayError> {
    let caller = s.session.caller();
    if !caller.sees(node_id) {
        let what = if approve {
            "pending or rejected"
        } else {
            "pending"
        };
        return Err(GatewayError::NotFound(
            "not_found",
            format!("no enrollment of {node_id} is {what}"),
        ));
    }
    c.gw.enrollment()
        .settle(&caller.principal(), node_id, approve)
        .await
}

#[derive(Debug, Deserialize)]
pub struct RetireForm {
    #[serde(default)]
    pub csrf: String,
    /// The node id typed again: retiring cannot be undone.
    #[serde(default)]
    pub confirm: String,
}

/// `POST /ui/enrollments/approve`: approve every enrollment ticked on the fleet page
/// (fields `node`, repeated), each through the same flow as `POST
/// /v1/enrollments/{node_id}/approve`. One that is no longer pending (decided meanwhile,
/// elsewhere) is named in the notice; the others are approved.
pub async fn approve_many(
    State(c): State<Arc<Console>>,
    s: PageSession,
    // The pairs in order: `node` repeats, which a struct cannot hold.
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let mut csrf = String::new();
    let mut nodes: Vec<String> = Vec::new();
    for (k, v) in fields {
        match k.as_str() {
            "csrf" => csrf = v,
            "node" if !nodes.contains(&v) => nodes.push(v),
            _ => {}
        }
    }
    if let Some(r) = csrf_refusal(&s.session, &csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    if nodes.is_empty() {
        return refused(
            ApiError::bad_request("no device was ticked: tick the ones to approve"),
            "Nothing approved",
        );
    }
    let mut approved = 0usize;
    let mut not = Vec::new();
    for n in &nodes {
        match settle_seen(&c, &s, n, true).await {
            Ok(_) => approved += 1,
            Err(e) => {
                tracing::info!(event = "console_approval_refused", subject = %s.session.subject, node = %n, error = %e);
                not.push(n.as_str());
            }
        }
    }
    let mut to = format!("/ui?approved={approved}");
    if !not.is_empty() {
        to.push_str("&refused=");
        to.push_str(&encode(&not.join(", ")));
    }
    Redirect::to(&to).into_response()
}

/// `POST /ui/nodes/{id}/retire`: retire a node (`gateway::enroll::revoke_node`, behind
/// `POST /v1/node_revocations`), once the operator typed its id again. The audit entry
/// names the session's token subject.
pub async fn retire(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(node_id): Path<String>,
    Form(f): Form<RetireForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    if f.confirm.trim() != node_id {
        let error = format!(
            "Not retired: type the node id {node_id} exactly to confirm (retiring cannot be undone)."
        );
        let values = vec![("confirm", f.confirm.clone())];
        return sent_back(&c, &s, &node_id, FormKind::Retire, error, values).await;
    }
    let caller = s.session.caller();
    let retired = async {
        caller.reaches(&node_id)?;
        c.gw.enrollment()
            .revoke_node(&caller.principal(), &node_id)
            .await
    }
    .await;
    match retired {
        Ok(_) => {
            Redirect::to(&format!("/ui?decided=retired&node={}", encode(&node_id))).into_response()
        }
        Err(e) => refused(e, "Node not retired"),
    }
}

#[derive(Debug, Deserialize)]
pub struct ToolCallForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub tool_name: String,
    #[serde(default)]
    pub tool_args: String,
    #[serde(default)]
    pub ttl_s: String,
}

/// `POST /ui/nodes/{id}/tool_calls`: a tool call on the node through the flow behind
/// `POST /v1/tool_call` (the gateway mints the node a token for exactly that tool). It
/// does not wait: the node page shows the result when it arrives (its `result` event).
pub async fn tool_call(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(node_id): Path<String>,
    Form(f): Form<ToolCallForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    let again = |error: String| {
        let values = vec![
            ("tool_name", f.tool_name.clone()),
            ("tool_args", f.tool_args.clone()),
            ("ttl_s", f.ttl_s.clone()),
        ];
        sent_back(&c, &s, &node_id, FormKind::ToolCall, error, values)
    };
    let tool_args = match f.tool_args.trim() {
        "" => Value::Object(Default::default()),
        text => match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return again(format!("Not called: the arguments are not JSON ({e}).")).await,
        },
    };
    let Ok(ttl_s) = ttl(&f.ttl_s) else {
        return again("Not called: give up after a whole number of seconds.".into()).await;
    };
    let call = ToolCall {
        node_id: node_id.clone(),
        tool_name: f.tool_name.trim().to_string(),
        tool_args,
        job_id: None,
        ttl_s,
        wait: std::time::Duration::ZERO,
        token: None,
    };
    let caller = s.session.caller();
    let called = async {
        caller.reaches(&node_id)?;
        c.gw.commands().tool_call(&caller.principal(), call).await
    }
    .await;
    match called {
        Ok(outcome) => {
            let id = match outcome {
                ToolCallOutcome::Answered { message_id, .. }
                | ToolCallOutcome::Queued { message_id, .. } => message_id,
            };
            tracing::info!(event = "console_tool_call_queued", subject = %s.session.subject, node = %node_id, message_id = %id);
            Redirect::to(&format!(
                "/ui/nodes/{}?call={}#call-result",
                encode_segment(&node_id),
                encode(&id)
            ))
            .into_response()
        }
        Err(GatewayError::BadRequest(m)) => again(format!("Not called: {m}")).await,
        Err(e) => refused(e, "Tool call not queued"),
    }
}
