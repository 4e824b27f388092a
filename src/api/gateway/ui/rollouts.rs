//! The Rollouts pages (PROTOCOL §17): the list (`GET /ui/rollouts`, newest first) and
//! one rollout (`GET /ui/rollouts/{id}`: its state, why it halted or was cancelled, a
//! progress bar per phase, its failed and expired nodes with their errors, and for an
//! admin the Cancel and Resume forms), each with its live part as a fragment the script
//! fetches again on `rollout_progress`, `rollout_halted` and `rollout_completed`
//! (`/ui/rollouts/rows`, `/ui/rollouts/{id}/body`).
//!
//! Stable hooks: each list row is `<tr data-rollout-id="…" data-state="…">`; the
//! rollout's body is `#rollout-body[data-rollout-id][data-state]`, its phases
//! `li[data-phase]` (the current one `data-current`), its failed nodes
//! `#rollout-failed tr[data-node-id]`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;

use super::fleet::encode_segment;
use super::layout::{self, ago, at, Frame};
use super::session::{ApiSession, PageSession};
use super::Console;
use crate::api::ApiError;
use crate::gateway::console::rollouts::{bar, state_name, BAR_WIDTH};
use crate::gateway::console::sessions::Session;
use crate::gateway::rollout::plan::{Counts, NodeState, State as Rs};
use crate::gateway::rollout::{RolloutView, TargetView};

/// `GET /ui/rollouts`.
pub async fn list_page(State(c): State<Arc<Console>>, s: PageSession) -> Response {
    let last_event = c.gw.events().last_id();
    let list = match c.gw.rollouts().list(&s.session.caller()).await {
        Ok(l) => l,
        Err(e) => {
            let e = ApiError::from(e);
            return layout::error_page(e.status, "The rollouts cannot be read", &e.message);
        }
    };
    let main = html! {
        h1 { "Rollouts" }
        @if s.session.admin {
            p { a.button #new-rollout href="/ui/rollouts/new" { "Start a rollout" } " (or from the fleet page's selector)" }
        }
        div.scroll {
            table #rollouts {
                thead { tr {
                    th { "Rollout" } th { "State" } th { "Action" } th { "Selector" }
                    th { "Progress" } th.wide { "Created by" } th.wide { "Created" }
                } }
                tbody #rollout-rows { (rows(&list, c.gw.now_ms())) }
            }
        }
    };
    frame(&c, &s.session, "Rollouts", "rollouts", last_event, main)
}

/// `GET /ui/rollouts/rows`: the list's body.
pub async fn rows_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
) -> Result<Response, ApiError> {
    let list = c.gw.rollouts().list(&s.session.caller()).await?;
    Ok(layout::html_response(
        StatusCode::OK,
        rows(&list, c.gw.now_ms()),
    ))
}

pub(super) fn frame(
    c: &Console,
    s: &Session,
    title: &str,
    page: &str,
    last_event: u64,
    main: Markup,
) -> Response {
    layout::html_response(
        StatusCode::OK,
        layout::page(
            Frame {
                title,
                page,
                node: None,
                gateway: &c.gw.cfg().node_id,
                session: Some(s),
                last_event: Some(last_event),
            },
            main,
        ),
    )
}

fn rows(list: &[RolloutView], now_ms: u64) -> Markup {
    html! {
        @for r in list {
            @let state = state_name(r.state);
            tr data-rollout-id=(r.rollout_id) data-state=(state) {
                td.node { a.id href={ "/ui/rollouts/" (encode_segment(&r.rollout_id)) } title=(r.rollout_id) { (r.rollout_id) } }
                td { span class={ "state " (state) } { (state) } }
                td { (r.action) }
                td { code { (r.selector) } }
                td.progress { (progress(&r.counts)) " " span.sub { (r.counts.succeeded) "/" (r.counts.total) } }
                td.wide { (r.created_by) }
                td.wide title=(at(Some(r.created_at_ms))) { (ago(Some(r.created_at_ms), now_ms)) }
            }
        }
        @if list.is_empty() {
            tr.empty { td colspan="7" { "No rollout yet." } }
        }
    }
}

/// A bar of `c`'s shares (succeeded, failed, expired, cancelled, in flight, pending),
/// in inline SVG: the console's CSP allows no style attribute.
pub fn progress(c: &Counts) -> Markup {
    let label = format!(
        "{} of {} succeeded, {} failed, {} expired, {} cancelled, {} in flight, {} pending",
        c.succeeded,
        c.total,
        c.failed,
        c.expired,
        c.cancelled,
        c.queued + c.delivered,
        c.pending
    );
    html! {
        svg.bar viewBox={ "0 0 " (BAR_WIDTH) " 10" } preserveAspectRatio="none" role="img" aria-label=(label) {
            rect.empty x="0" y="0" width=(BAR_WIDTH) height="10" {}
            @for s in bar(c) {
                rect class=(s.kind) data-n=(s.n) x=(s.x) y="0" width=(s.width) height="10" { title { (s.n) " " (s.kind) } }
            }
        }
    }
}

