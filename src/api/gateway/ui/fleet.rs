//! The fleet page (`GET /ui`) and its table body as a fragment (`GET /ui/fleet/rows`,
//! what the script fetches again when events say something changed).
//!
//! Stable hooks for scripts and tests: each node row is `<tr data-node-id="…"
//! data-liveness="online|stale|offline|dead|never">`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::{self, ago, at, dur, Frame};
use super::session::{ApiSession, PageSession};
use super::tenant_switch;
use super::Console;
use crate::api::ApiError;
use crate::fleet::BadSelector;
use crate::gateway::console::chart::{Chart, BUCKETS, BUCKET_MS};
use crate::gateway::console::fleet_state::MAX_SELECTOR;
use crate::gateway::console::{FleetPage, FleetQuery, FleetRow, SortKey, Totals};
use crate::gateway::error::GatewayError;
use crate::gateway::storage::Revoked;

/// The page's query string; anything unreadable falls back to the default.
#[derive(Debug, Default, Deserialize)]
pub struct FleetParams {
    #[serde(default)]
    pub q: String,
    /// A selector (PROTOCOL §16.2): only the nodes it selects are listed.
    #[serde(default)]
    pub sel: String,
    #[serde(default)]
    pub sort: String,
    #[serde(default)]
    pub dir: String,
    #[serde(default)]
    pub page: String,
    /// After a revocation: the token id, and whether it was revoked already.
    #[serde(default)]
    pub revoked: String,
    #[serde(default)]
    pub dup: String,
    /// After an enrollment decision or a retirement: what happened to which node.
    #[serde(default)]
    pub decided: String,
    #[serde(default)]
    pub node: String,
    /// After approving several at once: how many were approved, and those refused.
    #[serde(default)]
    pub approved: String,
    #[serde(default)]
    pub refused: String,
    /// The operator's tenant switcher (a tenant's session ignores it).
    #[serde(default)]
    pub tenant: String,
}

impl FleetParams {
    pub fn query(&self) -> FleetQuery {
        FleetQuery {
            filter: self.q.chars().take(200).collect(),
            selector: self.sel.chars().take(MAX_SELECTOR).collect(),
            sort: SortKey::parse(&self.sort).unwrap_or(SortKey::Node),
            descending: self.dir == "desc",
            page: self.page.parse().unwrap_or(1),
            tenant: self.tenant.chars().take(32).collect(),
        }
    }
}

/// `?q=…&sort=…&dir=…&page=…` for `q` with another sort or page.
fn href(q: &FleetQuery, sort: SortKey, descending: bool, page: usize) -> String {
    let mut s = format!(
        "/ui?sort={}&dir={}&page={page}",
        sort.as_str(),
        if descending { "desc" } else { "asc" }
    );
    if !q.filter.is_empty() {
        s.push_str("&q=");
        s.push_str(&encode(&q.filter));
    }
    if !q.selector.is_empty() {
        s.push_str("&sel=");
        s.push_str(&encode(&q.selector));
    }
    if !q.tenant.is_empty() {
        s.push_str("&tenant=");
        s.push_str(&encode(&q.tenant));
    }
    s
}

/// Percent-encoding for a query value (everything but unreserved characters).
pub fn encode(v: &str) -> String {
    encode_but(v, b"")
}

/// Percent-encoding for one path segment: `:` and `@` may stay (RFC 3986 `pchar`), so
/// a node's page is `/ui/nodes/node:a` wherever the link comes from.
pub fn encode_segment(v: &str) -> String {
    encode_but(v, b":@")
}

