//! The per-connection service hyper calls: it hands the router `ConnectInfo`, puts the
//! body deadline around every request body, and counts the request as in flight until
//! hyper has taken the last byte of the response (so a long-poll or an SSE stream is
//! never mistaken for an idle connection).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use super::table::ConnState;
use crate::api::ApiError;

#[derive(Clone)]
pub struct ConnService {
    pub app: Router,
    pub peer: SocketAddr,
    pub state: Arc<ConnState>,
    pub body_timeout: Duration,
}

impl hyper::service::Service<Request<hyper::body::Incoming>> for ConnService {
    type Response = Response<InFlightBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<hyper::body::Incoming>) -> Self::Future {
        let in_flight = InFlight::start(self.state.clone());
        let timed_out = Arc::new(AtomicBool::new(false));
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(ConnectInfo(self.peer));
        let body = Body::new(TimeoutBody {
            inner: body,
            deadline: Box::pin(tokio::time::sleep(self.body_timeout)),
            timed_out: timed_out.clone(),
        });
        let app = self.app.clone();
        let peer = self.peer;
        Box::pin(async move {
            let Ok(mut resp) = app.oneshot(Request::from_parts(parts, body)).await;
            if timed_out.load(Ordering::Relaxed) {
                // Whatever the handler made of the failed body, the truth is a timeout.
                tracing::debug!(event = "connection_timeout", %peer, timeout = "body");
                resp = ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    "the request body did not arrive in time",
                )
                .into_response();
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp.map(|inner| InFlightBody {
                inner,
                _in_flight: in_flight,
            }))
        })
    }
}

/// Marks a request in flight from the service call until dropped.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn start(state: Arc<ConnState>) -> Self {
        state.request_started();
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_finished(Instant::now());
    }
}

/// The response body, holding the request in flight until hyper drops it.
pub struct InFlightBody {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for InFlightBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the body timeout")]
pub struct BodyTimeout;

/// A request body that fails once its deadline passes with data still missing.
struct TimeoutBody {
    inner: hyper::body::Incoming,
    deadline: Pin<Box<Sleep>>,
    timed_out: Arc<AtomicBool>,
}

impl http_body::Body for TimeoutBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => Poll::Ready(r.map(|f| f.map_err(Into::into))),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.timed_out.store(true, Ordering::Relaxed);
                    Poll::Ready(Some(Err(Box::new(BodyTimeout))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
