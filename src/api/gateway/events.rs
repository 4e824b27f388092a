//! `GET /v1/events`: the gateway's event bus as Server-Sent Events.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::gateway::caller::Caller;
use crate::gateway::events::Event;
use crate::gateway::fleet_confined::{event_for, event_seen};
use crate::gateway::Gateway;

/// Whose stream it is: an API client's (its nodes named as it names them, PROTOCOL
/// §18) or a console session's (every node named by its address, as the console's
/// links are); either gets only the events its caller may see.
#[derive(Debug, Clone)]
pub enum Viewer {
    Client(Caller),
    Console(Caller),
}

impl Viewer {
    fn frame(&self, e: &Event) -> Option<String> {
        match self {
            Viewer::Client(c) => event_for(c, e).map(|e| e.sse_frame()),
            Viewer::Console(c) => event_seen(c, &e.event).then(|| e.sse_frame()),
        }
    }
}

/// The frames a subscriber resuming after `after` missed (a `lagged` frame first when
/// some are gone for good), then the id of the newest one.
/// Only the events `caller` may see are framed (`fleet_confined::event_for`); the newest
/// id covers the others too, so a resuming caller is not replayed them again.
pub async fn backlog(gw: &Gateway, viewer: &Viewer, after: u64) -> (Vec<String>, u64) {
    let missed = gw.fleet().events_after(after).await;
    let mut frames = Vec::with_capacity(missed.events.len() + 1);
    if missed.lagged {
        frames.push(lagged_frame(None));
    }
    let mut last = after;
    for e in missed.events {
        last = last.max(e.id);
        frames.extend(viewer.frame(&e));
    }
    (frames, last)
}

fn lagged_frame(missed: Option<u64>) -> String {
    match missed {
        Some(n) => format!("event: lagged\ndata: {{\"type\":\"lagged\",\"missed\":{n}}}\n\n"),
        None => "event: lagged\ndata: {\"type\":\"lagged\",\"missed\":null}\n\n".to_string(),
    }
}

/// The SSE response: a comment first (so clients see the stream is open), then the
/// `backlog` a resuming client missed, then events as they happen (never one with an
/// id already sent) until the client goes away or the gateway shuts down (so graceful
/// shutdown never waits on a dashboard).
/// `rx` must be subscribed before `backlog` was read, so nothing falls between them.
pub fn sse_response(
    rx: broadcast::Receiver<std::sync::Arc<Event>>,
    backlog: (Vec<String>, u64),
    caller: Viewer,
    shutdown: CancellationToken,
) -> Response {
    let (frames, last) = backlog;
    let mut first = vec![": outpost gateway events\n\n".to_string()];
    first.extend(frames);
    let stream = futures_util::stream::unfold(
        (rx, shutdown, first.into_iter(), last, caller),
        |(mut rx, shutdown, mut first, mut last, caller)| async move {
            if let Some(f) = first.next() {
                return Some((Ok::<_, Infallible>(f), (rx, shutdown, first, last, caller)));
            }
            let frame = loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    r = rx.recv() => match r {
                        Ok(e) if e.id <= last => continue,
                        Ok(e) => {
                            last = e.id;
                            match caller.frame(&e) {
                                Some(f) => break f,
                                None => continue,
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => break lagged_frame(Some(n)),
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                }
            };
            Some((Ok(frame), (rx, shutdown, first, last, caller)))
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
    use crate::gateway::events::EventLog;

    #[tokio::test]
    async fn stream_ends_on_shutdown() {
        use futures_util::StreamExt;
        let (log, _writer) = EventLog::new();
        let stop = CancellationToken::new();
        let resp = sse_response(
            log.subscribe(),
            (Vec::new(), 0),
            Viewer::Client(Caller::operator("t")),
            stop.clone(),
        );
        let mut body = resp.into_body().into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        assert!(first.starts_with(b": outpost"));
        log.deliver(vec![crate::gateway::events::Event {
            id: 1,
            ts_ms: 1,
            event: crate::gateway::events::GatewayEvent::NodeOnline {
                node_id: "node:a".into(),
            },
        }]);
        let ev = body.next().await.unwrap().unwrap();
        assert!(std::str::from_utf8(&ev).unwrap().contains("node_online"));
        stop.cancel();
        assert!(body.next().await.is_none());
    }
}