/// The counts of `c` in words, each with its hook.
fn counts(c: &Counts) -> Markup {
    let parts = [
        ("succeeded", c.succeeded),
        ("failed", c.failed),
        ("expired", c.expired),
        ("cancelled", c.cancelled),
        ("in-flight", c.queued + c.delivered),
        ("pending", c.pending),
    ];
    html! {
        span.counts {
            span data-count="total" { (c.total) " nodes" }
            @for (k, n) in parts { " · " span class={ "key " (k) } data-count=(k) { (n) " " (k.replace('-', " ")) } }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct RolloutParams {
    /// After an act: `started`, `cancelled` or `resumed`.
    #[serde(default)]
    pub done: String,
}

/// `GET /ui/rollouts/{id}`.
pub async fn page(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(id): Path<String>,
    Query(p): Query<RolloutParams>,
) -> Response {
    let notice = match p.done.as_str() {
        "started" => Some("The rollout is started: its first phase is sent within a second."),
        "cancelled" => Some("The rollout is cancelled: what was not delivered is taken back."),
        "resumed" => Some("The rollout is resumed: failures count again from now."),
        _ => None,
    };
    render(&c, &s, &id, StatusCode::OK, notice, None).await
}

/// The rollout's page with `status`, a notice or a refused act's `error` above it.
pub(super) async fn render(
    c: &Console,
    s: &PageSession,
    id: &str,
    status: StatusCode,
    notice: Option<&str>,
    error: Option<&str>,
) -> Response {
    let last_event = c.gw.events().last_id();
    let (v, nodes) = match read(c, &s.session, id).await {
        Ok(r) => r,
        Err(e) => return layout::error_page(e.status, "No such rollout", &e.message),
    };
    let main = html! {
        p { a href="/ui/rollouts" { "‹ Rollouts" } }
        @if let Some(n) = notice { p.notice role="status" { (n) } }
        @if let Some(e) = error { p.error #act-error role="alert" { (e) } }
        (body(&v, &nodes, &s.session, c.gw.now_ms()))
    };
    let mut r = frame(c, &s.session, "Rollout", "rollout", last_event, main);
    *r.status_mut() = status;
    r
}

async fn read(
    c: &Console,
    session: &Session,
    id: &str,
) -> Result<(RolloutView, Vec<TargetView>), ApiError> {
    let caller = session.caller();
    let v = c.gw.rollouts().get(&caller, id).await?;
    let nodes =
        c.gw.rollouts()
            .nodes(&caller, id, None)
            .await?
            .into_iter()
            .filter(|t| matches!(t.state, NodeState::Failed | NodeState::Expired))
            // The console names every node by its address (its page's link).
            .map(|mut t: TargetView| {
                t.node_id = caller.address(&t.node_id).unwrap_or(t.node_id);
                t
            })
            .collect();
    Ok((v, nodes))
}

/// `GET /ui/rollouts/{id}/body`: the live part of the rollout's page.
pub async fn body_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (v, nodes) = read(&c, &s.session, &id).await?;
    Ok(layout::html_response(
        StatusCode::OK,
        inner(&v, &nodes, &s.session, c.gw.now_ms()),
    ))
}

fn body(v: &RolloutView, failed: &[TargetView], s: &Session, now_ms: u64) -> Markup {
    html! {
        div #rollout-body data-rollout-id=(v.rollout_id) data-state=(state_name(v.state)) {
            (inner(v, failed, s, now_ms))
        }
    }
}

fn inner(v: &RolloutView, failed: &[TargetView], s: &Session, now_ms: u64) -> Markup {
    let state = state_name(v.state);
    html! {
        h1 { "Rollout " code { (v.rollout_id) } " " span #rollout-state class={ "state " (state) } data-state=(state) { (state) } }
        @if let Some(d) = &v.detail { p #rollout-detail class={ "detail " (state) } { (d) } }
        dl.facts {
            dt { "Action" } dd { (v.action) }
            dt { "Selector" } dd { code { (v.selector) } }
            dt { "Created" } dd { (at(Some(v.created_at_ms))) " by " (v.created_by) }
            dt { "Deadline" } dd title=(at(Some(v.deadline_ms))) { (at(Some(v.deadline_ms))) }
            dt { "Dynamic" } dd { @if v.dynamic { "yes: nodes that come to match join its last phase" } @else { "no" } }
            @if v.ended_at_ms.is_some() { dt { "Ended" } dd { (at(v.ended_at_ms)) } }
        }
        section #rollout-total {
            h2 { "All nodes" }
            (progress(&v.counts))
            p { (counts(&v.counts)) }
        }
        section {
            h2 { "Phases" }
            ol.phases #rollout-phases {
                @for (i, p) in v.phases.iter().enumerate() {
                    li data-phase=(i) data-current=[(i == v.phase).then_some("true")] class=[(i == v.phase).then_some("current")] {
                        b { "Phase " (i + 1) } @if i == v.phase { " " span.tag.current { "current" } }
                        (progress(p))
                        (counts(p))
                    }
                }
            }
        }
        (failed_nodes(failed, now_ms))
        @if s.admin { (acts(v, s)) }
    }
}

fn failed_nodes(failed: &[TargetView], now_ms: u64) -> Markup {
    html! {
        section #rollout-failed-nodes {
            h2 { "Failed and expired nodes" span.sub { " (" (failed.len()) ")" } }
            @if failed.is_empty() {
                p.note { "None." }
            } @else {
                div.scroll { table #rollout-failed {
                    thead { tr { th { "Node" } th { "State" } th { "Error" } th { "Phase" } th.wide { "When" } } }
                    tbody {
                        @for t in failed {
                            tr data-node-id=(t.node_id) data-state=(t.state.as_str()) {
                                td.node { a.id href={ "/ui/nodes/" (encode_segment(&t.node_id)) } title=(t.node_id) { (t.node_id) } }
                                td { b.failed { (t.state.as_str()) } }
                                td.error-detail { code { (t.detail.as_deref().unwrap_or("—")) } }
                                td.num { (t.phase + 1) }
                                td.wide title=(at(Some(t.at_ms))) { (ago(Some(t.at_ms), now_ms)) }
                            }
                        }
                    }
                } }
            }
        }
    }
}

