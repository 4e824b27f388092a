//! The part of the gateway's state enrollment uses (PROTOCOL §15): tokens and their
//! uses, one record per node id and device key, and the trust-store rows an enrollment,
//! approval, retirement or key rotation changes — each write one transaction with what
//! it implies, the decision's entry of the gateway's own audit log included.
//!
//! That entry is written as *pending* (a transactional outbox): the log itself is a
//! Merkle tree whose next index only the appender knows, so the decision's transaction
//! records the entry (with the decision's time) where no replica can miss it, and
//! [`EnrollmentState::audit_append_pending`] later moves it into the log in the same
//! transaction that removes it from pending. A decision without its entry cannot exist,
//! even across a crash; an entry is appended once.

mod records;

use super::{AuditExtension, Fut};
use crate::audit::{AuditEntry, AuditRecord};
use crate::envelope::{IdentityDocument, KeyRotation, Rotated, RotationError};
pub use records::{
    retired_records, rotated_records, settleable, trust_node, Decision, EnrollmentRecord, Facts,
    Kind, RecordState, TenantRoom, TokenRecord, NODE_RIGHTS,
};

/// The audit entry of an approval or rejection, made from the settled record.
pub type SettleAudit<'a> = dyn Fn(&EnrollmentRecord) -> AuditRecord + Send + Sync + 'a;
/// The audit entry of a retirement, made from the retired document and the number of
/// queued messages refused.
pub type RetireAudit<'a> = dyn Fn(&IdentityDocument, usize) -> AuditRecord + Send + Sync + 'a;

/// An entry of the gateway's own audit log a decision committed and the log does not
/// hold yet: its `index` is assigned when it is appended, its `ts_ms` is the decision's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAudit {
    /// Order of the pending entries (oldest first); unique while pending.
    pub seq: u64,
    pub entry: AuditEntry,
}

/// A pending entry as both engines store it: the entry's JSON with index 0.
pub fn pending_json(ts_ms: u64, record: &AuditRecord) -> String {
    let entry = AuditEntry::from_record(0, ts_ms, record.clone());
    String::from_utf8(entry.canonical_bytes()).unwrap_or_default()
}

