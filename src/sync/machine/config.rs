//! What the sync machine is tuned by: batch sizes and how often each chore is due.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineConfig {
    pub poll_wait_s: u64,
    /// Envelopes per outbox upload.
    pub flush_batch: u32,
    /// Envelopes asked for per pull (the gateway caps it at 1,000). A backlog drains in
    /// a few round trips; the node opens and stores each pulled batch as one.
    pub pull_batch: u32,
    /// Audit entries per audit upload.
    pub audit_batch: u32,
    /// After a pull the node could not store (its store full), the next pull waits this
    /// long: the envelopes stay queued upstream, and pulling them again at once would
    /// only spin.
    pub stall_retry_ms: u64,
    /// Push the outbox at least this often even without a wake-up (catches messages
    /// whose retry time came).
    pub outbox_every_ms: u64,
    pub audit_every_ms: u64,
    pub revocations_every_ms: u64,
    /// How often the inventory is read to see whether it moved (PROTOCOL §16.3).
    pub inventory_every_ms: u64,
    /// The reconnect backoff's longest wait (`upstream.retry_max_s`).
    pub retry_max_ms: u64,
}

impl Default for MachineConfig {
    fn default() -> Self {
        Self {
            poll_wait_s: 25,
            flush_batch: 50,
            pull_batch: 500,
            audit_batch: 2_000,
            stall_retry_ms: 2_000,
            outbox_every_ms: 5_000,
            audit_every_ms: 30_000,
            revocations_every_ms: 60_000,
            inventory_every_ms: 60_000,
            retry_max_ms: 300_000,
        }
    }
}
