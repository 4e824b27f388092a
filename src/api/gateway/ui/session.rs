//! The console's session at the HTTP edge: the cookie, the two extractors (a page
//! without a session redirects to the sign-in; a fragment or stream answers 401), and
//! the CSRF check of forms. The sessions themselves are `gateway::console::sessions`.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::{layout, Console};
use crate::api::ApiError;
use crate::gateway::console::sessions::{same, Session};

pub const SESSION_COOKIE: &str = "outpost_session";
/// The sign-in form's nonce (there is no session to hold a CSRF token yet).
pub const LOGIN_COOKIE: &str = "outpost_login";

/// The value of cookie `name` in the request.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// `Set-Cookie` for `name=value` scoped to the console, for `max_age_s` (0 deletes it).
pub fn set_cookie(c: &Console, name: &str, value: &str, max_age_s: u64) -> HeaderValue {
    let secure = if c.tls() { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age={max_age_s}{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("outpost_invalid=; Max-Age=0"))
}

/// Why a request has no usable session.
pub(super) enum NoSession {
    /// No cookie, an unknown or expired one, or its token was revoked.
    SignedOut,
    /// The revocation list cannot be read: refused, never honoured.
    Unavailable(ApiError),
}

/// The request's live session: the cookie names one that has not expired, and its
/// token is not revoked (asked on every request; a revoked token's session ends).
fn current(c: &Console, headers: &HeaderMap) -> Result<(String, Session), NoSession> {
    let cookie = cookie(headers, SESSION_COOKIE).ok_or(NoSession::SignedOut)?;
    let s = still_signed_in(c, cookie)?;
    Ok((cookie.to_string(), s))
}

/// The live session `cookie` names, its token not revoked; a revoked token ends every
/// session it signed in (and their event streams). Asked on every request, and by an
/// open event stream every second.
pub(super) fn still_signed_in(c: &Console, cookie: &str) -> Result<Session, NoSession> {
    let s = c
        .sessions
        .get(cookie, c.gw.now_ms())
        .ok_or(NoSession::SignedOut)?;
    match c.gw.client_auth().is_revoked(&s.jti) {
        Ok(false) => Ok(s),
        Ok(true) => {
            tracing::info!(event = "console_session_ended", reason = "token revoked", subject = %s.subject);
            c.sessions.end_token(&s.jti);
            Err(NoSession::SignedOut)
        }
        Err(e) => {
            tracing::warn!(event = "revocations_unreadable", error = %e);
            Err(NoSession::Unavailable(e.into()))
        }
    }
}

/// A signed-in page request; without a session the answer is a redirect to the
/// sign-in.
pub struct PageSession {
    pub cookie: String,
    pub session: Session,
}

impl FromRequestParts<Arc<Console>> for PageSession {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Arc<Console>) -> Result<Self, Response> {
        match current(c, &parts.headers) {
            Ok((cookie, session)) => Ok(Self { cookie, session }),
            Err(NoSession::SignedOut) => Err(Redirect::to("/ui/login").into_response()),
            Err(NoSession::Unavailable(e)) => Err(layout::error_page(
                e.status,
                "Unavailable",
                "The gateway cannot read its revocation list right now; try again shortly.",
            )),
        }
    }
}

/// A signed-in fragment or stream request; without a session: 401 in the API's error
/// shape.
pub struct ApiSession {
    pub cookie: String,
    pub session: Session,
}

impl FromRequestParts<Arc<Console>> for ApiSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, c: &Arc<Console>) -> Result<Self, ApiError> {
        match current(c, &parts.headers) {
            Ok((cookie, session)) => Ok(Self { cookie, session }),
            Err(NoSession::SignedOut) => Err(ApiError::unauthorized(
                "no console session: sign in at /ui/login",
            )),
            Err(NoSession::Unavailable(e)) => Err(e),
        }
    }
}

/// A form of this session: its CSRF token must be the session's; the refusal if not.
pub fn csrf_refusal(s: &Session, form_token: &str) -> Option<Response> {
    if same(&s.csrf, form_token) {
        return None;
    }
    tracing::warn!(event = "console_post_refused", reason = "CSRF token missing or wrong", subject = %s.subject);
    Some(layout::error_page(
        StatusCode::FORBIDDEN,
        "Refused",
        "This form's security token is missing or out of date. Reload the page and try again.",
    ))
}

/// An action needs an admin session; the refusal if this is not one.
pub fn admin_refusal(s: &Session) -> Option<Response> {
    if s.admin {
        return None;
    }
    Some(layout::error_page(
        StatusCode::FORBIDDEN,
        "Read-only session",
        "This session was signed in with a read token: it can look, not act. Sign in with an \
         admin token to send commands or revoke tokens.",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_cookie_among_several_headers_and_pairs() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; outpost_x=2"));
        h.append(
            header::COOKIE,
            HeaderValue::from_static("outpost_session=abc; b=3"),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "b"), Some("3"));
        assert_eq!(cookie(&h, "outpost"), None);
        assert_eq!(cookie(&HeaderMap::new(), SESSION_COOKIE), None);
    }
}