/// Enrollment's state, which every [`super::GatewayState`] keeps too.
pub trait EnrollmentState: Send + Sync {
    /// Register an enrollment token (`outpost enroll-token create`), with `audit` as a
    /// pending audit entry in the same transaction.
    fn enroll_token_add<'a>(&'a self, token: TokenRecord, audit: &'a AuditRecord) -> Fut<'a, ()>;
    /// Every token, with its uses.
    fn enroll_tokens(&self) -> Fut<'_, Vec<TokenRecord>>;
    /// Revoke a token, with `audit` as a pending audit entry in the same transaction:
    /// `Some(true)`. `None` = no such token, `Some(false)` = already revoked (nothing
    /// written either way).
    fn enroll_token_revoke<'a>(
        &'a self,
        id: &'a str,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Option<bool>>;
    /// Run one enrollment in one transaction: read the [`Facts`] about `node` (its
    /// record, the token `token_id`, the trusted document of its id), ask `decide`,
    /// and apply a [`Decision::Record`]: the record, a use of the token when it says so,
    /// and the node in the trust store (with [`NODE_RIGHTS`]) when the
    /// record is enrolled, and the decision's audit entry as pending. Concurrent enrollments under one token are serialised, so
    /// its limit holds across replicas. The node's address is its node id in the token's
    /// tenant (PROTOCOL §18): the facts are those of that address, and the tenant's
    /// room ([`super::TenantRoom`]: its nodes, trusted or waiting, against its
    /// `max_nodes`) is read in the same transaction. `online` holds the addresses of
    /// this node id heard from recently. Returns the decision.
    fn enroll<'a>(
        &'a self,
        node: &'a IdentityDocument,
        token_id: &'a str,
        online: &'a [String],
        decide: &'a (dyn Fn(&Facts<'_>) -> Decision + Send + Sync),
    ) -> Fut<'a, Decision>;
    /// Every enrollment record.
    fn enrollments(&self) -> Fut<'_, Vec<EnrollmentRecord>>;
    /// Approve (trust it, retiring the key it replaces) or reject the pending
    /// enrollment of `node_id`, or approve its newest rejected one when none is pending
    /// ([`crate::gateway::enroll::settleable`]), in one transaction with
    /// `audit(settled record)` as a pending audit entry; the record is decided at
    /// `now_ms` by `by` (the token or session subject, or the local user); `None` (and
    /// nothing written) when there is none to settle.
    fn settle_enrollment<'a>(
        &'a self,
        node_id: &'a str,
        approve: bool,
        now_ms: u64,
        by: &'a str,
        audit: &'a SettleAudit<'a>,
    ) -> Fut<'a, Option<EnrollmentRecord>>;
    /// Retire the node trusted as `node_id`, in one transaction: every record of the id
    /// (each key it enrolled or rotated away from, a pending one too; a rejected one
    /// stays rejected) reads revoked, it leaves the trust store, every message queued
    /// for it is refused with reason `node_revoked`, and `audit(retired document,
    /// refused)` is a pending audit entry; the trusted key's record is decided by `by`.
    /// Returns those messages' ids; `None` (and nothing written) when no node is trusted
    /// under that id.
    fn revoke_node<'a>(
        &'a self,
        node_id: &'a str,
        now_ms: u64,
        by: &'a str,
        audit: &'a RetireAudit<'a>,
    ) -> Fut<'a, Option<Vec<String>>>;
    /// The record of the newest retired key of `node_id`, if any (a request from a
    /// node the trust store does not know is checked against its document:
    /// `node_revoked`, with when and by whom).
    fn revoked_node<'a>(&'a self, node_id: &'a str) -> Fut<'a, Option<EnrollmentRecord>>;
    /// Apply the key rotation of the node at `address` (PROTOCOL §15.7, §18.1: its node
    /// id, or `<node id>@<tenant>`, which must be the statement's node id in that
    /// tenant) in one transaction, with [`crate::envelope::TrustStore::rotate_at`] on
    /// the node's row: afterwards its
    /// document is the statement's and its retired key is accepted for `grace_ms`. An
    /// enrollment record of the retired key reads [`RecordState::Rotated`] and the new
    /// key gets an enrolled record (same token and kind); `audit` is a pending
    /// audit entry. Only when it says [`Rotated::Applied`]: otherwise nothing is written.
    ///
    /// [`RecordState::Rotated`]: RecordState::Rotated
    fn rotate_node<'a>(
        &'a self,
        address: &'a str,
        rotation: &'a KeyRotation,
        now_ms: u64,
        grace_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Result<Rotated, RotationError>>;
    /// End the grace of `node_id`'s retired key now, in one transaction, with
    /// [`crate::envelope::TrustStore::end_grace`] on the node's row: `Some(true)` when
    /// a grace was running, `Some(false)` when none was, `None` when no node is trusted
    /// under that id.
    fn end_node_grace<'a>(
        &'a self,
        node_id: &'a str,
        now_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Option<bool>>;
    /// Publish the gateway's own key rotation, handed to nodes with their pulls until
    /// `until_ms` by every replica, with `audit` as a pending audit entry. Storing the
    /// statement it already holds writes nothing (it keeps the first deadline, and the
    /// rotation is audited once however many replicas follow it).
    fn put_gateway_rotation<'a>(
        &'a self,
        rotation: &'a KeyRotation,
        until_ms: u64,
        audit: &'a AuditRecord,
    ) -> Fut<'a, ()>;
    /// The gateway's newest key rotation and the end of its grace, if any.
    fn gateway_rotation(&self) -> Fut<'_, Option<(KeyRotation, u64)>>;

    /// Up to `max` pending audit entries, oldest first.
    fn audit_pending(&self, max: usize) -> Fut<'_, Vec<PendingAudit>>;
    /// In one transaction: extend `node`'s log with `ext` (the pending entries `seqs`,
    /// indexed and signed) and remove `seqs` from pending. `Ok(false)`, and nothing
    /// written, when the log does not end at `ext.start` or one of `seqs` is no longer
    /// pending (another replica appended first: read both again).
    fn audit_append_pending<'a>(
        &'a self,
        node: &'a str,
        ext: AuditExtension,
        seqs: &'a [u64],
    ) -> Fut<'a, bool>;
}
