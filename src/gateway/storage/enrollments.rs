//! The part of the gateway's state enrollment uses (PROTOCOL §15): tokens and their
//! uses, one record per node id and device key, and the trust-store rows an enrollment,
//! approval or retirement changes — each write one transaction with what it implies.

use super::Fut;
use crate::envelope::{IdentityDocument, KeyRotation, Rotated, RotationError};
use crate::gateway::enroll::{Decision, EnrollmentRecord, Facts, TokenRecord};

/// Enrollment's state, which every [`super::GatewayState`] keeps too.
pub trait EnrollmentState: Send + Sync {
    /// Register an enrollment token (`outpost enroll-token create`).
    fn enroll_token_add(&self, token: TokenRecord) -> Fut<'_, ()>;
    /// Every token, with its uses.
    fn enroll_tokens(&self) -> Fut<'_, Vec<TokenRecord>>;
    /// Revoke a token: `None` = no such token, `Some(false)` = already revoked.
    fn enroll_token_revoke<'a>(&'a self, id: &'a str) -> Fut<'a, Option<bool>>;
    /// Run one enrollment in one transaction: read the [`Facts`] about `node` (its
    /// record, the token `token_id`, the trusted document of its id), ask `decide`,
    /// and apply a [`Decision::Record`]: the record, a use of the token when it says so,
    /// and the node in the trust store (with [`super::enroll::NODE_RIGHTS`]) when the
    /// record is enrolled. Concurrent enrollments under one token are serialised, so
    /// its limit holds across replicas. Returns the decision.
    fn enroll<'a>(
        &'a self,
        node: &'a IdentityDocument,
        token_id: &'a str,
        online: bool,
        decide: &'a (dyn Fn(&Facts<'_>) -> Decision + Send + Sync),
    ) -> Fut<'a, Decision>;
    /// Every enrollment record.
    fn enrollments(&self) -> Fut<'_, Vec<EnrollmentRecord>>;
    /// Approve (trust it, retiring the key it replaces) or reject the pending
    /// enrollment of `node_id`, in one transaction; `None` when none is pending.
    fn settle_enrollment<'a>(
        &'a self,
        node_id: &'a str,
        approve: bool,
        now_ms: u64,
    ) -> Fut<'a, Option<EnrollmentRecord>>;
    /// Retire the node trusted as `node_id`, in one transaction: its key is recorded as
    /// revoked, it leaves the trust store, and every message queued for it is refused
    /// with reason `node_revoked`. Returns those messages' ids; `None` when no node is
    /// trusted under that id.
    fn revoke_node<'a>(&'a self, node_id: &'a str, now_ms: u64) -> Fut<'a, Option<Vec<String>>>;
    /// The document of the newest retired key of `node_id`, if any (a request from a
    /// node the trust store does not know is checked against it: `node_revoked`).
    fn revoked_node<'a>(&'a self, node_id: &'a str) -> Fut<'a, Option<IdentityDocument>>;
    /// Apply a node's key rotation (PROTOCOL §15.7) in one transaction, with
    /// [`crate::envelope::TrustStore::rotate`] on the node's row: afterwards its
    /// document is the statement's and its retired key is accepted for `grace_ms`.
    fn rotate_node<'a>(
        &'a self,
        rotation: &'a KeyRotation,
        now_ms: u64,
        grace_ms: u64,
    ) -> Fut<'a, Result<Rotated, RotationError>>;
    /// End the grace of `node_id`'s retired key now, in one transaction, with
    /// [`crate::envelope::TrustStore::end_grace`] on the node's row: `Some(true)` when
    /// a grace was running, `Some(false)` when none was, `None` when no node is trusted
    /// under that id.
    fn end_node_grace<'a>(&'a self, node_id: &'a str, now_ms: u64) -> Fut<'a, Option<bool>>;
    /// Publish the gateway's own key rotation, handed to nodes with their pulls until
    /// `until_ms` by every replica. Storing the statement it already holds keeps the
    /// first deadline.
    fn put_gateway_rotation<'a>(&'a self, rotation: &'a KeyRotation, until_ms: u64) -> Fut<'a, ()>;
    /// The gateway's newest key rotation and the end of its grace, if any.
    fn gateway_rotation(&self) -> Fut<'_, Option<(KeyRotation, u64)>>;
}
