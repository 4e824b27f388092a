//! The one mapping from failures to HTTP: status + stable snake_case code + a message
//! written for the caller. Internal details (paths, engine errors, backtraces) are
//! logged here and never sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::error::NodeError;
use crate::envelope::{OpenError, TimeStatement};
use crate::store::StoreError;
use crate::token::DenyCode;
use crate::tools::ToolError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after_s: Option<u64>,
    /// `error.time` of a 401 `clock_skew`: the gateway's signed time (PROTOCOL §5).
    pub time: Option<Box<TimeStatement>>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after_s: None,
            time: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    #[cfg(feature = "gateway")]
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    /// A signed node request whose timestamp is outside the skew, answered with the
    /// gateway's signed time so the node can tell how far off its clock is.
    #[cfg(feature = "gateway")]
    pub fn clock_skew(time: TimeStatement) -> Self {
        Self {
            time: Some(Box::new(time)),
            ..Self::new(
                StatusCode::UNAUTHORIZED,
                "clock_skew",
                "request timestamp outside the allowed clock skew; see error.time",
            )
        }
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

    /// An unexpected failure: logged with its detail, answered without it.
    #[cfg(feature = "gateway")]
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(event = "internal_error", detail = %detail);
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the daemon log",
        )
    }
}

/// The one error body: `{"ok":false,"error":{"code":..,"message":..}}` (PROTOCOL §10).
#[derive(Debug, serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ErrorBody<'a> {
    /// Always `false`.
    pub ok: bool,
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ErrorDetail<'a> {
    pub code: &'a str,
    pub message: &'a str,
    /// A 401 `clock_skew`'s signed time of the gateway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<&'a TimeStatement>,
}

impl ApiError {
    /// The error's body; also written by hand by the HTTP edge for requests that never
    /// reach a router.
    pub fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            ok: false,
            error: ErrorDetail {
                code: self.code,
                message: &self.message,
                time: self.time.as_deref(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after_s {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A refused capability token: 401 when there was none we could verify, 403 when a
/// valid one does not allow the request (both roles).
pub fn deny_status(code: DenyCode) -> StatusCode {
    match code {
        DenyCode::Unauthorized => StatusCode::UNAUTHORIZED,
        DenyCode::Forbidden => StatusCode::FORBIDDEN,
    }
}

/// The HTTP status of each domain error (PROTOCOL §9), the only place that knows.
fn status_of(e: &NodeError) -> StatusCode {
    match e {
        NodeError::NotReady(_) => StatusCode::SERVICE_UNAVAILABLE,
        NodeError::BadRequest(_) | NodeError::Ttl(_) => StatusCode::BAD_REQUEST,
        NodeError::Denied { code, .. } => deny_status(*code),
        NodeError::UnknownTool(_) | NodeError::NotFound(_) => StatusCode::NOT_FOUND,
        NodeError::JobConflict(_) | NodeError::IdempotencyConflict(_) => StatusCode::CONFLICT,
        NodeError::NoRoom(_) | NodeError::ResultTooLarge { .. } => StatusCode::INSUFFICIENT_STORAGE,
        NodeError::Tool(t) => match t {
            ToolError::UnknownTool(_) => StatusCode::NOT_FOUND,
            ToolError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ToolError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ToolError::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            ToolError::Failed(_) => StatusCode::BAD_GATEWAY,
        },
        NodeError::Envelope(o) => match o {
            OpenError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            OpenError::UnknownSender | OpenError::BadSignature => StatusCode::UNAUTHORIZED,
            OpenError::Forbidden => StatusCode::FORBIDDEN,
            _ => StatusCode::BAD_REQUEST,
        },
        NodeError::State(crate::fleet::StateError::VersionConflict { .. }) => {
            StatusCode::PRECONDITION_FAILED
        }
        NodeError::State(_) => StatusCode::BAD_REQUEST,
        NodeError::Store(s) => match s {
            StoreError::QueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            StoreError::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
            StoreError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            StoreError::Expired => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        },
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        if e.is_internal() {
            tracing::error!(event = "internal_error", detail = %e);
        }
        ApiError {
            status: status_of(&e),
            code: e.code(),
            message: e.public_message(),
            retry_after_s: e.retry_after_s(),
            time: None,
        }
    }
}

impl From<crate::config::TtlError> for ApiError {
    fn from(e: crate::config::TtlError) -> Self {
        NodeError::Ttl(e).into()
    }
}

/// A store failure as an API error (the gateway's storage errors that wrap one).
#[cfg(feature = "gateway")]
pub fn store_error(e: StoreError) -> ApiError {
    NodeError::Store(e).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(e: NodeError) -> (u16, &'static str) {
        let a = ApiError::from(e);
        (a.status.as_u16(), a.code)
    }

    /// PROTOCOL §9's status for each tool failure (moved here from the tools module, which
    /// no longer knows HTTP).
    #[test]
    fn tool_errors_map_to_their_spec_status() {
        assert_eq!(
            api(ToolError::Timeout { timeout_ms: 1 }.into()),
            (504, "tool_timeout")
        );
        assert_eq!(
            api(ToolError::Failed("x".into()).into()),
            (502, "tool_failed")
        );
        assert_eq!(
            api(ToolError::UnknownTool("x".into()).into()),
            (404, "unknown_tool")
        );
        assert_eq!(
            api(ToolError::BadRequest("x".into()).into()),
            (400, "bad_request")
        );
        let busy = ToolError::Busy {
            tool: "x".into(),
            limit: 1,
        };
        assert_eq!(api(busy.into()), (429, "busy"));
    }

    #[test]
    fn store_and_token_errors_map_to_their_status() {
        assert_eq!(api(StoreError::StorageFull.into()), (507, "storage_full"));
        assert_eq!(
            api(StoreError::QueueFull { retry_after_s: 3 }.into()),
            (429, "queue_full")
        );
        assert_eq!(api(StoreError::Closed.into()), (500, "internal"));
        use crate::fleet::StateError;
        assert_eq!(api(StateError::NotAnObject.into()), (400, "bad_state"));
        assert_eq!(api(StateError::TooLarge(70_000).into()), (400, "bad_state"));
        let stale = StateError::VersionConflict {
            current: 2,
            expected: 1,
        };
        assert_eq!(api(stale.into()), (412, "version_conflict"));
        // Every refusal reason: 401 without a token we could verify, 403 otherwise (the
        // token module classifies, this decides the status; moved from its tests).
        use crate::token::DenyReason::*;
        for (reasons, want) in [
            (
                &[
                    Missing,
                    Malformed,
                    UnknownIssuer,
                    BadSignature,
                    Expired,
                    NotYetValid,
                ][..],
                401,
            ),
            (
                &[IssuerNotAllowed, WrongAudience, MissingScope, Revoked][..],
                403,
            ),
        ] {
            for r in reasons {
                let e = NodeError::Denied {
                    code: r.code(),
                    reason: *r,
                    message: String::new(),
                };
                assert_eq!(api(e).0, want, "{}", r.as_str());
            }
        }
    }
}
