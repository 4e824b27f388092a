//! A node's page (`GET /ui/nodes/{id}`): its liveness, queue (the head, in pull order),
//! audit copy size, recent events and results, and — for an admin session — the form
//! that sends it a command. `GET /ui/nodes/{id}/queue` is the queue table as a fragment
//! for the script.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;

use super::fleet::encode_segment;
use super::layout::{self, ago, at, dur, Frame};
use super::node_state;
use super::session::{ApiSession, PageSession};
use super::Console;
use crate::api::ApiError;
use crate::gateway::console::{NodePage, NODE_QUEUE_ROWS};
use crate::gateway::events::{Event, GatewayEvent};
use crate::gateway::fleet::MessageView;
use crate::store::MessageState;
use crate::sync::wire::TaskResult;

#[derive(Debug, Default, Deserialize)]
pub struct NodeParams {
    /// After a command was queued: its message id.
    #[serde(default)]
    pub sent: String,
    /// After a tool call was queued: its message id (the page follows its result).
    #[serde(default)]
    pub call: String,
    /// After a label change (`1`), after a desired write (its version).
    #[serde(default)]
    pub labels: String,
    #[serde(default)]
    pub desired: String,
}

/// Which form on the page a refusal belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormKind {
    Command,
    ToolCall,
    Retire,
    Labels,
    Desired,
}

/// A form sent back with what the operator typed and why it was refused: the page is
/// shown again with the form filled in, nothing lost.
#[derive(Debug, Clone)]
pub struct Refused {
    pub form: FormKind,
    pub error: String,
    /// Field name → what was typed.
    pub values: Vec<(&'static str, String)>,
}

impl Refused {
    pub fn value(&self, form: FormKind, field: &str) -> &str {
        if self.form != form {
            return "";
        }
        self.values
            .iter()
            .find(|(k, _)| *k == field)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }
}

/// `GET /ui/nodes/{id}`.
pub async fn page(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(id): Path<String>,
    Query(p): Query<NodeParams>,
) -> Response {
    render(&c, &s, &id, &p, StatusCode::OK, None).await
}

/// The node page, with `refused` (a form sent back, with `status`) when given.
pub async fn render(
    c: &Console,
    s: &PageSession,
    id: &str,
    p: &NodeParams,
    status: StatusCode,
    refused: Option<Refused>,
) -> Response {
    let last_event = c.gw.events().last_id();
    let n = match c.gw.fleet().node_page(&s.session.caller(), id).await {
        Ok(n) => n,
        Err(e) => {
            let e = ApiError::from(e);
            return layout::error_page(e.status, "No such node", &e.message);
        }
    };
    let d = match c.gw.fleet().node(id).await {
        Ok(d) => d,
        Err(e) => {
            let e = ApiError::from(e);
            return layout::error_page(e.status, "No such node", &e.message);
        }
    };
    let f = refused.as_ref();
    let r = &n.row;
    let main = html! {
        @if !p.sent.is_empty() {
            p.notice role="status" {
                "Command queued as " code { (p.sent) } ": its delivery appears under "
                i { "Recent events" } " below when the node takes it."
            }
        }
        @if !p.call.is_empty() {
            section.call #call-result data-message-id=(p.call) data-node=(r.node_id) {
                (call_box(&p.call, &CallState::Waiting))
            }
        }
        @if let Some((code, at_ms)) = &r.audit_alarm {
            p.alarm #audit-alarm role="alert" data-audit-alarm=(code) {
                "Audit alarm: the node's last audit upload was refused (" (code) ", " (ago(Some(*at_ms), n.now_ms)) "). "
                "Its log and the gateway's copy disagree: entries were lost or rewritten on the device, or someone else signs as it. "
                "The copy keeps the " (r.audit_size) " entries verified before; nothing was merged."
            }
        }
        (node_state::notices(p))
        div #node-summary { (facts(&n)) }
        div #node-fleet-state { (node_state::panels(&d, &s.session, n.now_ms)) }
        (node_state::editors(&r.node_id, &s.session, f))
        section {
            h2 { "Queue" span.sub { " (first " (NODE_QUEUE_ROWS) ", in delivery order)" } }
            div.scroll #node-queue { (queue(&n)) }
        }
        (actions(&r.node_id, s, f))
        section {
            h2 { "Recent results" }
            div #node-results { (results(&n)) }
        }
        section {
            h2 { "Recent events" span.sub { " (live)" } }
            ul.events #node-events { @for e in &n.events { (event_item(e)) } }
        }
    };
    layout::html_response(
        status,
        layout::page(
            Frame {
                title: &r.node_id,
                page: "node",
                node: Some(&r.node_id),
                gateway: &c.gw.cfg().node_id,
                session: Some(&s.session),
                last_event: Some(last_event),
            },
            main,
        ),
    )
}

