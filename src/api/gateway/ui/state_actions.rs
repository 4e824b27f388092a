//! What an admin session changes of a node's fleet state (PROTOCOL §16): a label set
//! or removed (`node_states().change_labels`, the flow behind `PATCH
//! /v1/nodes/{id}/labels`) and its desired state written whole or by a merge patch,
//! with an optional `If-Match` (`write_desired`, behind `PUT`/`PATCH
//! /v1/nodes/{id}/desired`), each on behalf of the session's token subject. Like every
//! console action: the Origin is checked before (`same_origin_posts`), then the CSRF
//! token, then admin. A change the flow refuses comes back (400, 412 for a stale
//! If-Match) with what was typed and the API's error code and message above it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::actions::{refused, sent_back};
use super::fleet::encode_segment;
use super::node::FormKind;
use super::session::{admin_refusal, csrf_refusal, PageSession};
use super::Console;
use crate::api::ApiError;
use crate::gateway::console::fleet_state::{desired_write, label_change};
use crate::gateway::error::GatewayError;

#[derive(Debug, Deserialize)]
pub struct LabelForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: String,
    /// `set` or `remove` (the button pressed).
    #[serde(default)]
    pub op: String,
}

/// The flow's refusal as the API words it: `(bad_label) label key "Site": …`.
fn said(e: GatewayError) -> (StatusCode, String) {
    let e = ApiError::from(e);
    (e.status, format!("({}) {}", e.code, e.message))
}

/// `POST /ui/nodes/{id}/labels`.
pub async fn labels(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(node_id): Path<String>,
    Form(f): Form<LabelForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    let again = |error: String| {
        let values = vec![("key", f.key.clone()), ("value", f.value.clone())];
        sent_back(&c, &s, &node_id, FormKind::Labels, error, values)
    };
    let change = match label_change(&f.op, &f.key, &f.value) {
        Ok(change) => change,
        Err(e) => return again(format!("Labels not changed: {e}.")).await,
    };
    let caller = s.session.caller();
    let by = &caller.principal();
    let changed = async {
        caller.reaches(&node_id)?;
        c.gw.node_states()
            .change_labels(&node_id, &change, by)
            .await
    }
    .await;
    match changed {
        Ok(labels) => {
            tracing::info!(event = "console_labels_changed", subject = %by, node = %node_id, labels = labels.len());
            Redirect::to(&format!(
                "/ui/nodes/{}?labels=1#labels",
                encode_segment(&node_id)
            ))
            .into_response()
        }
        Err(e @ GatewayError::Label(_)) => again(format!("Labels not changed {}", said(e).1)).await,
        Err(e) => refused(e, "Labels not changed"),
    }
}

#[derive(Debug, Deserialize)]
pub struct DesiredForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub doc: String,
    /// `replace` (PUT) or `merge` (PATCH).
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub if_match: String,
}

/// `POST /ui/nodes/{id}/desired`.
pub async fn desired(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Path(node_id): Path<String>,
    Form(f): Form<DesiredForm>,
) -> Response {
    if let Some(r) = csrf_refusal(&s.session, &f.csrf).or_else(|| admin_refusal(&s.session)) {
        return r;
    }
    let (cr, sr, id) = (&*c, &s, node_id.as_str());
    let again = |status: StatusCode, error: String| {
        let values = vec![
            ("doc", f.doc.clone()),
            ("mode", f.mode.clone()),
            ("if_match", f.if_match.clone()),
        ];
        async move {
            let mut r = sent_back(cr, sr, id, FormKind::Desired, error, values).await;
            *r.status_mut() = status;
            r
        }
    };
    let (write, if_match) = match desired_write(&f.mode, &f.doc, &f.if_match) {
        Ok(w) => w,
        Err(e) => return again(StatusCode::BAD_REQUEST, format!("Not written: {e}.")).await,
    };
    let caller = s.session.caller();
    let by = &caller.principal();
    let written = async {
        caller.reaches(&node_id)?;
        c.gw.node_states()
            .write_desired(&node_id, &write, if_match, by)
            .await
    }
    .await;
    match written {
        Ok(version) => {
            tracing::info!(event = "console_desired_written", subject = %by, node = %node_id, version);
            Redirect::to(&format!(
                "/ui/nodes/{}?desired={version}#state-panel",
                encode_segment(&node_id)
            ))
            .into_response()
        }
        Err(e @ GatewayError::Document(_)) => {
            let (status, text) = said(e);
            again(status, format!("Not written {text}")).await
        }
        Err(e) => refused(e, "Desired state not written"),
    }
}
