//! The part of the gateway's state rollouts use (PROTOCOL §17): one record per rollout
//! and one per target node, the caller's idempotency key, and the lease that makes one
//! replica at a time drive a rollout (start a phase, send, halt, cancel), so that every
//! decision is made once. A create, a halt, a resume and a cancel commit their entry of
//! the gateway's own audit log as pending in their own transaction
//! (`storage::enrollments`).

mod records;

pub use records::*;

use super::Fut;
use crate::audit::AuditRecord;

pub trait RolloutState {
    /// Store a new rollout and its targets in one transaction, with `audit` pending.
    /// With `key` (the caller's idempotency key, already scoped to the caller): when a
    /// rollout holds that key already, nothing is written and its id is returned.
    fn rollout_create<'a>(
        &'a self,
        rollout: &'a RolloutRecord,
        targets: &'a [TargetRecord],
        key: Option<&'a str>,
        audit: &'a AuditRecord,
    ) -> Fut<'a, Option<String>>;
    /// Every rollout, newest first.
    fn rollouts(&self) -> Fut<'_, Vec<RolloutRecord>>;
    fn rollout<'a>(&'a self, id: &'a str) -> Fut<'a, Option<RolloutRecord>>;
    /// Its targets, in node id order.
    fn rollout_targets<'a>(&'a self, id: &'a str) -> Fut<'a, Vec<TargetRecord>>;
    /// Replace the rollout if it is still at revision `expected` (and
    /// `rollout.revision` is `expected + 1`), with `audit` pending in the same
    /// transaction; false (nothing written) otherwise.
    fn put_rollout<'a>(
        &'a self,
        rollout: &'a RolloutRecord,
        expected: u64,
        audit: Option<&'a AuditRecord>,
    ) -> Fut<'a, bool>;
    /// Replace these targets' records (an unknown node is added).
    fn put_targets<'a>(&'a self, id: &'a str, targets: &'a [TargetRecord]) -> Fut<'a, ()>;
    /// Add the targets not yet in the rollout; returns how many were added (each node
    /// takes part in a rollout once).
    fn add_targets<'a>(&'a self, id: &'a str, targets: &'a [TargetRecord]) -> Fut<'a, usize>;
    /// Take (or extend) the lease of rollout `id` for `holder` for `ttl_ms` of the
    /// state's clock; false while another holder's lease runs.
    fn rollout_lease<'a>(&'a self, id: &'a str, holder: &'a str, ttl_ms: u64) -> Fut<'a, bool>;
    /// Give the lease back (if `holder` holds it).
    fn rollout_release<'a>(&'a self, id: &'a str, holder: &'a str) -> Fut<'a, ()>;
}
