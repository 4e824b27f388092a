//! What `outpost gateway migrate` moves from one engine to another: read from the
//! embedded store by [`super::embedded::snapshot::read`], written into PostgreSQL by
//! `Postgres::import`.

use super::JobRecord;
use crate::envelope::TrustStore;
use crate::store::StoredMessage;

/// Everything the embedded store holds that moves.
pub struct Snapshot {
    pub messages: Vec<StoredMessage>,
    pub jobs: Vec<(String, JobRecord)>,
    pub requests: Vec<(String, String)>,
    pub results: Vec<(String, Vec<u8>)>,
    pub revocations: Vec<(u64, String)>,
    pub trust: TrustStore,
    pub audit: Vec<AuditCopy>,
    /// The tenant registry (PROTOCOL §18).
    pub tenants: Vec<crate::fleet::tenant::TenantRecord>,
}

/// One node's audit copy: its id, entries in index order, checkpoints `(size, note)`.
pub type AuditCopy = (String, Vec<Vec<u8>>, Vec<(u64, String)>);