/// Resume (a halted rollout) and Cancel (one not ended; a box ticked to confirm).
fn acts(v: &RolloutView, s: &Session) -> Markup {
    let base = format!("/ui/rollouts/{}", encode_segment(&v.rollout_id));
    html! {
        @if v.state == Rs::Halted {
            section.actions #rollout-resume {
                h2 { "Resume" }
                p.note { "Sending goes on; the error threshold counts only the failures from now." }
                form method="post" action={ (base) "/resume" } {
                    input type="hidden" name="csrf" value=(s.csrf);
                    button #resume-button type="submit" { "Resume this rollout" }
                }
            }
        }
        @if matches!(v.state, Rs::Running | Rs::Halted) {
            section.danger-zone #rollout-cancel {
                h2 { "Cancel" }
                p.note { "Nothing more is sent, and every message of it not yet delivered is taken back. It cannot be undone." }
                form method="post" action={ (base) "/cancel" } {
                    input type="hidden" name="csrf" value=(s.csrf);
                    label.check { input #cancel-confirm type="checkbox" name="confirm" value="yes" required; " Yes, cancel this rollout" }
                    button.danger #cancel-button type="submit" { "Cancel the rollout" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> RolloutView {
        let counts = Counts {
            total: 2,
            failed: 1,
            pending: 1,
            ..Counts::default()
        };
        RolloutView {
            action: "command".into(),
            counts,
            created_at_ms: 0,
            created_by: "<i>eve</i>".into(),
            deadline_ms: 0,
            detail: Some("cancelled by <i>eve</i>".into()),
            dynamic: false,
            ended_at_ms: None,
            phase: 0,
            phases: vec![counts],
            rollout_id: "r\"<1>".into(),
            selector: "site=<script>".into(),
            state: Rs::Halted,
            tenant: None,
        }
    }

    #[test]
    fn rows_and_the_page_escape_what_operators_and_nodes_typed() {
        let h = rows(&[view()], 0).into_string();
        assert!(h.contains(r#"data-rollout-id="r&quot;&lt;1&gt;""#), "{h}");
        assert!(
            h.contains("site=&lt;script&gt;") && !h.contains("<script>"),
            "{h}"
        );
        assert!(
            h.contains("&lt;i&gt;eve&lt;/i&gt;") && !h.contains("<i>"),
            "{h}"
        );
        let failed = TargetView {
            at_ms: 0,
            detail: Some("<img src=x>".into()),
            message_id: None,
            node_id: "node:<a>".into(),
            phase: 0,
            state: NodeState::Failed,
        };
        let s = Session {
            subject: "ops".into(),
            jti: "j".into(),
            admin: true,
            tenant: None,
            created_ms: 0,
            expires_ms: 1,
            csrf: "c".into(),
        };
        let h = inner(&view(), &[failed], &s, 0).into_string();
        assert!(
            !h.contains("<img") && !h.contains("<i>") && !h.contains("<a>"),
            "{h}"
        );
        assert!(
            h.contains("&lt;img src=x&gt;") && h.contains("/ui/nodes/node:%3Ca%3E"),
            "{h}"
        );
        assert!(
            h.contains("resume-button") && h.contains("cancel-button"),
            "{h}"
        );
    }
}
