//! Gateway events (SPEC §6 `GET /v1/events`): one broadcast channel, fanned out to every
//! Server-Sent-Events subscriber. Also the in-process signal that a result arrived, so a
//! `POST /v1/tool_call` that waits needs no polling.
//!
//! A slow subscriber that falls more than the channel capacity behind loses events
//! (it gets a `lagged` event saying how many); the gateway itself never blocks on one.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// Capacity of the broadcast ring; see the module docs for what happens past it.
pub const CAPACITY: usize = 1024;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GatewayEvent {
    Queued {
        message_id: String,
        node_id: String,
        payload_type: String,
        expires_at_ms: u64,
    },
    Delivered {
        message_id: String,
        node_id: String,
        was_stored: bool,
    },
    Expired {
        message_id: String,
        node_id: String,
        reason: String,
    },
    Rejected {
        message_id: String,
        node_id: String,
        code: String,
    },
    Dead {
        message_id: String,
        node_id: String,
    },
    Result {
        message_id: String,
        job_id: String,
        node_id: String,
        ok: bool,
    },
    NodeOnline {
        node_id: String,
    },
    NodeOffline {
        node_id: String,
    },
}

impl GatewayEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Queued { .. } => "queued",
            Self::Delivered { .. } => "delivered",
            Self::Expired { .. } => "expired",
            Self::Rejected { .. } => "rejected",
            Self::Dead { .. } => "dead",
            Self::Result { .. } => "result",
            Self::NodeOnline { .. } => "node_online",
            Self::NodeOffline { .. } => "node_offline",
        }
    }

    /// One SSE frame: `event: <name>` and the JSON (with `type` and `ts_ms`) as data.
    pub fn sse_frame(&self, ts_ms: u64) -> String {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("ts_ms".into(), ts_ms.into());
        }
        format!("event: {}\ndata: {}\n\n", self.name(), v)
    }
}

/// The sending half, shared by every handler and the sweeper.
#[derive(Debug, Clone)]
pub struct Bus {
    tx: broadcast::Sender<(u64, GatewayEvent)>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl Bus {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Self { tx }
    }

    /// Publish; having no subscriber is normal and not an error.
    pub fn publish(&self, ts_ms: u64, ev: GatewayEvent) {
        tracing::debug!(event = "gateway_event", kind = ev.name());
        let _ = self.tx.send((ts_ms, ev));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<(u64, GatewayEvent)> {
        self.tx.subscribe()
    }
}

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

    #[test]
    fn frame_names_event_and_carries_fields() {
        let f = GatewayEvent::Delivered {
            message_id: "m1".into(),
            node_id: "node:a".into(),
            was_stored: true,
        }
        .sse_frame(42);
        assert!(f.starts_with("event: delivered\ndata: {"), "{f}");
        assert!(f.contains("\"was_stored\":true"));
        assert!(f.contains("\"type\":\"delivered\""));
        assert!(f.contains("\"ts_ms\":42"));
        assert!(f.ends_with("\n\n"));
    }

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