/// The admin's forms (or the read-only note), `refused` filled back in.
fn actions(node_id: &str, s: &PageSession, f: Option<&Refused>) -> Markup {
    let typed = |form: FormKind, field: &str| f.map(|r| r.value(form, field)).unwrap_or("");
    let form_error = |form: FormKind| -> Markup {
        html! {
            @if let Some(r) = f.filter(|r| r.form == form) {
                p.error #form-error role="alert" { (r.error) }
            }
        }
    };
    html! {
        @if s.session.admin {
            section.actions {
                h2 #send-command { "Send a command" }
                (form_error(FormKind::Command))
                form method="post" action={ "/ui/nodes/" (encode_segment(node_id)) "/commands" } {
                    input type="hidden" name="csrf" value=(s.session.csrf);
                    label for="command_type" { "Command type" }
                    input #command_type type="text" name="command_type" required maxlength="64" placeholder="e.g. setpoint" value=(typed(FormKind::Command, "command_type"));
                    label for="body" { "Body (JSON, optional)" }
                    textarea #body name="body" rows="3" spellcheck="false" placeholder="{\"value\": 42}" { (typed(FormKind::Command, "body")) }
                    label for="ttl_s" { "TTL in seconds (optional)" }
                    input #ttl_s type="number" name="ttl_s" min="1" value=(typed(FormKind::Command, "ttl_s"));
                    button type="submit" { "Queue command" }
                }
                h2 #call-tool { "Call a tool" }
                (form_error(FormKind::ToolCall))
                form method="post" action={ "/ui/nodes/" (encode_segment(node_id)) "/tool_calls" } {
                    input type="hidden" name="csrf" value=(s.session.csrf);
                    label for="tool_name" { "Tool" }
                    input #tool_name type="text" name="tool_name" required maxlength="64" placeholder="e.g. sysinfo" value=(typed(FormKind::ToolCall, "tool_name"));
                    label for="tool_args" { "Arguments (JSON, optional)" }
                    textarea #tool_args name="tool_args" rows="3" spellcheck="false" placeholder="{}" { (typed(FormKind::ToolCall, "tool_args")) }
                    label for="call_ttl_s" { "Give up after, in seconds (optional)" }
                    input #call_ttl_s type="number" name="ttl_s" min="1" value=(typed(FormKind::ToolCall, "ttl_s"));
                    button type="submit" { "Call" }
                }
            }
            section.danger-zone {
                h2 #retire { "Retire this node" }
                (form_error(FormKind::Retire))
                form.retire method="post" action={ "/ui/nodes/" (encode_segment(node_id)) "/retire" } {
                    input type="hidden" name="csrf" value=(s.session.csrf);
                    p.note { "This cannot be undone. Its requests are refused from now on (node_revoked) and what is queued for it is refused; a reflashed device enrolls again with a new token. The gateway's audit log records that you (" (s.session.subject) ") did it." }
                    label for="retire-confirm" { "Type the node id " code { (node_id) } " to confirm" }
                    input #retire-confirm type="text" name="confirm" required autocomplete="off" spellcheck="false" data-expect=(node_id) value=(typed(FormKind::Retire, "confirm"));
                    button.danger #retire-button type="submit" { "Retire " (node_id) }
                }
            }
        } @else {
            p.note { "Read-only session: sign in with an admin token to send commands." }
        }
    }
}

