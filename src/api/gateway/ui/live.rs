//! `GET /ui/events`: the gateway's event log as Server-Sent Events for a signed-in
//! page — the same stream as `GET /v1/events`, authenticated by the session instead of
//! a bearer token. A stream ends with its session: at once when the session is removed
//! (sign-out, its token revoked through this gateway, making room), within
//! [`RECHECK_MS`] when it expires or its token is revoked elsewhere (another replica,
//! the CLI), and at the latest after [`MAX_STREAM_MS`]; a browser that reconnects (with
//! `Last-Event-ID`, missing nothing) has its session checked again.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::session::{still_signed_in, ApiSession};
use super::Console;

/// The longest a stream runs before the browser must connect again.
pub const MAX_STREAM_MS: u64 = 5 * 60_000;
/// How often an open stream asks whether its session still stands.
pub const RECHECK_MS: u64 = 1_000;

#[derive(Debug, Default, serde::Deserialize)]
pub struct After {
    /// The newest event id the page was rendered with (`data-last-event`).
    #[serde(default)]
    pub after: Option<u64>,
}

/// `GET /ui/events[?after=ID]`: from after `Last-Event-ID` (a reconnect), else after
/// `after` (the page's first connection), else from the next event.
pub async fn events(
    State(c): State<Arc<Console>>,
    s: ApiSession,
    headers: HeaderMap,
    Query(q): Query<After>,
) -> Response {
    let gw = &c.gw;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or(q.after);
    let rx = gw.events().subscribe();
    // A tenant's session gets its tenant's events only (PROTOCOL §18.2).
    let caller = crate::api::gateway::events::Viewer::Console(s.session.caller());
    let backlog = match after {
        Some(after) => crate::api::gateway::events::backlog(gw, &caller, after).await,
        None => (Vec::new(), gw.events().last_id()),
    };
    let resp =
        crate::api::gateway::events::sse_response(rx, backlog, caller, gw.shutdown().clone());
    let left = s
        .session
        .expires_ms
        .saturating_sub(gw.now_ms())
        .min(MAX_STREAM_MS);
    let ended = c.sessions.ended(&s.cookie).unwrap_or_else(|| {
        let gone = CancellationToken::new();
        gone.cancel();
        gone
    });
    let until = session_over(c.clone(), s.cookie, ended, left);
    resp.map(|body| Body::from_stream(body.into_data_stream().take_until(until)))
}

/// Resolves when the stream of the session `cookie` names must end: the session is
/// removed (`ended`), `left_ms` is up, or a re-check finds it expired or its token
/// revoked (or the revocation list unreadable: never honoured).
async fn session_over(c: Arc<Console>, cookie: String, ended: CancellationToken, left_ms: u64) {
    let deadline = tokio::time::sleep(Duration::from_millis(left_ms));
    tokio::pin!(deadline);
    let mut recheck = tokio::time::interval(Duration::from_millis(RECHECK_MS));
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ended.cancelled() => return,
            _ = &mut deadline => return,
            _ = recheck.tick() => {
                if still_signed_in(&c, &cookie).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_is_read_from_the_query() {
        let uri: axum::http::Uri = "http://x/ui/events?after=1795748766461000".parse().unwrap();
        let Query(q) = Query::<After>::try_from_uri(&uri).unwrap();
        assert_eq!(q.after, Some(1_795_748_766_461_000));
        let uri: axum::http::Uri = "http://x/ui/events".parse().unwrap();
        assert_eq!(Query::<After>::try_from_uri(&uri).unwrap().0.after, None);
    }
}
