//! The page frame every console page shares, readable error pages, and how times and
//! durations are written.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

use crate::gateway::console::sessions::Session;

/// What the frame needs to know about the page.
pub struct Frame<'a> {
    pub title: &'a str,
    /// `data-page` of the body: what the script does on it (`fleet`, `node`, `login`).
    pub page: &'a str,
    /// `data-node` of the body on a node's page.
    pub node: Option<&'a str>,
    pub gateway: &'a str,
    pub session: Option<&'a Session>,
    /// The newest event id when the page was rendered: the live stream resumes after
    /// it, so nothing that happened between the render and the stream is missed.
    pub last_event: Option<u64>,
}

pub fn page(f: Frame<'_>, main: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (f.title) " · outpost " (f.gateway) }
                link rel="stylesheet" href="/ui/assets/console.css";
                script src="/ui/assets/console.js" defer {}
            }
            body data-page=(f.page) data-node=[f.node] data-last-event=[f.last_event] {
                header.top {
                    a.brand href="/ui" { "outpost" }
                    span.gw { (f.gateway) }
                    @if let Some(s) = f.session {
                        nav.main aria-label="Console" {
                            a href="/ui" aria-current=[(f.page == "fleet").then_some("page")] { "Fleet" }
                            a href="/ui/rollouts" aria-current=[f.page.starts_with("rollout").then_some("page")] { "Rollouts" }
                        }
                        span #live .live title="live updates" { "…" }
                        span.who {
                            (s.subject)
                            @if let Some(t) = &s.tenant { " · tenant " span #session-tenant { (t) } }
                            @if s.admin { " · admin" } @else { " · read-only" }
                        }
                        form.inline method="post" action="/ui/logout" {
                            input type="hidden" name="csrf" value=(s.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (main) }
            }
        }
    }
}

pub fn html_response(status: StatusCode, m: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        m.into_string(),
    )
        .into_response()
}

/// A readable error page (the console's pages never answer JSON).
pub fn error_page(status: StatusCode, title: &str, message: &str) -> Response {
    html_response(status, error_markup(title, message))
}

fn error_markup(title: &str, message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · outpost" }
                link rel="stylesheet" href="/ui/assets/console.css";
            }
            body data-page="error" {
                header.top { a.brand href="/ui" { "outpost" } }
                main {
                    h1 { (title) }
                    p.error role="alert" { (message) }
                    p { a href="/ui" { "Back to the fleet" } }
                }
            }
        }
    }
}

/// `2026-11-27 02:40:34Z`, or `—`.
pub fn at(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "—".into();
    };
    crate::token::format_rfc3339_ms(ms)
        .map(|s| {
            let s = s.replacen('T', " ", 1);
            match s.split_once('.') {
                Some((head, _)) => format!("{head}Z"),
                None => s,
            }
        })
        .unwrap_or_else(|| "—".into())
}

/// A duration in seconds as people read it: `42 s`, `3 min`, `5 h 2 min`, `3 d 4 h`.
pub fn dur(s: u64) -> String {
    match s {
        0..60 => format!("{s} s"),
        60..3_600 => format!("{} min", s / 60),
        3_600..86_400 => format!("{} h {} min", s / 3_600, s % 3_600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// How long ago `ms` was at `now_ms`: `12 s ago`, or `—`.
pub fn ago(ms: Option<u64>, now_ms: u64) -> String {
    match ms {
        Some(t) => format!("{} ago", dur(now_ms.saturating_sub(t) / 1000)),
        None => "—".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_times_read_naturally() {
        assert_eq!(dur(0), "0 s");
        assert_eq!(dur(59), "59 s");
        assert_eq!(dur(61), "1 min");
        assert_eq!(dur(3_600 * 5 + 120), "5 h 2 min");
        assert_eq!(dur(86_400 * 3 + 3_600 * 4), "3 d 4 h");
        assert_eq!(ago(Some(1_000), 43_000), "42 s ago");
        assert_eq!(ago(None, 1), "—");
        assert_eq!(at(Some(0)), "1970-01-01 00:00:00Z");
        assert_eq!(at(None), "—");
    }

    #[test]
    fn error_pages_escape_what_they_show() {
        let m = error_markup("Bad", "<script>x</script>").into_string();
        assert!(m.contains("&lt;script&gt;x&lt;/script&gt;"), "{m}");
        assert!(!m.contains("<script>x"), "{m}");
    }
}
