//! The gateway's part of the shared health routes (`api::health`).

use std::net::SocketAddr;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::auth::require;
use crate::api::health::{count_response, Observed};
use crate::api::{ApiError, ApiResult};
use crate::gateway::Gateway;
use crate::telemetry::status::Status;
use crate::telemetry::Metrics;
use crate::token::Need;

impl Observed for Gateway {
    /// Ready means writes can be taken now: a gateway whose database is away answers
    /// every write 503, so it must not be in a load balancer's rotation either.
    async fn readiness(&self) -> Result<(), ApiError> {
        if !self.is_ready() {
            return Err(ApiError::not_ready());
        }
        self.writable().await.map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                format!("the store cannot take writes now: {e}"),
            )
        })
    }

    /// Open on loopback; otherwise a `read` token is needed (queues name every node).
    fn may_observe(&self, peer: SocketAddr, headers: &HeaderMap) -> ApiResult<()> {
        if !peer.ip().is_loopback() {
            require(self, headers, Need::Scope("read"))?;
        }
        Ok(())
    }

    /// The queues once per scrape (and the fleet listing for the tenant gauges).
    async fn scrape(&self) -> &Metrics {
        self.refresh_gauges().await;
        if let Err(e) = self.fleet().refresh_tenant_gauges().await {
            tracing::warn!(event = "tenant_gauges_failed", error = %e);
        }
        self.metrics()
    }

    async fn status(&self) -> ApiResult<Status> {
        Ok(self.fleet().status().await?)
    }

    fn served(&self, resp: &Response) {
        count_response(self.metrics(), resp);
    }
}
