//! The gateway's errors as HTTP: the only place that knows their status codes.

use axum::http::StatusCode;

use crate::api::ApiError;
use crate::gateway::error::GatewayError;
use crate::gateway::storage::StateError;

impl From<StateError> for ApiError {
    fn from(e: StateError) -> Self {
        match e {
            StateError::Store(s) => crate::api::store_error(s),
            StateError::Unavailable(detail) => {
                tracing::warn!(event = "storage_unavailable", detail = %detail);
                ApiError {
                    retry_after_s: Some(1),
                    ..ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "storage_unavailable",
                        "the gateway's storage cannot be reached; retry shortly",
                    )
                }
            }
            StateError::Corrupt(detail) => ApiError::internal(detail),
            StateError::OutcomeUnknown(detail) => {
                tracing::warn!(event = "outcome_unknown", detail = %detail);
                outcome_unknown(
                    "the database went away after the write was sent to it: it may or may \
                     not be stored; repeat the request (with the same job_id or idempotency \
                     key) to learn which",
                )
            }
        }
    }
}

/// 503 `outcome_unknown`: unlike `storage_unavailable`, something may have been written.
fn outcome_unknown(message: impl Into<String>) -> ApiError {
    ApiError {
        retry_after_s: Some(1),
        ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "outcome_unknown", message)
    }
}

impl From<GatewayError> for ApiError {
    fn from(e: GatewayError) -> Self {
        let msg = e.to_string();
        match e {
            GatewayError::BadRequest(_) => ApiError::bad_request(msg),
            GatewayError::Ttl(t) => t.into(),
            GatewayError::UnknownNode(_) => ApiError::not_found("unknown_node", msg),
            GatewayError::NodeWithoutSend(_) => {
                ApiError::new(StatusCode::CONFLICT, "node_without_send", msg)
            }
            GatewayError::UnknownPeer => ApiError::unauthorized(msg),
            GatewayError::JobConflict(_) => {
                ApiError::new(StatusCode::CONFLICT, "job_id_conflict", msg)
            }
            GatewayError::IdempotencyConflict(_) => {
                ApiError::new(StatusCode::CONFLICT, "idempotency_conflict", msg)
            }
            GatewayError::OutcomeUnknown(_) => outcome_unknown(msg),
            GatewayError::Duplicate => ApiError::new(StatusCode::CONFLICT, "duplicate", msg),
            GatewayError::Conflict(c, _) => ApiError::new(StatusCode::CONFLICT, c.code(), msg),
            GatewayError::TenantQuota(quota, _) => {
                let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "tenant_quota", msg);
                if quota == crate::fleet::tenant::Quota::CommandRate.as_str() {
                    e.retry_after_s = Some(1);
                }
                e
            }
            GatewayError::RecipientOffline(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "recipient_offline", msg)
            }
            GatewayError::NotFound(code, _) => ApiError::not_found(code, msg),
            GatewayError::Audit(r) => ApiError::new(StatusCode::CONFLICT, r.code(), msg),
            GatewayError::Enroll(code, _) => {
                let status = match code {
                    crate::enroll::codes::DUPLICATE_NODE_ID => StatusCode::CONFLICT,
                    crate::enroll::codes::TENANT_QUOTA => StatusCode::TOO_MANY_REQUESTS,
                    _ => StatusCode::FORBIDDEN,
                };
                ApiError::new(status, code, msg)
            }
            GatewayError::Throttled(t) => {
                let e = match t {
                    // Load shed by policy, not a failure: a 4xx with when to come back,
                    // so a burst of honest devices raises no 5xx alarm.
                    crate::gateway::enroll::Throttle::Busy => {
                        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "busy", msg)
                    }
                    _ => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", msg),
                };
                ApiError {
                    retry_after_s: Some(2),
                    ..e
                }
            }
            GatewayError::Denied { code, message } => {
                ApiError::new(crate::api::error::deny_status(code), code.as_str(), message)
            }
            GatewayError::Rotation(r) => {
                let status = match r {
                    crate::envelope::RotationError::Stale(_) => StatusCode::CONFLICT,
                    crate::envelope::RotationError::UnknownPeer(_) => StatusCode::UNAUTHORIZED,
                    _ => StatusCode::BAD_REQUEST,
                };
                ApiError::new(status, r.code(), msg)
            }
            GatewayError::Label(_) => ApiError::new(StatusCode::BAD_REQUEST, "bad_label", msg),
            GatewayError::Selector(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_selector", msg)
            }
            GatewayError::Document(crate::fleet::StateError::VersionConflict { .. }) => {
                ApiError::new(StatusCode::PRECONDITION_FAILED, "version_conflict", msg)
            }
            GatewayError::Document(_) => ApiError::new(StatusCode::BAD_REQUEST, "bad_state", msg),
            GatewayError::State(s) => s.into(),
            GatewayError::Internal(detail) => ApiError::internal(detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    fn api(e: GatewayError) -> (u16, &'static str) {
        let a = ApiError::from(e);
        (a.status.as_u16(), a.code)
    }

    #[test]
    fn each_gateway_error_has_its_status_and_code() {
        assert_eq!(
            api(GatewayError::UnknownNode("n".into())),
            (404, "unknown_node")
        );
        assert_eq!(
            api(GatewayError::JobConflict("x".into())),
            (409, "job_id_conflict")
        );
        assert_eq!(api(GatewayError::Duplicate), (409, "duplicate"));
        assert_eq!(
            api(GatewayError::TenantQuota("max_queued_messages", "x".into())),
            (429, "tenant_quota")
        );
        assert_eq!(
            api(GatewayError::NodeWithoutSend("n".into())),
            (409, "node_without_send")
        );
        assert_eq!(
            api(GatewayError::IdempotencyConflict("x".into())),
            (409, "idempotency_conflict")
        );
        assert_eq!(
            api(GatewayError::OutcomeUnknown("m".into())),
            (503, "outcome_unknown")
        );
        assert_eq!(
            api(StateError::OutcomeUnknown("lost".into()).into()),
            (503, "outcome_unknown")
        );
        assert_eq!(
            api(GatewayError::RecipientOffline("x".into())),
            (503, "recipient_offline")
        );
        assert_eq!(api(GatewayError::UnknownPeer), (401, "unauthorized"));
        use crate::gateway::enroll::Throttle;
        assert_eq!(
            api(GatewayError::Throttled(Throttle::Address)),
            (429, "rate_limited")
        );
        assert_eq!(
            api(GatewayError::Throttled(Throttle::Token)),
            (429, "rate_limited")
        );
        assert_eq!(api(GatewayError::Throttled(Throttle::Busy)), (429, "busy"));
        assert_eq!(
            api(StateError::Unavailable("down".into()).into()),
            (503, "storage_unavailable")
        );
        assert_eq!(
            api(StoreError::QueueFull { retry_after_s: 2 }.into()),
            (429, "queue_full")
        );
        assert_eq!(api(StoreError::StorageFull.into()), (507, "storage_full"));
        assert_eq!(
            api(GatewayError::Audit(
                crate::gateway::audit_sync::Refusal::Gap {
                    expected: 1,
                    got: 2
                }
            )),
            (409, "audit_gap")
        );
    }
}
