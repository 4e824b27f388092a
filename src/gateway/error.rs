//! What a gateway flow can fail with, in the gateway's own terms. The HTTP edge
//! (`api::gateway::error`) gives each a status; nothing in `gateway/` knows one.

use super::enroll::admission::Throttle;
use super::storage::StateError;
use crate::audit::ExtensionError;
use crate::config::TtlError;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The request is malformed or out of bounds.
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    Ttl(#[from] TtlError),
    /// The target is not an enrolled node.
    #[error(
        "{0:?} is not an enrolled node (`outpost nodes` lists them; a device joins with an \
         enrollment token or `outpost trust add --send`, a retired one cannot)"
    )]
    UnknownNode(String),
    /// The target is enrolled without the `send` right: it can never pull what would be
    /// queued for it.
    #[error(
        "{0} is trusted here without the send right, so it can never fetch what is queued \
         for it; nothing was queued. On the gateway: `outpost trust add <its identity \
         document> --send`"
    )]
    NodeWithoutSend(String),
    /// A signed request from a node the trust store does not know (any more).
    #[error("unknown node")]
    UnknownPeer,
    /// A caller's job id is bound to another tool or other arguments.
    #[error("{0}")]
    JobConflict(String),
    /// A caller's idempotency key was used for another request.
    #[error("{0}")]
    IdempotencyConflict(String),
    /// The command (this message id) was sent to the database with its commit and the
    /// answer was lost; the database did not come back in time to learn the outcome.
    #[error(
        "the database went away after command {0} was sent to it: it may or may not be \
         queued; retry with the same Idempotency-Key or message_id (a repeat queues \
         nothing twice), or look it up with GET /v1/messages/{0}"
    )]
    OutcomeUnknown(String),
    /// The request conflicts with where the object stands (why).
    #[error("{1}")]
    Conflict(Conflict, String),
    /// A message id is already in use.
    #[error("message id already used")]
    Duplicate,
    /// A command that is not queued for an offline node.
    #[error("{0}")]
    RecipientOffline(String),
    /// The node's tenant has reached a quota (PROTOCOL §18; the quota's name): nothing
    /// was queued.
    #[error("{1}")]
    TenantQuota(&'static str, String),
    /// No such message (or inbox message).
    #[error("{1}")]
    NotFound(&'static str, String),
    /// An audit upload that would not extend the stored copy.
    #[error(transparent)]
    Audit(#[from] Refusal),
    /// An enrollment (or a retired node's request) refused with a code of PROTOCOL §15.4.
    #[error("{1}")]
    Enroll(&'static str, String),
    /// An unauthenticated request held back before any work (PROTOCOL §15.3).
    #[error("{}", throttle_message(*.0))]
    Throttled(Throttle),
    /// A bearer token that does not allow the request (PROTOCOL §4).
    #[error("{message}")]
    Denied {
        code: crate::token::DenyCode,
        message: String,
    },
    /// A key rotation statement refused (PROTOCOL §15.7).
    #[error(transparent)]
    Rotation(#[from] crate::envelope::RotationError),
    /// A label change refused as a whole (PROTOCOL §16.1).
    #[error(transparent)]
    Label(#[from] crate::fleet::LabelError),
    /// A malformed selector (PROTOCOL §16.2).
    #[error(transparent)]
    Selector(#[from] crate::fleet::BadSelector),
    /// A desired or reported document refused: not an object, too large, or written
    /// over another version than `If-Match` named (PROTOCOL §16.4).
    #[error(transparent)]
    Document(#[from] crate::fleet::StateError),
    /// The gateway's durable state failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// Something that should not happen (sealing to a verified identity failed…).
    #[error("{0}")]
    Internal(String),
}

/// What a request conflicts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// The rollout ended (completed or cancelled): it can no longer change.
    RolloutEnded,
    /// The rollout runs: only a halted one resumes.
    RolloutRunning,
}

impl Conflict {
    pub fn code(&self) -> &'static str {
        match self {
            Conflict::RolloutEnded => "rollout_ended",
            Conflict::RolloutRunning => "rollout_running",
        }
    }
}

fn throttle_message(t: Throttle) -> &'static str {
    match t {
        Throttle::Address => "too many enrollment requests from this address; retry in a few seconds",
        Throttle::Token => "too many enrollment requests from this address, and this one's token is not one this gateway still honours",
        Throttle::Busy => "the gateway is deciding as many enrollments as it takes at once; retry in a few seconds",
    }
}

impl From<crate::store::StoreError> for GatewayError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::State(e.into())
    }
}

/// Why an upload is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("entries must start at the confirmed size {expected}, got {got}")]
    Gap { expected: u64, got: u64 },
    #[error("entry {0} differs from the copy the gateway already holds")]
    Rewritten(u64),
    #[error("entry at position {0} is not an audit entry")]
    BadEntry(u64),
    #[error(transparent)]
    Extension(#[from] ExtensionError),
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Gap { .. } | Refusal::Extension(ExtensionError::IndexMismatch { .. }) => {
                "audit_gap"
            }
            _ => "audit_mismatch",
        }
    }
}
