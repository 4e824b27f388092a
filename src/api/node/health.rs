//! The node's part of the shared health routes (`api::health`).

use std::net::SocketAddr;

use axum::http::HeaderMap;
use axum::response::Response;

use crate::api::health::{count_response, Observed};
use crate::api::{ApiError, ApiResult};
use crate::app::core::NodeCore;
use crate::telemetry::status::Status;
use crate::telemetry::Metrics;

impl Observed for NodeCore {
    async fn readiness(&self) -> Result<(), ApiError> {
        match self.is_ready() {
            true => Ok(()),
            false => Err(ApiError::not_ready()),
        }
    }

    /// The node's API listens on loopback unless configured otherwise; its status and
    /// metrics are open to whoever reaches it, as its other routes need a token anyway.
    fn may_observe(&self, _peer: SocketAddr, _headers: &HeaderMap) -> ApiResult<()> {
        Ok(())
    }

    async fn scrape(&self) -> &Metrics {
        self.refresh_gauges();
        self.metrics()
    }

    async fn status(&self) -> ApiResult<Status> {
        Ok(NodeCore::status(self)?)
    }

    fn served(&self, resp: &Response) {
        count_response(self.metrics(), resp);
        self.note_served();
    }
}
