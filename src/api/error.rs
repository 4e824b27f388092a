//! The one mapping from failures to HTTP: status + stable snake_case code + a message
//! written for the caller. Internal details (paths, engine errors, backtraces) are
//! logged here and never sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after_s: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
    pub fn not_ready() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the store is recovering or not writable",
        )
    }
    pub fn queue_full(retry_after_s: u64) -> Self {
        Self {
            retry_after_s: Some(retry_after_s.max(1)),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "queue_full",
                "the recipient's queue is at its cap; retry later",
            )
        }
    }
    pub fn storage_full() -> Self {
        Self {
            retry_after_s: Some(30),
            ..Self::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "storage_full",
                "the store is out of space; nothing was written",
            )
        }
    }
    /// Our own trouble (full queue or disk, shutting down, internal): the same request
    /// may succeed later, so work behind it is kept and retried rather than dropped.
    pub fn is_transient(&self) -> bool {
        self.status.is_server_error() || self.status == StatusCode::TOO_MANY_REQUESTS
    }

    /// An unexpected failure: logged with its detail, answered without it.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(event = "internal_error", detail = %detail);
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the daemon log",
        )
    }
}

impl ApiError {
    /// The one error body: `{"ok":false,"error":{"code":..,"message":..}}`. Also written
    /// by hand by the HTTP edge for requests that never reach a router.
    pub fn body_json(&self) -> serde_json::Value {
        json!({"ok": false, "error": {"code": self.code, "message": self.message}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body_json();
        let mut resp = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after_s {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
