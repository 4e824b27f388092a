//! The quotas on what a tenant queues (PROTOCOL §18): `max_queued_messages` and
//! `max_queued_bytes` of the messages waiting for the tenant's nodes. Checked before a
//! command, a tool call or a node's forward is queued; over one, nothing is queued and
//! the caller gets 429 `tenant_quota` naming it.
//!
//! Per-request reads of every queue would make a command's cost grow with the fleet, so
//! the check reads a snapshot: the registry and (only while some tenant has such a
//! quota) each tenant's queued messages and bytes, read again at most once a second,
//! plus what this process queued since. A quota can therefore be passed by what other
//! replicas queued within that second, and a tenant whose nodes drained is admitted
//! again within a second.
//!
//! `max_commands_per_s` is a token bucket per tenant in this process
//! ([`crate::fleet::rate::Bucket`]), taken by each command and tool call for one of the
//! tenant's nodes before anything is sealed or written: a tenant that floods is
//! refused for the cost of its request's parsing, and the other tenants' commands do
//! not queue behind its. Each replica keeps its own buckets: N replicas admit up to N
//! times the rate.

use std::collections::HashMap;

use crate::fleet::rate::Bucket;
use crate::fleet::tenant::{Quota, Quotas, Usage};

/// How old a snapshot may be.
pub(super) const REREAD_MS: u64 = 1_000;

#[derive(Default)]
pub struct QuotaGate {
    snapshot: std::sync::Mutex<Snapshot>,
    /// One re-read at a time; the others use the snapshot they find.
    pub(super) rereading: tokio::sync::Mutex<()>,
    /// The command-rate buckets of the tenants that have `max_commands_per_s`.
    buckets: std::sync::Mutex<HashMap<String, Bucket>>,
}

/// What the gate checks against: when it was read, the quotas of the tenants that have
/// one on what they queue, and what each of them has queued.
#[derive(Default)]
pub(super) struct Snapshot {
    pub read_ms: Option<u64>,
    pub quotas: HashMap<String, Quotas>,
    pub usage: HashMap<String, Usage>,
}

impl QuotaGate {
    pub(super) fn snapshot(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        self.snapshot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take one command of `tenant` at `now_ms` from its bucket for `rate` a second.
    pub(super) fn take_command(&self, tenant: &str, rate: u64, now_ms: u64) -> bool {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !b.contains_key(tenant) {
            // One entry per tenant with the quota: bounded by the registry.
            b.insert(tenant.to_string(), Bucket::full(rate, now_ms));
        }
        b.get_mut(tenant).is_some_and(|k| k.take(rate, now_ms))
    }
}

/// Whether one more message of `bytes` for a node of a tenant with `quotas` and `usage`
/// is admitted; the refusal names the quota. Pure.
pub fn admit(quotas: &Quotas, usage: &Usage, bytes: u64) -> Result<(), Quota> {
    quotas.admits_message(usage, bytes)
}
