//! Sign-in and sign-out. The form posts a gateway token in the field `token`; a token
//! with `read` (or `admin`) makes a session, `admin` one that may act. The token itself
//! is never logged, stored or sent back.
//!
//! The token is always checked first; only a refused one draws on its address's
//! failed sign-in budget, and a sign-in that verifies draws on its token's budget
//! (`gateway::console::sign_in`). So a flood of failures from any address never keeps
//! a valid token out.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::{self, Frame};
use super::session::{cookie, set_cookie, PageSession, LOGIN_COOKIE, SESSION_COOKIE};
use super::Console;
use crate::gateway::console::sessions::{random_hex, same, Ended, SignIn};
use crate::gateway::source_budget::Source;
use crate::token::{Claims, Need};

/// How long the sign-in form's nonce lives.
const LOGIN_NONCE_S: u64 = 3_600;
/// Longest token the form takes (a PASETO token with a few scopes is ~400 bytes).
const MAX_TOKEN_LEN: usize = 8_192;

fn form_markup(c: &Console, nonce: &str, error: Option<&str>, ended: Option<Ended>) -> Markup {
    let main = html! {
        section.login {
            h1 { "Sign in" }
            p {
                "Paste a gateway token: " code { "read" } " to look, " code { "admin" }
                " to act. On the gateway host: "
                code { "outpost token issue --aud " (c.gw.cfg().node_id) " --scope admin --ttl 12h" }
            }
            @if let Some(Ended::TokenRevoked) = ended {
                p.notice #session-ended data-reason="token_revoked" role="status" {
                    "You were signed out: the token this session was signed in with has been revoked. "
                    "Sign in with another token."
                }
            }
            @if let Some(e) = error {
                p.error #login-error role="alert" { (e) }
            }
            form method="post" action="/ui/login" {
                input type="hidden" name="login_csrf" value=(nonce);
                label for="token" { "Token" }
                textarea #token name="token" rows="4" required autocomplete="off" spellcheck="false" {}
                button type="submit" { "Sign in" }
            }
        }
    };
    layout::page(
        Frame {
            title: "Sign in",
            page: "login",
            node: None,
            gateway: &c.gw.cfg().node_id,
            session: None,
            last_event: None,
        },
        main,
    )
}

/// The form with a fresh nonce (also set as a cookie the POST must match).
fn form_response(c: &Console, status: StatusCode, error: Option<&str>) -> Response {
    form_response_ended(c, status, error, None)
}

fn form_response_ended(
    c: &Console,
    status: StatusCode,
    error: Option<&str>,
    ended: Option<Ended>,
) -> Response {
    let nonce = random_hex();
    let mut r = layout::html_response(status, form_markup(c, &nonce, error, ended));
    r.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(c, LOGIN_COOKIE, &nonce, LOGIN_NONCE_S),
    );
    r
}

/// `GET /ui/login`. A browser whose session cookie names a session that ended without
/// its operator (its token revoked) is told so.
pub async fn form(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let ended = cookie(&headers, SESSION_COOKIE).and_then(|k| c.sessions.end_reason(k));
    form_response_ended(&c, StatusCode::OK, None, ended)
}

#[derive(Debug, Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    pub token: String,
    #[serde(default)]
    pub login_csrf: String,
}

/// `POST /ui/login`.
pub async fn sign_in(
    State(c): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(f): Form<SignInForm>,
) -> Response {
    let now = c.gw.now_ms();
    let nonce_ok = cookie(&headers, LOGIN_COOKIE).is_some_and(|n| same(n, &f.login_csrf));
    if !nonce_ok {
        tracing::warn!(
            event = "console_sign_in_refused",
            reason = "sign-in nonce missing or wrong"
        );
        return form_response(
            &c,
            StatusCode::FORBIDDEN,
            Some("This sign-in form is out of date; it has been reloaded. Paste the token again."),
        );
    }
    let token = f.token.trim();
    let (claims, admin) = match accepted(&c, token) {
        Ok(accepted) => accepted,
        Err(e) if !c.sign_ins.failed(peer.ip(), now) => {
            // Said without the reason: a guesser learns nothing once over budget.
            return held_back(
                &c,
                "address_budget",
                Source::of(peer.ip()),
                "Too many failed sign-ins from this address: wait a minute and try again.",
                e.code,
            );
        }
        Err(e) => {
            tracing::warn!(event = "console_sign_in_refused", reason = %e.code);
            let msg = format!("That token was not accepted: {}", e.message);
            return form_response(&c, e.status, Some(&msg));
        }
    };
    if !c.sign_ins.signed_in(&claims.jti, now) {
        return held_back(
            &c,
            "token_budget",
            Source::of(peer.ip()),
            "This token has signed in too often: wait a minute and try again.",
            "signed in too often",
        );
    }
    let token_expires_ms = crate::token::parse_rfc3339_ms(&claims.exp).unwrap_or(now);
    let (value, s) = c.sessions.create(
        SignIn {
            subject: claims.sub,
            jti: claims.jti,
            admin,
            tenant: claims.tenant,
            token_expires_ms,
        },
        now,
    );
    tracing::info!(event = "console_signed_in", subject = %s.subject, tenant = s.tenant.as_deref().unwrap_or("-"), admin, expires_ms = s.expires_ms);
    let mut r = Redirect::to("/ui").into_response();
    let h = r.headers_mut();
    h.append(
        header::SET_COOKIE,
        set_cookie(
            &c,
            SESSION_COOKIE,
            &value,
            s.expires_ms.saturating_sub(now) / 1000,
        ),
    );
    h.append(header::SET_COOKIE, set_cookie(&c, LOGIN_COOKIE, "", 0));
    r
}

/// The claims of a token that may sign in (scope `read`), and whether it is also
/// `admin`. A tenant's token signs in too: its session sees only its tenant (§18.2).
fn accepted(c: &Console, token: &str) -> Result<(Claims, bool), crate::api::ApiError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(crate::api::ApiError::unauthorized("that is not a token"));
    }
    let auth = c.gw.client_auth();
    let claims = auth.authorize(token, Need::Scope("read"))?;
    let admin = auth.authorize(token, Need::Scope("admin")).is_ok();
    Ok((claims, admin))
}

/// A sign-in held back by a budget (429): logged and counted, the form shown again.
fn held_back(c: &Console, budget: &str, source: Source, msg: &str, why: &str) -> Response {
    tracing::warn!(event = "console_sign_in_refused", reason = why, budget, %source);
    c.gw.metrics()
        .throttled_total
        .inc(&["console_sign_in", budget]);
    form_response(c, StatusCode::TOO_MANY_REQUESTS, Some(msg))
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

/// `POST /ui/logout`: the session is deleted, not only the cookie.
pub async fn sign_out(
    State(c): State<Arc<Console>>,
    s: PageSession,
    Form(f): Form<CsrfForm>,
) -> Response {
    if let Some(r) = super::session::csrf_refusal(&s.session, &f.csrf) {
        return r;
    }
    c.sessions.remove(&s.cookie);
    tracing::info!(event = "console_signed_out", subject = %s.session.subject);
    let mut r = Redirect::to("/ui/login").into_response();
    r.headers_mut()
        .append(header::SET_COOKIE, set_cookie(&c, SESSION_COOKIE, "", 0));
    r
}
