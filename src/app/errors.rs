//! Component errors → API errors. Kept in one place so each code means one thing.

use axum::http::StatusCode;

use crate::api::ApiError;
use crate::envelope::OpenError;
use crate::store::StoreError;
use crate::tools::ToolError;

pub fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::QueueFull { retry_after_s } => ApiError::queue_full(retry_after_s),
        StoreError::StorageFull => ApiError::storage_full(),
        StoreError::TooLarge { .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "message exceeds queue.max_message_bytes",
        ),
        StoreError::Expired => ApiError::bad_request("message already expired"),
        other => ApiError::internal(other),
    }
}

pub fn ttl_error(e: crate::config::TtlError) -> ApiError {
    match e {
        crate::config::TtlError::Zero => ApiError::bad_request(e.to_string()),
        crate::config::TtlError::TooLong { .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, "ttl_too_long", e.to_string())
        }
    }
}

pub fn open_error(e: &OpenError) -> ApiError {
    let status = match e {
        OpenError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        OpenError::UnknownSender | OpenError::BadSignature => StatusCode::UNAUTHORIZED,
        OpenError::Forbidden => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, e.code(), e.to_string())
}

pub fn tool_error(e: &ToolError) -> ApiError {
    let code = e.code();
    let status = match code {
        "unknown_tool" => StatusCode::NOT_FOUND,
        "bad_request" => StatusCode::BAD_REQUEST,
        "tool_timeout" => StatusCode::GATEWAY_TIMEOUT,
        "busy" => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::BAD_GATEWAY,
    };
    ApiError::new(status, code, e.to_string())
}
