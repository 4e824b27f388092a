//! `GET /ui/events`: the gateway's event log as Server-Sent Events for a signed-in
//! page — the same stream as `GET /v1/events`, authenticated by the session instead of
//! a bearer token. A stream ends when its session does, and at the latest after
//! [`MAX_STREAM_MS`], so a revoked token's stream stops too: the browser reconnects
//! (with `Last-Event-ID`, missing nothing) and its session is checked again.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::StreamExt;

use super::session::ApiSession;
use super::Console;

/// The longest a stream runs before its session is checked again.
pub const MAX_STREAM_MS: u64 = 5 * 60_000;

pub async fn events(State(c): State<Arc<Console>>, s: ApiSession, headers: HeaderMap) -> Response {
    let gw = &c.gw;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let rx = gw.events.subscribe();
    let backlog = match after {
        Some(after) => crate::api::gateway::events::backlog(gw, after).await,
        None => (Vec::new(), gw.events.last_id()),
    };
    let resp = crate::api::gateway::events::sse_response(rx, backlog, gw.shutdown.clone());
    let left = s
        .session
        .expires_ms
        .saturating_sub(gw.now_ms())
        .min(MAX_STREAM_MS);
    let until = tokio::time::sleep(Duration::from_millis(left));
    resp.map(|body| Body::from_stream(body.into_data_stream().take_until(until)))
}
