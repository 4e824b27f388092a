//! Starting a rollout (admin): the form (`GET /ui/rollouts/new?sel=…`, the selector
//! prefilled from the fleet page's) and its post (`POST /ui/rollouts`), which calls
//! `rollouts().create` — the flow behind `POST /v1/rollouts` — on behalf of the
//! session's token subject, with the form's own idempotency key (made when the form is
//! rendered, hidden in it): a form sent twice starts one rollout. A form that cannot be
//! read, or one the flow refuses (a bad selector, phases, action), comes back with what
//! was typed and the reason above it, in the API's words.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::actions::refused;
use super::fleet::encode_segment;
use super::rollouts::frame;
use super::session::{admin_refusal, csrf_refusal, PageSession};
use super::Console;
use crate::api::ApiError;
use crate::gateway::console::fleet_state::MAX_SELECTOR;
use crate::gateway::console::rollouts::NewRollout;
use crate::gateway::console::sessions::Session;

#[derive(Debug, Default, Deserialize)]
pub struct NewParams {
    #[serde(default)]
    pub sel: String,
}

/// `GET /ui/rollouts/new[?sel=…]` (admin).
pub async fn form_page(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Query(p): Query<NewParams>,
) -> Response {
    if let Some(r) = admin_refusal(&s.session) {
        return r;
    }
    let f = NewRollout {
        selector: p.sel.chars().take(MAX_SELECTOR).collect(),
        kind: "command".into(),
        ..NewRollout::default()
    };
    let key = uuid::Uuid::now_v7().to_string();
    render(&c, &s.session, &f, &key, None, StatusCode::OK)
}

#[derive(Debug, Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    pub csrf: String,
    /// The idempotency key the form was rendered with.
    #[serde(default)]
    pub key: String,
    #[serde(flatten)]
    pub input: NewRollout,
}

/// `POST /ui/rollouts`.
pub async fn create(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Form(f): Form<CreateForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    let again = |status: StatusCode, error: String| {
        render(&c, &s.session, &f.input, &f.key, Some(&error), status)
    };
    let spec = match f.input.spec() {
        Ok(spec) => spec,
        Err(e) => return again(StatusCode::BAD_REQUEST, format!("Not started: {e}.")),
    };
    let key = f.key.trim();
    let key = (!key.is_empty() && key.len() <= 255).then_some(key);
    let by = &s.session.subject;
    match c.gw.rollouts().create(&s.session.caller(), spec, key).await {
        Ok(created) => {
            let id = &created.rollout.rollout_id;
            tracing::info!(event = "console_rollout_started", subject = %by, rollout = %id, repeat = created.repeat);
            Redirect::to(&format!("/ui/rollouts/{}?done=started", encode_segment(id)))
                .into_response()
        }
        Err(e) => {
            let e = ApiError::from(e);
            if matches!(e.status.as_u16(), 400 | 409 | 422) {
                again(e.status, format!("Not started ({}) {}", e.code, e.message))
            } else {
                refused(e, "Rollout not started")
            }
        }
    }
}

fn render(
    c: &Console,
    s: &Session,
    f: &NewRollout,
    key: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let main = html! {
        p { a href="/ui/rollouts" { "‹ Rollouts" } }
        h1 { "Start a rollout" }
        @if let Some(e) = error { p.error #form-error role="alert" { (e) } }
        (form(f, key, &s.csrf))
    };
    let mut r = frame(
        c,
        s,
        "Start a rollout",
        "rollout-new",
        c.gw.events().last_id(),
        main,
    );
    *r.status_mut() = status;
    r
}

fn form(f: &NewRollout, key: &str, csrf: &str) -> Markup {
    let kind = |k: &str| f.kind == k;
    html! {
        form.rollout-form #rollout-form method="post" action="/ui/rollouts" {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="key" value=(key);
            label for="r-selector" { "Selector (PROTOCOL §16.2): the nodes it selects now" }
            input #r-selector type="text" name="selector" value=(f.selector) required spellcheck="false" autocomplete="off" placeholder="site=north";
            fieldset {
                legend { "Action" }
                label.check { input #kind-command type="radio" name="kind" value="command" checked[kind("command")]; " A command" }
                div.sub-fields {
                    label for="r-command-type" { "Command type" }
                    input #r-command-type type="text" name="command_type" value=(f.command_type) spellcheck="false" autocomplete="off" placeholder="reboot";
                    label for="r-body" { "Body (JSON, optional)" }
                    textarea #r-body name="body" rows="3" spellcheck="false" { (f.body) }
                    label for="r-ttl" { "TTL (e.g. 1h; optional)" }
                    input #r-ttl type="text" name="ttl_s" value=(f.ttl_s) autocomplete="off";
                }
                label.check { input #kind-tool type="radio" name="kind" value="tool_call" checked[kind("tool_call")]; " A tool call" }
                div.sub-fields {
                    label for="r-tool-name" { "Tool name" }
                    input #r-tool-name type="text" name="tool_name" value=(f.tool_name) spellcheck="false" autocomplete="off";
                    label for="r-tool-args" { "Arguments (JSON, optional)" }
                    textarea #r-tool-args name="tool_args" rows="3" spellcheck="false" { (f.tool_args) }
                }
                label.check { input #kind-desired type="radio" name="kind" value="desired" checked[kind("desired")]; " A desired-state merge patch" }
                div.sub-fields {
                    label for="r-patch" { "Merge patch (JSON object)" }
                    textarea #r-patch name="patch" rows="3" spellcheck="false" { (f.patch) }
                }
            }
            label for="r-phases" { "Phases: counts or shares of all targets, by the end of each (blank: all at once)" }
            input #r-phases type="text" name="phases" value=(f.phases) placeholder="1,10%,100%" autocomplete="off";
            label for="r-success" { "Success threshold % to start the next phase (blank: 100)" }
            input #r-success type="text" name="success_pct" value=(f.success_pct) inputmode="numeric" autocomplete="off";
            label for="r-error" { "Error threshold %: halt when this share failed (blank: never halts)" }
            input #r-error type="text" name="error_pct" value=(f.error_pct) inputmode="numeric" autocomplete="off" placeholder="10";
            label for="r-phase-wait" { "Start the next phase anyway after (e.g. 1h; optional)" }
            input #r-phase-wait type="text" name="phase_wait" value=(f.phase_wait) autocomplete="off";
            label for="r-deadline" { "Deadline (e.g. 7d, 12h; blank: 7d)" }
            input #r-deadline type="text" name="deadline" value=(f.deadline) autocomplete="off" placeholder="7d";
            label.check { input #r-dynamic type="checkbox" name="dynamic" checked[f.dynamic.is_some()]; " Dynamic: nodes that come to match join the last phase" }
            div.buttons { button #start-button type="submit" { "Start the rollout" } }
        }
    }
}