/// Where a tool call started from the console is.
pub enum CallState {
    /// Not answered yet: queued, or taken by the node and running.
    Waiting,
    /// The node answered: the tool's result, or its error.
    Answered(TaskResult),
    /// It never ran: expired in the queue, or refused (the code says why).
    Ended { state: &'static str, code: String },
}

impl CallState {
    fn of(view: Option<MessageView>) -> Self {
        let Some(v) = view else {
            return CallState::Waiting;
        };
        if let Some(r) = v.result {
            return CallState::Answered(r);
        }
        match v.status {
            Some(st)
                if matches!(
                    st.state,
                    MessageState::Expired | MessageState::Dead | MessageState::Rejected
                ) =>
            {
                CallState::Ended {
                    state: st.state.as_str(),
                    code: st.reason.unwrap_or_else(|| st.state.as_str().to_string()),
                }
            }
            _ => CallState::Waiting,
        }
    }
}

/// `GET /ui/nodes/{id}/calls/{message_id}`: the box that shows a tool call's outcome
/// (the script fetches it when an event names the call).
pub async fn call_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Path((_id, message_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let caller = s.session.caller();
    let view = match c.gw.fleet().message_seen(&caller, &message_id).await {
        Ok(v) => Some(v),
        Err(crate::gateway::error::GatewayError::NotFound(..)) => None,
        Err(e) => return Err(e.into()),
    };
    Ok(layout::html_response(
        StatusCode::OK,
        call_box(&message_id, &CallState::of(view)),
    ))
}

/// A tool call's outcome: `data-state` is `waiting`, `ok` or `failed` (with `data-code`).
fn call_box(message_id: &str, st: &CallState) -> Markup {
    html! {
        @match st {
            CallState::Waiting => {
                div.notice data-state="waiting" role="status" {
                    "Tool call sent as " code { (message_id) } ". Waiting for the node's answer…"
                }
            }
            CallState::Answered(r) if r.ok => {
                div.notice data-state="ok" role="status" {
                    "The node answered " code { (message_id) } " (job " (r.job_id) "):"
                    pre.result { (pretty(r.result.as_ref())) }
                }
            }
            CallState::Answered(r) => {
                @let (code, msg) = r.error.as_ref().map(|e| (e.code.as_str(), e.message.as_str())).unwrap_or(("failed", ""));
                div.error data-state="failed" data-code=(code) role="alert" {
                    "The tool call " code { (message_id) } " failed: " b { (code) } @if !msg.is_empty() { " — " (msg) }
                }
            }
            CallState::Ended { state, code } => {
                div.error data-state="failed" data-code=(code) role="alert" {
                    "The tool call " code { (message_id) } " never ran: it " (state) " (" b { (code) } ")"
                    @if *state == "expired" { ", the node did not take it in time" }
                    "."
                }
            }
        }
    }
}

/// JSON as people read it, cut at 4 KiB.
fn pretty(v: Option<&serde_json::Value>) -> String {
    let mut s =
        serde_json::to_string_pretty(v.unwrap_or(&serde_json::Value::Null)).unwrap_or_default();
    if s.len() > 4096 {
        let mut cut = 4096;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("\n…");
    }
    s
}

/// *Recent results*: what each recent call answered.
fn results(n: &NodePage) -> Markup {
    html! {
        @if n.results.is_empty() { p.note { "None among the recent events." } }
        ul.events { @for (e, result) in &n.results { (result_item(e, result.as_ref())) } }
    }
}

/// `GET /ui/nodes/{id}/results`: *Recent results* (fetched again when a result
/// arrives).
pub async fn results_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let n = c.gw.fleet().node_page(&s.session.caller(), &id).await?;
    Ok(layout::html_response(StatusCode::OK, results(&n)))
}

/// One result under *Recent results*: what the tool answered, or its error's code.
fn result_item(e: &Event, r: Option<&TaskResult>) -> Markup {
    html! {
        li data-event-id=(e.id) {
            time { (at(Some(e.ts_ms))) } " "
            @match r {
                Some(r) if r.ok => { b { "ok" } " job " (r.job_id) pre.result { (pretty(r.result.as_ref())) } }
                Some(r) => {
                    b.failed { "failed" } " job " (r.job_id) ": "
                    @if let Some(err) = &r.error { b { (err.code) } " — " (err.message) }
                }
                None => { (event_item_detail(e)) }
            }
        }
    }
}

/// `GET /ui/nodes/{id}/facts`: the node's liveness and facts (fetched with its queue:
/// liveness follows silence, the queue depth follows deliveries and expiries).
pub async fn facts_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let n = c.gw.fleet().node_page(&s.session.caller(), &id).await?;
    Ok(layout::html_response(StatusCode::OK, facts(&n)))
}

