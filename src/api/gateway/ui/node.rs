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

use super::layout::{self, ago, at, dur, Frame};
use super::session::{ApiSession, PageSession};
use super::Console;
use crate::api::ApiError;
use crate::gateway::console::{NodePage, NODE_QUEUE_ROWS};
use crate::gateway::events::{Event, GatewayEvent};

#[derive(Debug, Default, Deserialize)]
pub struct NodeParams {
    /// After a command was queued: its message id.
    #[serde(default)]
    pub sent: String,
}

/// `GET /ui/nodes/{id}`.
pub async fn page(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(id): Path<String>,
    Query(p): Query<NodeParams>,
) -> Response {
    let last_event = c.gw.events().last_id();
    let n = match c.gw.fleet().node_page(&id).await {
        Ok(n) => n,
        Err(e) => {
            let e = ApiError::from(e);
            return layout::error_page(e.status, "No such node", &e.message);
        }
    };
    let r = &n.row;
    let main = html! {
        @if !p.sent.is_empty() {
            p.notice role="status" {
                "Command queued as " code { (p.sent) } ". "
                "Its state: " code { "GET /v1/messages/" (p.sent) }
            }
        }
        @if let Some((code, at_ms)) = &r.audit_alarm {
            p.alarm #audit-alarm role="alert" data-audit-alarm=(code) {
                "Audit alarm: the node's last audit upload was refused (" (code) ", " (ago(Some(*at_ms), n.now_ms)) "). "
                "Its log and the gateway's copy disagree: entries were lost or rewritten on the device, or someone else signs as it. "
                "The copy keeps the " (r.audit_size) " entries verified before; nothing was merged."
            }
        }
        h1 { (r.node_id) " " span class={ "state " (r.liveness) } #node-liveness data-liveness=(r.liveness) { (r.liveness) } }
        dl.facts {
            dt { "Since" } dd title=(at(r.since_ms)) { (ago(r.since_ms, n.now_ms)) }
            dt { "Last seen" } dd title=(at(r.last_seen_ms)) { (ago(r.last_seen_ms, n.now_ms)) }
            dt { "Polling now" } dd { @if r.polling { "yes" } @else { "no" } }
            dt { "Can connect" } dd { @if r.can_connect { "yes" } @else { "no (trusted without send)" } }
            dt { "Queued" } dd { (r.queue_depth) @if r.queue_depth > 0 { ", oldest " (dur(r.oldest_age_s)) } }
            dt { "Audit copy" } dd { (r.audit_size) " entries confirmed" }
        }
        section {
            h2 { "Queue" span.sub { " (first " (NODE_QUEUE_ROWS) ", in delivery order)" } }
            div.scroll #node-queue { (queue(&n)) }
        }
        @if s.session.admin {
            section.actions {
                h2 { "Send a command" }
                form method="post" action={ "/ui/nodes/" (r.node_id) "/commands" } {
                    input type="hidden" name="csrf" value=(s.session.csrf);
                    label for="command_type" { "Command type" }
                    input #command_type type="text" name="command_type" required maxlength="64" placeholder="e.g. setpoint";
                    label for="body" { "Body (JSON, optional)" }
                    textarea #body name="body" rows="3" spellcheck="false" placeholder="{\"value\": 42}" {}
                    label for="ttl_s" { "TTL in seconds (optional)" }
                    input #ttl_s type="number" name="ttl_s" min="1";
                    button type="submit" { "Queue command" }
                }
                h2 { "Call a tool" }
                form method="post" action={ "/ui/nodes/" (r.node_id) "/tool_calls" } {
                    input type="hidden" name="csrf" value=(s.session.csrf);
                    label for="tool_name" { "Tool" }
                    input #tool_name type="text" name="tool_name" required maxlength="64" placeholder="e.g. sysinfo";
                    label for="tool_args" { "Arguments (JSON, optional)" }
                    textarea #tool_args name="tool_args" rows="3" spellcheck="false" placeholder="{}" {}
                    button type="submit" { "Call" }
                }
                h2 { "Retire this node" }
                form.retire method="post" action={ "/ui/nodes/" (r.node_id) "/retire" } {
                    input type="hidden" name="csrf" value=(s.session.csrf);
                    p.note { "Its requests are refused from now on (node_revoked) and what is queued for it is refused; a reflashed device enrolls again with a new token." }
                    button type="submit" { "Retire" }
                }
            }
        } @else {
            p.note { "Read-only session: sign in with an admin token to send commands." }
        }
        section {
            h2 { "Recent results" }
            @if n.results.is_empty() { p.note { "None among the recent events." } }
            ul.events { @for e in &n.results { (event_item(e)) } }
        }
        section {
            h2 { "Recent events" span.sub { " (live)" } }
            ul.events #node-events { @for e in &n.events { (event_item(e)) } }
        }
    };
    layout::html_response(
        StatusCode::OK,
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

/// `GET /ui/nodes/{id}/queue`.
pub async fn queue_fragment(
    State(c): State<Arc<Console>>,
    _s: ApiSession,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let n = c.gw.fleet().node_page(&id).await?;
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

/// One event as the list shows it (the script writes live ones the same way).
fn event_item(e: &Event) -> Markup {
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
        // The kind's name says it all (`node_online`, …).
        _ => String::new(),
    };
    html! {
        li data-event-id=(e.id) {
            time { (at(Some(e.ts_ms))) } " "
            b { (e.event.name()) } " " (detail)
        }
    }
}