fn encode_but(v: &str, keep: &[u8]) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b if keep.contains(&b) => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /ui`.
pub async fn page(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Query(p): Query<FleetParams>,
) -> Response {
    let q = p.query();
    let viewer = tenant_switch::viewer(&s.session, &q);
    let last_event = c.gw.events().last_id();
    let fleet = match c.gw.fleet().fleet_page(&viewer, &q).await {
        Ok(f) => f,
        Err(e) => {
            let e = ApiError::from(e);
            return layout::error_page(e.status, "The fleet cannot be read", &e.message);
        }
    };
    // Enrollments waiting for an operator: shown to every session, decided by admins.
    let mut pending = c.gw.enrollment().pending().await.unwrap_or_else(|e| {
        tracing::warn!(event = "enrollments_unreadable", error = %e);
        Vec::new()
    });
    pending.retain(|r| viewer.sees(&r.node_id));
    let tenants = tenant_switch::names(&c.gw, &s.session).await;
    let notices = notices(&p, &s.session.subject);
    let main = html! {
        @for n in &notices { p.notice role="status" { (n) } }
        div #pending-slot { (super::pending::pending_enrollments(&pending, &s.session, c.gw.now_ms())) }
        div #fleet-summary { (summary(&fleet)) }
        section.fleet {
            (tenant_switch::switcher(&s.session, &tenants, &q))
            (filter_form(&q, fleet.selector_error.as_ref()))
            @if s.session.admin && fleet.selector_error.is_none() {
                p.start-rollout { a #start-rollout href={ "/ui/rollouts/new?sel=" (encode(&q.selector)) } { "Start a rollout for these nodes" } }
            }
            div.scroll {
                table #fleet {
                    thead { tr {
                        (th(&q, SortKey::Node, "Node", ""))
                        (th(&q, SortKey::Liveness, "Liveness", ""))
                        th.wide { "Since" }
                        th { "Polling" }
                        (th(&q, SortKey::LastSeen, "Last seen", "wide"))
                        (th(&q, SortKey::Queue, "Queued", "num"))
                        (th(&q, SortKey::Oldest, "Oldest", "num"))
                        (th(&q, SortKey::Audit, "Audit", "num wide"))
                        (th(&q, SortKey::Agent, "Agent", "wide"))
                        (th(&q, SortKey::Sync, "Sync", ""))
                    } }
                    tbody #fleet-rows { (rows(&fleet)) }
                }
            }
            (pager(&q, &fleet))
        }
        @if s.session.admin && s.session.tenant.is_none() {
            section.actions {
                h2 { "Revoke a token" }
                form method="post" action="/ui/revocations" {
                    input type="hidden" name="csrf" value=(s.session.csrf);
                    label for="jti" { "Token id (jti)" }
                    input #jti type="text" name="jti" required maxlength="128" autocomplete="off";
                    button type="submit" { "Revoke" }
                }
            }
        }
    };
    layout::html_response(
        StatusCode::OK,
        layout::page(
            Frame {
                title: "Fleet",
                page: "fleet",
                node: None,
                gateway: &c.gw.cfg().node_id,
                session: Some(&s.session),
                last_event: Some(last_event),
            },
            main,
        ),
    )
}

/// The filter and the selector (one form: either survives the other), and why a
/// selector is refused, in the API's words.
fn filter_form(q: &FleetQuery, selector_error: Option<&BadSelector>) -> Markup {
    html! {
        form.filter method="get" action="/ui" {
            input #filter type="search" name="q" value=(q.filter) placeholder="Filter nodes (id or state)" aria-label="Filter nodes";
            input #selector type="search" name="sel" value=(q.selector) placeholder="Selector, e.g. site=north,inventory.arch=aarch64" aria-label="Selector" spellcheck="false" autocomplete="off";
            input type="hidden" name="sort" value=(q.sort.as_str());
            input type="hidden" name="dir" value=(if q.descending { "desc" } else { "asc" });
            @if !q.tenant.is_empty() { input type="hidden" name="tenant" value=(q.tenant); }
            button type="submit" { "Filter" }
        }
        @if let Some(e) = selector_error {
            p.error #selector-error role="alert" data-code="bad_selector" data-pos=(e.pos) {
                "Not a selector (bad_selector): " (ApiError::from(GatewayError::from(e.clone())).message) ". Nothing is listed until it is corrected; see PROTOCOL §16.2 for the grammar."
            }
        }
    }
}

/// What the page says after an action redirected to it (a revocation, a decision, a
/// retirement by `subject`, approvals).
fn notices(p: &FleetParams, subject: &str) -> Vec<String> {
    let decided = match p.decided.as_str() {
        "approved" => Some(format!(
            "{} is enrolled: it connects on its next try.",
            p.node
        )),
        "rejected" => Some(format!(
            "{}'s enrollment was rejected: it stays out.",
            p.node
        )),
        "retired" => Some(format!(
            "{} is retired by {}: its requests are refused (node_revoked), its queue was \
             refused. The gateway's audit log records it under that name.",
            p.node, subject
        )),
        _ => None,
    };
    let approved = (!p.approved.is_empty()).then(|| {
        let mut n = if p.approved == "1" {
            "1 enrollment approved: it connects on its next try.".to_string()
        } else {
            format!(
                "{} enrollments approved: they connect on their next try.",
                p.approved
            )
        };
        if !p.refused.is_empty() {
            n.push_str(&format!(
                " Not approved (no longer pending): {}.",
                p.refused
            ));
        }
        n
    });
    let notice = (!p.revoked.is_empty()).then(|| {
        if p.dup == "1" {
            format!("Token {} was already revoked.", p.revoked)
        } else {
            format!(
                "Token {} is revoked: nodes refuse it once they fetch the list.",
                p.revoked
            )
        }
    });
    [notice, decided, approved].into_iter().flatten().collect()
}

/// `GET /ui/fleet/rows?…`: the table body for the same query.
pub async fn rows_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Query(p): Query<FleetParams>,
) -> Result<Response, ApiError> {
    let q = p.query();
    let fleet =
        c.gw.fleet()
            .fleet_page(&tenant_switch::viewer(&s.session, &q), &q)
            .await?;
    Ok(layout::html_response(StatusCode::OK, rows(&fleet)))
}

/// `GET /ui/fleet/summary?…`: the totals, the chart and the count of matching rows, as
/// the page shows them above the table (fetched again with the rows: liveness changes
/// with silence, and the totals follow it).
pub async fn summary_fragment(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    Query(p): Query<FleetParams>,
) -> Result<Response, ApiError> {
    let q = p.query();
    let fleet =
        c.gw.fleet()
            .fleet_page(&tenant_switch::viewer(&s.session, &q), &q)
            .await?;
    Ok(layout::html_response(StatusCode::OK, summary(&fleet)))
}

fn summary(fleet: &FleetPage) -> Markup {
    html! {
        (totals(&fleet.totals))
        (chart(&fleet.chart))
        p.count #fleet-count { (fleet.matched) " of " (fleet.totals.nodes) " nodes" }
    }
}

fn th(q: &FleetQuery, key: SortKey, label: &str, class: &str) -> Markup {
    let current = q.sort == key;
    let next_desc = current && !q.descending;
    let mark = match (current, q.descending) {
        (true, false) => " ▲",
        (true, true) => " ▼",
        _ => "",
    };
    html! {
        th class=(class) aria-sort=(if !current { "none" } else if q.descending { "descending" } else { "ascending" }) {
            a href=(href(q, key, next_desc, 1)) { (label) (mark) }
        }
    }
}

pub fn rows(f: &FleetPage) -> Markup {
    html! {
        @for r in &f.rows { (row(r, f.now_ms)) }
        @if f.rows.is_empty() {
            tr.empty { td colspan="10" {
                @if f.selector_error.is_some() { "The selector is malformed (above): no node is listed." }
                @else { "No node matches." }
            } }
        }
    }
}

fn row(r: &FleetRow, now_ms: u64) -> Markup {
    html! {
        tr data-node-id=(r.node_id) data-liveness=(r.liveness) {
            td.node { a.id href={ "/ui/nodes/" (r.node_id) } title=(r.node_id) { (r.node_id) }
                 @if !r.can_connect { " " span.tag title="trusted without send: it cannot pull" { "no send" } } }
            td { span class={ "state " (r.liveness) } { (r.liveness) } }
            td.wide title=(at(r.since_ms)) { (ago(r.since_ms, now_ms)) }
            td { @if r.polling { "yes" } @else { "no" } }
            td.wide title=(at(r.last_seen_ms)) { (ago(r.last_seen_ms, now_ms)) }
            td.num { (r.queue_depth) }
            td.num { @if r.queue_depth > 0 { (dur(r.oldest_age_s)) } @else { "—" } }
            @if let Some((code, _)) = &r.audit_alarm {
                td.num.wide.alarm data-audit-alarm=(code) title="the node's last audit upload was refused: its log and the gateway's copy disagree" { "⚠ " (code) " · " (r.audit_size) }
            } @else {
                td.num.wide { (r.audit_size) }
            }
            td.wide data-agent-version=(r.agent_version.as_deref().unwrap_or("")) { (r.agent_version.as_deref().unwrap_or("—")) }
            td { (sync_badge(r.in_sync)) }
        }
    }
}

fn totals(t: &Totals) -> Markup {
    html! {
        section.totals aria-label="Fleet totals" {
            div data-total="nodes" { b { (t.nodes) } " nodes" }
            div.online data-total="online" { b { (t.online) } " online" }
            div.stale data-total="stale" { b { (t.stale) } " stale" }
            div.offline data-total="offline" { b { (t.offline) } " offline" }
            div.dead data-total="dead" { b { (t.dead) } " dead" }
            div.never data-total="never" { b { (t.never) } " never seen" }
            div data-total="polling" { b { (t.polling) } " polling" }
            div data-total="queued" { b { (t.queued) } " queued" }
            div.out-of-sync data-total="out_of_sync" { b { (t.out_of_sync) } " out of sync" }
        }
    }
}

/// `in sync` or `out of sync`, as the fleet table and a node's state panel show it.
pub fn sync_badge(in_sync: bool) -> Markup {
    html! {
        // On a phone `sync` / `out` (the rest folds away with the wide columns).
        @if in_sync { span.sync.yes data-in-sync="true" title="in sync" { span.wide { "in " } "sync" } }
        @else { span.sync.no data-in-sync="false" title="out of sync" { "out" span.wide { " of sync" } } }
    }
}

fn pager(q: &FleetQuery, f: &FleetPage) -> Markup {
    html! {
        @if f.pages > 1 {
            nav.pager aria-label="Pages" {
                @if f.page > 1 { a href=(href(q, q.sort, q.descending, f.page - 1)) { "‹ Previous" } }
                span { "Page " (f.page) " of " (f.pages) }
                @if f.page < f.pages { a href=(href(q, q.sort, q.descending, f.page + 1)) { "Next ›" } }
            }
        }
    }
}

/// Grouped bars per 5-minute bucket, in inline SVG (no script, no style attribute).
fn chart(c: &Chart) -> Markup {
    const W: u64 = 360;
    const H: u64 = 100;
    let group = W / BUCKETS as u64;
    let bar = group / 4;
    let max = c.max().max(1);
    let height = |n: u64| n * (H - 10) / max;
    let series: [(&str, &[u64; BUCKETS]); 3] = [
        ("queued", &c.queued),
        ("delivered", &c.delivered),
        ("expired", &c.expired),
    ];
    html! {
        section.chart {
            h2 { "Last hour" span.sub { " (per " (BUCKET_MS / 60_000) " min; max " (c.max()) ")" } }
            @if c.partial { p.note { "Counted from " (at(Some(c.covered_from_ms))) ": the events this gateway holds in memory begin there." } }
            svg viewBox={ "0 0 " (W) " " (H + 14) } role="img" aria-label="Messages queued, delivered and expired per 5 minutes" {
                @for i in 0..BUCKETS {
                    @for (k, (name, values)) in series.iter().enumerate() {
                        @let n = values[i];
                        rect class=(name) x=((i as u64) * group + 2 + (k as u64) * bar) y=(H - height(n)) width=(bar) height=(height(n)) {
                            title { (n) " " (name) }
                        }
                    }
                }
                line.axis x1="0" y1=(H) x2=(W) y2=(H) {}
                text x="0" y=(H + 12) { "−60 min" }
                text x=(W - 24) y=(H + 12) { "now" }
            }
            p.legend {
                span.key.queued { "queued " (c.queued.iter().sum::<u64>()) }
                span.key.delivered { "delivered " (c.delivered.iter().sum::<u64>()) }
                span.key.expired { "expired " (c.expired.iter().sum::<u64>()) }
            }
        }
    }
}

/// The notice query of a revocation's redirect.
pub fn revoked_location(jti: &str, r: Revoked) -> String {
    let dup = matches!(r, Revoked::Duplicate);
    format!(
        "/ui?revoked={}{}",
        encode(jti),
        if dup { "&dup=1" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_survive_the_round_trip_through_links() {
        let q = FleetQuery {
            filter: "a&b c".into(),
            selector: "site in (a,b)".into(),
            sort: SortKey::Queue,
            descending: true,
            page: 2,
            tenant: "acme".into(),
        };
        assert_eq!(
            href(&q, q.sort, q.descending, 3),
            "/ui?sort=queue&dir=desc&page=3&q=a%26b%20c&sel=site%20in%20%28a%2Cb%29&tenant=acme"
        );
        let p = FleetParams {
            q: "x".into(),
            sort: "bogus".into(),
            page: "-1".into(),
            ..FleetParams::default()
        };
        assert_eq!(encode_segment("node:a/b c"), "node:a%2Fb%20c");
        assert_eq!(encode("node:a"), "node%3Aa");
        assert_eq!(p.query().sort, SortKey::Node);
        assert_eq!(p.query().page, 1);
    }

    #[test]
    fn each_row_carries_its_hooks_and_escapes_the_id() {
        let r = FleetRow {
            node_id: "node:a\"<b>".into(),
            liveness: "stale",
            since_ms: None,
            polling: false,
            can_connect: true,
            last_seen_ms: None,
            queue_depth: 0,
            oldest_age_s: 0,
            audit_size: 0,
            audit_alarm: None,
            agent_version: Some("<v>".into()),
            in_sync: false,
        };
        let h = row(&r, 0).into_string();
        assert!(
            h.starts_with(r#"<tr data-node-id="node:a&quot;&lt;b&gt;" data-liveness="stale">"#),
            "{h}"
        );
        assert!(h.contains(r#"data-agent-version="&lt;v&gt;""#), "{h}");
        assert!(h.contains(r#"data-in-sync="false""#), "{h}");
    }
}