fn facts(n: &NodePage) -> Markup {
    let r = &n.row;
    html! {
        h1 { (r.node_id) " " span class={ "state " (r.liveness) } #node-liveness data-liveness=(r.liveness) { (r.liveness) } }
        dl.facts {
            dt { "Since" } dd title=(at(r.since_ms)) { (ago(r.since_ms, n.now_ms)) }
            dt { "Last seen" } dd title=(at(r.last_seen_ms)) { (ago(r.last_seen_ms, n.now_ms)) }
            dt { "Polling now" } dd { @if r.polling { "yes" } @else { "no" } }
            dt { "Can connect" } dd { @if r.can_connect { "yes" } @else { "no (trusted without send)" } }
            dt { "Queued" } dd data-fact="queued" { (r.queue_depth) @if r.queue_depth > 0 { ", oldest " (dur(r.oldest_age_s)) } }
            dt { "Audit copy" } dd { (r.audit_size) " entries confirmed" }
        }
    }
}

/// `GET /ui/nodes/{id}/queue`.
pub async fn queue_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let n = c.gw.fleet().node_page(&s.session.caller(), &id).await?;
    Ok(layout::html_response(StatusCode::OK, queue(&n)))
}

fn queue(n: &NodePage) -> Markup {
    html! {
        table #queue data-depth=(n.row.queue_depth) {
            thead { tr {
                th { "Message" } th { "Type" } th.num { "Age" } th.num { "TTL left" } th.num { "Attempts" }
            } }
            tbody {
                @for m in &n.queued {
                    tr data-message-id=(m.message_id) {
                        td { code { (m.message_id) } }
                        td { (m.payload_type) }
                        td.num { (dur(n.now_ms.saturating_sub(m.created_at_ms) / 1000)) }
                        td.num { (dur(m.expires_at_ms.saturating_sub(n.now_ms) / 1000)) }
                        td.num { (m.attempts) @if m.max_attempts > 0 { " / " (m.max_attempts) } }
                    }
                }
                @if n.queued.is_empty() { tr.empty { td colspan="5" { "Nothing waits for this node." } } }
            }
        }
    }
}

fn event_item_detail(e: &Event) -> Markup {
    html! { b { (e.event.name()) } " " (detail_of(e)) }
}

/// One event as the list shows it (the script writes live ones the same way).
fn event_item(e: &Event) -> Markup {
    html! {
        li data-event-id=(e.id) {
            time { (at(Some(e.ts_ms))) } " "
            b { (e.event.name()) } " " (detail_of(e))
        }
    }
}

fn detail_of(e: &Event) -> String {
    let detail = match &e.event {
        GatewayEvent::Queued {
            message_id,
            payload_type,
            ..
        } => format!("{payload_type} {message_id}"),
        GatewayEvent::Delivered {
            message_id,
            was_stored,
            ..
        } => format!(
            "{message_id}{}",
            if *was_stored { " (from the queue)" } else { "" }
        ),
        GatewayEvent::Expired {
            message_id, reason, ..
        } => format!("{message_id}: {reason}"),
        GatewayEvent::Rejected {
            message_id, code, ..
        } => format!("{message_id}: {code}"),
        GatewayEvent::Dead { message_id, .. } => message_id.clone(),
        GatewayEvent::Result {
            message_id,
            job_id,
            ok,
            ..
        } => format!(
            "{} job {job_id} for {message_id}",
            if *ok { "ok" } else { "failed" }
        ),
        GatewayEvent::LabelsChanged { by, .. } => format!("by {by}"),
        GatewayEvent::DesiredSet { version, by, .. } => format!("version {version} by {by}"),
        GatewayEvent::StateReported {
            version, in_sync, ..
        } => format!(
            "version {version}, {}",
            if *in_sync { "in sync" } else { "out of sync" }
        ),
        GatewayEvent::InventoryChanged { agent_version, .. } => format!("agent {agent_version}"),
        // The kind's name says it all (`node_online`, …).
        _ => String::new(),
    };
    detail
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
