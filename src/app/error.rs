//! The node's domain errors: what went wrong, in the node's own terms. Each has a stable
//! snake_case `code()` and a `public_message()` safe to show a caller (the HTTP API and
//! the `TASK_RESULT` errors both use them); `is_transient()` says whether the same work
//! may succeed later (kept and retried) or never will (answered and dropped). Nothing
//! here knows an HTTP status: the one mapping to HTTP is in `api::error`.

use crate::config::TtlError;
use crate::envelope::OpenError;
use crate::fleet::StateError;
use crate::store::StoreError;
use crate::token::{DenyCode, DenyReason};
use crate::tools::ToolError;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Shutting down, recovering, or the store is not writable: nothing was done.
    #[error("{0}")]
    NotReady(&'static str),
    /// The request itself is wrong.
    #[error("{0}")]
    BadRequest(String),
    /// No valid capability token for this: `code` says whether there was none we could
    /// verify (`Unauthorized`) or a valid one that does not allow it (`Forbidden`).
    #[error("{message}")]
    Denied {
        code: DenyCode,
        reason: DenyReason,
        message: String,
    },
    #[error("no tool named {0:?}; see GET /v1/tools")]
    UnknownTool(String),
    /// A message, inbox entry… that does not exist.
    #[error("{0}")]
    NotFound(&'static str),
    /// The caller reused a `job_id` for another tool or other arguments.
    #[error("{0}")]
    JobConflict(String),
    /// The caller reused an outbox message id / idempotency key for another request.
    #[error("{0}")]
    IdempotencyConflict(String),
    /// Refused before anything ran or was written: storing it would take room another
    /// writer needs (the tool results' budget is spent, or the disk is nearly full).
    #[error("{0}")]
    NoRoom(String),
    /// The tool ran, but its result is larger than the node keeps
    /// (`queue.max_result_bytes`): it was neither stored nor answered.
    #[error(
        "the tool's result is {size} bytes, above queue.max_result_bytes ({max}); it was not kept"
    )]
    ResultTooLarge { size: u64, max: u64 },
    #[error(transparent)]
    Ttl(#[from] TtlError),
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error(transparent)]
    Envelope(#[from] OpenError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A desired or reported state write refused (PROTOCOL §10.4).
    #[error(transparent)]
    State(#[from] StateError),
}

const INTERNAL: &str = "internal error; see the daemon log";

impl NodeError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::BadRequest(message.into())
    }

    /// The stable error code callers branch on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotReady(_) => "not_ready",
            Self::BadRequest(_) => "bad_request",
            Self::Denied { code, .. } => code.as_str(),
            Self::UnknownTool(_) => "unknown_tool",
            Self::NotFound(_) => "not_found",
            Self::JobConflict(_) => "job_id_conflict",
            Self::IdempotencyConflict(_) => "idempotency_conflict",
            Self::NoRoom(_) => "storage_full",
            Self::ResultTooLarge { .. } => "result_too_large",
            Self::Ttl(TtlError::Zero) => "bad_request",
            Self::Ttl(TtlError::TooLong { .. }) => "ttl_too_long",
            Self::Tool(e) => e.code(),
            Self::Envelope(e) => e.code(),
            Self::State(StateError::VersionConflict { .. }) => "version_conflict",
            Self::State(_) => "bad_state",
            Self::Store(e) => match e {
                StoreError::QueueFull { .. } => "queue_full",
                StoreError::StorageFull => "storage_full",
                StoreError::TooLarge { .. } => "payload_too_large",
                StoreError::Expired => "bad_request",
                _ => "internal",
            },
        }
    }

    /// What the caller is told. Internal details (engine errors, paths) are not in it:
    /// [`NodeError::is_internal`] errors are logged where they are answered.
    pub fn public_message(&self) -> String {
        match self {
            Self::Store(e) => match e {
                StoreError::QueueFull { .. } => {
                    "the recipient's queue is at its cap; retry later".into()
                }
                StoreError::StorageFull => "the store is out of space; nothing was written".into(),
                StoreError::TooLarge { .. } => "message exceeds queue.max_message_bytes".into(),
                StoreError::Expired => "message already expired".into(),
                _ => INTERNAL.into(),
            },
            other => other.to_string(),
        }
    }

    /// An unexpected failure whose detail goes to the log, not to the caller.
    pub fn is_internal(&self) -> bool {
        self.code() == "internal"
    }

    /// Seconds a caller should wait before retrying, when that is known.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            Self::Store(StoreError::QueueFull { retry_after_s }) => Some((*retry_after_s).max(1)),
            Self::Store(StoreError::StorageFull) | Self::NoRoom(_) => Some(30),
            _ => None,
        }
    }

    /// Our own trouble (full queue or disk, shutting down, a tool that timed out or
    /// failed, an internal error): the same work may succeed later, so work behind it
    /// is kept and retried rather than dropped.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::NotReady(_) | Self::NoRoom(_) => true,
            Self::Store(StoreError::TooLarge { .. } | StoreError::Expired) => false,
            Self::Store(_) => true,
            Self::Tool(e) => !matches!(e, ToolError::UnknownTool(_) | ToolError::BadRequest(_)),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_messages_and_transience() {
        let full = NodeError::Store(StoreError::QueueFull { retry_after_s: 0 });
        assert_eq!(full.code(), "queue_full");
        assert_eq!(full.retry_after_s(), Some(1));
        assert!(full.is_transient());
        let engine = NodeError::Store(StoreError::Engine("disk I/O error at /var/lib".into()));
        assert!(engine.is_internal() && engine.is_transient());
        assert!(!engine.public_message().contains("/var/lib"));
        let ttl = NodeError::Ttl(TtlError::TooLong {
            requested: 9,
            max: 1,
        });
        assert_eq!((ttl.code(), ttl.is_transient()), ("ttl_too_long", false));
        assert!(!NodeError::UnknownTool("x".into()).is_transient());
        assert!(NodeError::NotReady("stopping").is_transient());
    }
}
