//! What both roles answer alike: `/healthz`, `/readyz`, `/metrics`, `/v1/status`, the
//! answers to unknown routes and methods, and the request counter. A role plugs in by
//! implementing [`Observed`]; the routes are added by [`routes`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::{ApiError, ApiResult};
use crate::telemetry::status::Status;
use crate::telemetry::Metrics;

/// What a role tells its probes, scrapers and `outpost status`.
pub trait Observed: Send + Sync + 'static {
    /// Ready for traffic now; the error says why not.
    fn readiness(&self) -> impl Future<Output = Result<(), ApiError>> + Send;
    /// May this caller read `/metrics` and `/v1/status`? (They name peers and queues.)
    fn may_observe(&self, peer: SocketAddr, headers: &HeaderMap) -> ApiResult<()>;
    /// The role's metrics, its gauges brought up to date.
    fn scrape(&self) -> impl Future<Output = &Metrics> + Send;
    fn status(&self) -> impl Future<Output = ApiResult<Status>> + Send;
    /// One more request answered.
    fn served(&self, resp: &Response);
}

/// `GET /healthz`, `/readyz`: `{"status": …}`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Health {
    pub status: &'static str,
}

/// The shared routes, on a role's router.
pub fn routes<S: Observed>(router: Router<Arc<S>>) -> Router<Arc<S>> {
    router
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/v1/status", get(status::<S>))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// The request counter, as the role router's outermost layer.
pub async fn count<S: Observed>(State(s): State<Arc<S>>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    s.served(&resp);
    resp
}

async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

async fn readyz<S: Observed>(State(s): State<Arc<S>>) -> ApiResult<Json<Health>> {
    s.readiness().await?;
    Ok(Json(Health { status: "ready" }))
}

async fn metrics<S: Observed>(
    State(s): State<Arc<S>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    s.may_observe(peer, &headers)?;
    let text = s.scrape().await.render();
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

async fn status<S: Observed>(
    State(s): State<Arc<S>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> ApiResult<Json<Status>> {
    s.may_observe(peer, &headers)?;
    Ok(Json(s.status().await?))
}

async fn not_found() -> ApiError {
    ApiError::not_found("not_found", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this route",
    )
}

/// Counts an answered request in `outpost_http_requests_total` by status class.
pub fn count_response(metrics: &Metrics, resp: &Response) {
    let class = match resp.status().as_u16() {
        200..=299 => "2xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    };
    metrics.http_requests_total.inc(&[class]);
}
