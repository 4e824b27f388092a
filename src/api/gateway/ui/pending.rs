//! The enrollments waiting for an operator, above the fleet table (`GET /ui`), and as a
//! fragment (`GET /ui/fleet/pending`) the script fetches again on `enrollment` events.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};

use super::fleet::{encode_segment, FleetParams};
use super::layout;
use super::session::ApiSession;
use super::Console;
use crate::api::ApiError;

/// `GET /ui/fleet/pending`: the enrollments waiting for an operator (fetched again when
/// an `enrollment` event arrives).
pub async fn pending_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Query(p): Query<FleetParams>,
) -> Result<Response, ApiError> {
    let viewer = super::tenant_switch::viewer(&s.session, &p.query());
    let mut pending = c.gw.enrollment().pending().await?;
    pending.retain(|r| viewer.sees(&r.node_id));
    Ok(layout::html_response(
        StatusCode::OK,
        pending_enrollments(&pending, &s.session, c.gw.now_ms()),
    ))
}

/// What the device said about itself (host name and serial first: what a delivery note
/// names), then its OS, agent version and the address it asked from.
fn device_cell(r: &crate::gateway::enroll::EnrollmentRecord) -> Markup {
    let d = r.device.as_ref();
    let first: Vec<&str> = [
        d.and_then(|d| d.hostname.as_deref()),
        d.and_then(|d| d.serial.as_deref()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let os = d.and_then(|d| d.os.as_deref());
    let agent = d.map(|d| format!("outpost {}", d.agent_version));
    let from = r.source.as_ref().map(|s| format!("from {s}"));
    let second: Vec<&str> = [os, agent.as_deref(), from.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    html! {
        @if first.is_empty() { span.muted { "not reported" } } @else {
            span.facts data-device-host=[d.and_then(|d| d.hostname.as_deref())]
                data-device-serial=[d.and_then(|d| d.serial.as_deref())] { (first.join(" · ")) }
        }
        @if !second.is_empty() { br; small.muted { (second.join(" · ")) } }
    }
}

/// Enrollments waiting for an operator (manual tokens, and re-keys of reflashed
/// devices: PROTOCOL §15), each row `data-enrollment="<node id>"` with approve and
/// reject for an admin session.
pub fn pending_enrollments(
    pending: &[crate::gateway::enroll::EnrollmentRecord],
    session: &crate::gateway::console::sessions::Session,
    now_ms: u64,
) -> Markup {
    html! {
        @if !pending.is_empty() {
            section.pending #pending-enrollments {
                h2 { "Waiting for approval" span.sub { " (" (pending.len()) ")" } }
                @if session.admin {
                    form #bulk-approve method="post" action="/ui/enrollments/approve" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        button type="submit" { "Approve selected" }
                        span.note { " Tick the devices you expect, then approve them at once." }
                    }
                }
                div.scroll {
                    table {
                        thead { tr {
                            @if session.admin { th { input #select-all type="checkbox" aria-label="Select all"; } }
                            th { "Node" } th { "Device" } th { "Kind" } th.wide { "Device key" } th.wide { "Token" } th.wide { "Asked" }
                            @if session.admin { th { "Decision" } }
                        } }
                        tbody {
                            @for r in pending {
                                tr data-enrollment=(r.node_id) data-kind=(r.kind.as_str()) {
                                    @if session.admin {
                                        td { input type="checkbox" form="bulk-approve" name="node" value=(r.node_id) aria-label={ "Select " (r.node_id) }; }
                                    }
                                    td.node { span.id title=(r.node_id) { (r.node_id) } }
                                    td.device { (device_cell(r)) }
                                    td { @if r.kind == crate::gateway::enroll::Kind::Rekey { "re-key (reflashed?)" } @else { "new" } }
                                    td.wide title=(r.node_sign_pk) { (r.node_sign_pk.chars().take(12).collect::<String>()) "…" }
                                    td.wide { (r.token_id) }
                                    td.wide { (super::layout::ago(Some(r.created_at_ms), now_ms)) }
                                    @if session.admin {
                                        td.decide {
                                            form method="post" action={ "/ui/enrollments/" (encode_segment(&r.node_id)) "/approve" } {
                                                input type="hidden" name="csrf" value=(session.csrf);
                                                button type="submit" name="decision" value="approve" { "Approve" }
                                            }
                                            form method="post" action={ "/ui/enrollments/" (encode_segment(&r.node_id)) "/reject" } {
                                                input type="hidden" name="csrf" value=(session.csrf);
                                                button.secondary type="submit" name="decision" value="reject" { "Reject" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
