//! A node's fleet state on its page (PROTOCOL §16): the **labels**, **inventory** and
//! **state** panels (`#node-fleet-state`, fetched again as `GET
//! /ui/nodes/{id}/fleet_state` when a `labels_changed`, `desired_set`,
//! `state_reported` or `inventory_changed` event names the node), and, for an admin
//! session, the label editor and the desired-state form, which stay outside the live
//! part so nothing typed is replaced.
//!
//! Stable hooks: `#state-panel` carries `data-in-sync`, `data-desired-version`,
//! `data-reported-version` and `data-node-desired-version`; each label chip is
//! `li[data-label="<key>"]`; the documents are `#state-desired`, `#state-reported`,
//! `#state-delta`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};

use super::fleet::{encode_segment, sync_badge};
use super::layout::{self, ago, at};
use super::node::{FormKind, NodeParams, Refused};
use super::session::ApiSession;
use super::Console;
use crate::api::ApiError;
use crate::gateway::console::fleet_state::{inventory_facts, pretty_cut, Fact, SHOWN_JSON};
use crate::gateway::console::sessions::Session;
use crate::gateway::fleet::NodeDetail;

/// `GET /ui/nodes/{id}/fleet_state`: the three panels.
pub async fn fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    s.session.caller().reaches(&id)?;
    let d = c.gw.fleet().node(&id).await?;
    Ok(layout::html_response(
        StatusCode::OK,
        panels(&d, &s.session, c.gw.now_ms()),
    ))
}

/// What the page says after a label change or a desired write redirected to it.
pub fn notices(p: &NodeParams) -> Markup {
    html! {
        @if p.labels == "1" {
            p.notice role="status" { "Labels changed: the panel below shows them as the gateway holds them." }
        }
        @if let Ok(v) = p.desired.parse::<u64>() {
            p.notice role="status" { "Desired state written as version " (v) ": the node receives it on its next pull." }
        }
    }
}

/// The labels, inventory and state panels.
pub fn panels(d: &NodeDetail, s: &Session, now_ms: u64) -> Markup {
    html! {
        (labels(d, s))
        (inventory(d, now_ms))
        (state(d))
    }
}

fn labels(d: &NodeDetail, s: &Session) -> Markup {
    let node = &d.view.node_id;
    html! {
        section.labels #labels-panel {
            h2 #labels { "Labels" }
            @if d.view.labels.is_empty() { p.note #no-labels { "No labels." } }
            ul.chips #node-labels {
                @for (k, v) in d.view.labels.iter() {
                    li.chip data-label=(k) data-value=(v) {
                        code { (k) "=" (v) }
                        @if s.admin {
                            form.inline method="post" action={ "/ui/nodes/" (encode_segment(node)) "/labels" } {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="key" value=(k);
                                button.chip-remove type="submit" name="op" value="remove" title={ "Remove " (k) } aria-label={ "Remove label " (k) } { "×" }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn inventory(d: &NodeDetail, now_ms: u64) -> Markup {
    html! {
        section.inventory #inventory-panel {
            h2 { "Inventory"
                @if d.inventory.is_some() {
                    span.sub title=(at(d.inventory_at_ms)) { " (reported " (ago(d.inventory_at_ms, now_ms)) ")" }
                }
            }
            @match &d.inventory {
                None => { p.note #inventory-none { "Not reported yet: the node sends its inventory when it connects." } }
                Some(inv) => {
                    dl.facts #inventory {
                        @for f in inventory_facts(inv) {
                            @match f {
                                Fact::Text(name, v) => { dt { (name) } dd data-fact=(name) { (v) } }
                                Fact::When(name, ms) => { dt { (name) } dd data-fact=(name) title=(at(ms)) { (at(ms)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn state(d: &NodeDetail) -> Markup {
    let st = &d.state;
    let behind = st.node_desired_version < st.desired_version;
    html! {
        section.doc-state #state-panel data-in-sync=(st.in_sync) data-desired-version=(st.desired_version)
            data-reported-version=(st.reported_version) data-node-desired-version=(st.node_desired_version) {
            h2 { "State " (sync_badge(st.in_sync)) }
            p.versions {
                "Desired version " b #desired-version { (st.desired_version) }
                " · reported version " b #reported-version { (st.reported_version) }
                " · the node holds desired version " b #node-desired-version { (st.node_desired_version) }
                @if behind { " " span.note { "(not delivered yet)" } }
            }
            div.state-docs {
                div.doc { h3 { "Desired" } pre.result #state-desired { (pretty_cut(&st.desired, SHOWN_JSON)) } }
                div.doc { h3 { "Reported" } pre.result #state-reported { (pretty_cut(&st.reported, SHOWN_JSON)) } }
                div.doc { h3 { "Delta" span.sub { " (desired members reported otherwise)" } }
                    pre.result #state-delta { (pretty_cut(&st.delta, SHOWN_JSON)) } }
            }
        }
    }
}

/// The label editor and the desired-state form for an admin session (`refused`: the
/// form sent back, filled in, with why above it); a note for a read-only one.
pub fn editors(node_id: &str, s: &Session, f: Option<&Refused>) -> Markup {
    let typed = |form: FormKind, field: &str| f.map(|r| r.value(form, field)).unwrap_or("");
    let form_error = |form: FormKind| -> Markup {
        html! {
            @if let Some(r) = f.filter(|r| r.form == form) {
                p.error #form-error role="alert" { (r.error) }
            }
        }
    };
    let base = format!("/ui/nodes/{}", encode_segment(node_id));
    let replace = typed(FormKind::Desired, "mode") != "merge";
    html! {
        @if s.admin {
            section.editors #state-editors {
                h2 #label-editor { "Set or remove a label" }
                (form_error(FormKind::Labels))
                form #label-form method="post" action={ (base) "/labels" } {
                    input type="hidden" name="csrf" value=(s.csrf);
                    label for="label-key" { "Key" }
                    input #label-key type="text" name="key" required maxlength="128" autocomplete="off" spellcheck="false" placeholder="e.g. site" value=(typed(FormKind::Labels, "key"));
                    label for="label-value" { "Value (to set)" }
                    input #label-value type="text" name="value" maxlength="128" autocomplete="off" spellcheck="false" placeholder="e.g. north" value=(typed(FormKind::Labels, "value"));
                    div.buttons {
                        button #label-set type="submit" name="op" value="set" { "Set" }
                        " "
                        button.secondary #label-remove type="submit" name="op" value="remove" { "Remove key" }
                    }
                }
                h2 #desired-editor { "Write desired state" }
                (form_error(FormKind::Desired))
                form #desired-form method="post" action={ (base) "/desired" } {
                    input type="hidden" name="csrf" value=(s.csrf);
                    label for="desired-doc" { "Document or merge patch (a JSON object)" }
                    textarea #desired-doc name="doc" rows="4" spellcheck="false" placeholder="{\"fan\": {\"speed\": 3}}" { (typed(FormKind::Desired, "doc")) }
                    label for="desired-mode" { "How" }
                    select #desired-mode name="mode" {
                        option value="replace" selected[replace] { "Replace the whole document (PUT)" }
                        option value="merge" selected[!replace] { "Merge patch, RFC 7396 (PATCH)" }
                    }
                    label for="if-match" { "Only over version (If-Match, optional)" }
                    input #if-match type="number" name="if_match" min="0" value=(typed(FormKind::Desired, "if_match"));
                    button #desired-write type="submit" { "Write" }
                }
            }
        } @else {
            p.note { "Read-only session: labels and desired state are changed with an admin token." }
        }
    }
}
