//! `GET /ui/events`: the gateway's event log as Server-Sent Events for a signed-in
//! page — the same stream as `GET /v1/events`, authenticated by the session instead of
//! a bearer token. A stream ends when its session does, and at the latest after
//! [`MAX_STREAM_MS`], so a revoked token's stream stops too: the browser reconnects
//! (with `Last-Event-ID`, missing nothing) and its session is checked again.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::StreamExt;

use super::session::ApiSession;
use super::Console;

/// The longest a stream runs before its session is checked again.
pub const MAX_STREAM_MS: u64 = 5 * 60_000;

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
    let backlog = match after {
        Some(after) => crate::api::gateway::events::backlog(gw, after).await,
        None => (Vec::new(), gw.events().last_id()),
    };
    let resp = crate::api::gateway::events::sse_response(rx, backlog, gw.shutdown().clone());
    let left = s
        .session
        .expires_ms
        .saturating_sub(gw.now_ms())
        .min(MAX_STREAM_MS);
    let until = tokio::time::sleep(Duration::from_millis(left));
    resp.map(|body| Body::from_stream(body.into_data_stream().take_until(until)))
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
