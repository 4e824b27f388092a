//! The operator's web console (`/ui`, docs/CONSOLE.md): server-rendered HTML over the
//! same domain code as the JSON API — the read model `gateway::console`, the command
//! flow `gateway::commands`, revocation `gateway::delivery::revoke` — behind a sign-in with a
//! gateway token.
//!
//! Security at this edge, for every route below:
//! - a session cookie (`HttpOnly; SameSite=Strict; Path=/ui`, `Secure` with TLS) names
//!   a server-side session ([`session`]); pages without one redirect to the sign-in,
//!   fragments and the event stream answer 401;
//! - every POST must come from this origin (`Origin` equal to the request's host,
//!   checked before anything else runs) and carry the session's CSRF token (the
//!   sign-in: a per-browser nonce cookie instead, as there is no session yet);
//! - every answer carries a strict Content-Security-Policy (scripts and styles only
//!   from `/ui/assets`, nothing inline), `nosniff`, `Referrer-Policy: same-origin`
//!   (no referrer to any other site; see [`security_headers`] for why not
//!   `no-referrer`) and `no-store`.
//!
//! Layout: [`session`] (cookies, the session extractors, CSRF) · [`layout`] (the page
//! frame, formatting) · [`login`] · [`fleet`] · [`pending`] (enrollments waiting) ·
//! [`node`] · [`node_state`] (labels, inventory and state panels, their forms) ·
//! [`actions`] · [`state_actions`] (labels, desired state) · [`rollouts`] (the list and
//! one rollout) · [`rollout_form`] (starting one) · [`rollout_actions`] (cancel,
//! resume) · [`live`] (SSE).

pub mod actions;
pub mod fleet;
pub mod layout;
pub mod live;
pub mod login;
pub mod node;
pub mod node_state;
pub mod pending;
pub mod rollout_actions;
pub mod rollout_form;
pub mod rollouts;
pub mod session;
pub mod state_actions;
pub mod tenant_switch;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::gateway::console::sessions::Sessions;
use crate::gateway::console::sign_in::SignInLimits;
use crate::gateway::Gateway;

/// What the console's handlers share: the gateway, its console sessions and the
/// sign-in budgets.
pub struct Console {
    pub gw: Arc<Gateway>,
    pub sessions: Sessions,
    pub sign_ins: SignInLimits,
}

impl Console {
    /// Answers over TLS: cookies get `Secure`, origins are `https://`.
    pub fn tls(&self) -> bool {
        self.gw.cfg().tls.is_some()
    }
}

pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// The `/ui` routes, merged into the gateway's router.
pub fn router<S: Clone + Send + Sync + 'static>(gw: Arc<Gateway>) -> Router<S> {
    let console = Arc::new(Console {
        gw,
        sessions: Sessions::new(),
        sign_ins: SignInLimits::new(),
    });
    Router::new()
        .route("/ui", get(fleet::page))
        .route("/ui/fleet/rows", get(fleet::rows_fragment))
        .route("/ui/fleet/summary", get(fleet::summary_fragment))
        .route("/ui/fleet/pending", get(pending::pending_fragment))
        .route("/ui/nodes/{id}", get(node::page))
        .route("/ui/nodes/{id}/queue", get(node::queue_fragment))
        .route("/ui/nodes/{id}/facts", get(node::facts_fragment))
        .route("/ui/nodes/{id}/results", get(node::results_fragment))
        .route("/ui/nodes/{id}/fleet_state", get(node_state::fragment))
        .route("/ui/nodes/{id}/labels", post(state_actions::labels))
        .route("/ui/nodes/{id}/desired", post(state_actions::desired))
        .route(
            "/ui/nodes/{id}/calls/{message_id}",
            get(node::call_fragment),
        )
        .route("/ui/nodes/{id}/commands", post(actions::command))
        .route("/ui/revocations", post(actions::revoke))
        .route("/ui/enrollments/approve", post(actions::approve_many))
        .route("/ui/enrollments/{id}/{decision}", post(actions::settle))
        .route("/ui/nodes/{id}/retire", post(actions::retire))
        .route("/ui/nodes/{id}/tool_calls", post(actions::tool_call))
        .route(
            "/ui/rollouts",
            get(rollouts::list_page).post(rollout_form::create),
        )
        .route("/ui/rollouts/rows", get(rollouts::rows_fragment))
        .route("/ui/rollouts/new", get(rollout_form::form_page))
        .route("/ui/rollouts/{id}", get(rollouts::page))
        .route("/ui/rollouts/{id}/body", get(rollouts::body_fragment))
        .route("/ui/rollouts/{id}/cancel", post(rollout_actions::cancel))
        .route("/ui/rollouts/{id}/resume", post(rollout_actions::resume))
        .route("/ui/events", get(live::events))
        .route("/ui/login", get(login::form).post(login::sign_in))
        .route("/ui/logout", post(login::sign_out))
        .route("/ui/assets/console.css", get(css))
        .route("/ui/assets/console.js", get(js))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            same_origin_posts,
        ))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(console)
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// The headers every console answer carries.
async fn security_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: under it browsers send `Origin: null` with every form POST
    // (the Fetch standard's "append a request Origin header"), and the Origin check
    // above could not tell this console's forms from a sandboxed frame's. `same-origin`
    // sends no referrer to any other origin either.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// Whether `origin` is this console's own: the scheme it serves and the request's host.
pub fn same_origin(origin: Option<&str>, host: Option<&str>, tls: bool) -> bool {
    let (Some(origin), Some(host)) = (origin, host) else {
        return false;
    };
    let scheme = if tls { "https" } else { "http" };
    !host.is_empty() && origin.eq_ignore_ascii_case(&format!("{scheme}://{host}"))
}

/// Every POST must name this console as its origin (browsers send `Origin` with every
/// POST): a form on another site, or a request without it, is refused before any
/// handler runs.
async fn same_origin_posts(State(c): State<Arc<Console>>, req: Request, next: Next) -> Response {
    if req.method() == Method::POST {
        let h = req.headers();
        let text = |n: header::HeaderName| h.get(n).and_then(|v| v.to_str().ok());
        if !same_origin(text(header::ORIGIN), text(header::HOST), c.tls()) {
            tracing::warn!(
                event = "console_post_refused",
                reason = "Origin missing or not this console's",
                origin = text(header::ORIGIN).unwrap_or("-"),
            );
            return layout::error_page(
                StatusCode::FORBIDDEN,
                "Refused",
                "This form did not come from this console (its Origin header is missing or \
                 names another site). Reload the page and try again.",
            );
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::same_origin;

    #[test]
    fn only_this_scheme_and_host_is_the_same_origin() {
        assert!(same_origin(
            Some("http://127.0.0.1:8787"),
            Some("127.0.0.1:8787"),
            false
        ));
        assert!(same_origin(
            Some("https://gw.example"),
            Some("gw.example"),
            true
        ));
        assert!(!same_origin(
            Some("http://gw.example"),
            Some("gw.example"),
            true
        ));
        assert!(!same_origin(
            Some("http://evil.example"),
            Some("gw.example"),
            false
        ));
        assert!(!same_origin(
            Some("http://gw.example.evil"),
            Some("gw.example"),
            false
        ));
        assert!(!same_origin(None, Some("gw.example"), false));
        assert!(!same_origin(Some("null"), Some("gw.example"), false));
        assert!(!same_origin(Some("http://"), Some(""), false));
    }
}
