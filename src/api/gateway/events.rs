//! `GET /v1/events`: the gateway's event bus as Server-Sent Events.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::gateway::events::Bus;

/// The SSE response: a comment first (so clients see the stream is open), then events
/// until the client goes away or the gateway shuts down (so graceful shutdown never
/// waits on a dashboard).
pub fn sse_response(bus: &Bus, shutdown: CancellationToken) -> Response {
    let rx = bus.subscribe();
    let first = Some(": outpost gateway events\n\n".to_string());
    let stream = futures_util::stream::unfold(
        (rx, shutdown, first),
        |(mut rx, shutdown, first)| async move {
            if let Some(f) = first {
                return Some((Ok::<_, Infallible>(f), (rx, shutdown, None)));
            }
            let frame = tokio::select! {
                _ = shutdown.cancelled() => return None,
                r = rx.recv() => match r {
                    Ok((ts, ev)) => ev.sse_frame(ts),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        format!("event: lagged\ndata: {{\"type\":\"lagged\",\"missed\":{n}}}\n\n")
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            };
            Some((Ok(frame), (rx, shutdown, None)))
        },
    );
    let mut resp = Body::from_stream(stream).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::events::GatewayEvent;

    #[tokio::test]
    async fn stream_ends_on_shutdown() {
        use futures_util::StreamExt;
        let bus = Bus::new();
        let stop = CancellationToken::new();
        let resp = sse_response(&bus, stop.clone());
        let mut body = resp.into_body().into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        assert!(first.starts_with(b": outpost"));
        bus.publish(
            1,
            GatewayEvent::NodeOnline {
                node_id: "node:a".into(),
            },
        );
        let ev = body.next().await.unwrap().unwrap();
        assert!(std::str::from_utf8(&ev).unwrap().contains("node_online"));
        stop.cancel();
        assert!(body.next().await.is_none());
    }
}
