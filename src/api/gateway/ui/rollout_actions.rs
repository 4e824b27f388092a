//! An admin's acts on a rollout: cancel (`POST /ui/rollouts/{id}/cancel`, its box
//! ticked to confirm) and resume (`POST /ui/rollouts/{id}/resume`), calling
//! `rollouts().cancel` / `.resume` — the flows behind `POST /v1/rollouts/{id}/cancel`
//! and `/resume` — on behalf of the session's token subject. Like every console
//! action: the Origin is checked before (`same_origin_posts`), then the CSRF token,
//! then admin. A refused act (409 `rollout_ended`, `rollout_running`) shows the
//! rollout's page again with the API's code and message.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::actions::refused;
use super::fleet::encode_segment;
use super::rollouts::render;
use super::session::{admin_refusal, csrf_refusal, PageSession};
use super::Console;
use crate::api::ApiError;

#[derive(Debug, Deserialize)]
pub struct ActForm {
    #[serde(default)]
    pub csrf: String,
    /// `yes` when the confirmation box is ticked (cancel only).
    #[serde(default)]
    pub confirm: String,
}

/// `POST /ui/rollouts/{id}/cancel`.
pub async fn cancel(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(id): Path<String>,
    Form(f): Form<ActForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    if f.confirm != "yes" {
        let why = "Not cancelled: tick the box to confirm.";
        return render(&c, &s, &id, StatusCode::BAD_REQUEST, None, Some(why)).await;
    }
    let out = c.gw.rollouts().cancel(&s.session.caller(), &id).await;
    answer(&c, &s, &id, out.map(|_| ()), "cancelled").await
}

/// `POST /ui/rollouts/{id}/resume`.
pub async fn resume(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(id): Path<String>,
    Form(f): Form<ActForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    let out = c.gw.rollouts().resume(&s.session.caller(), &id).await;
    answer(&c, &s, &id, out.map(|_| ()), "resumed").await
}

/// The rollout's page after the act `done`: a redirect to it, or (refused) the page
/// again with the API's status, code and message.
async fn answer(
    c: &Console,
    s: &PageSession,
    id: &str,
    out: Result<(), crate::gateway::error::GatewayError>,
    done: &str,
) -> Response {
    match out {
        Ok(()) => {
            tracing::info!(event = "console_rollout_act", subject = %s.session.subject, rollout = %id, done);
            Redirect::to(&format!("/ui/rollouts/{}?done={done}", encode_segment(id)))
                .into_response()
        }
        Err(e) => {
            let e = ApiError::from(e);
            if e.status == StatusCode::CONFLICT {
                let why = format!("Not {done} ({}) {}", e.code, e.message);
                render(c, s, id, e.status, None, Some(&why)).await
            } else {
                refused(e, &format!("Rollout not {done}"))
            }
        }
    }
}
