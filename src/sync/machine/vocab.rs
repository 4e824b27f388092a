//! What the sync machine hears and says: the connection's phase, the events the worker
//! feeds it, and the one action it answers each with.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not connected; next attempt at `retry_at_ms`.
    Offline,
    /// Waiting for the answer to the first pull (pending count).
    Handshake,
    /// Draining messages the gateway stored while we were away.
    Flushing,
    /// Stored messages drained; live traffic.
    Live,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Offline => "offline",
            Phase::Handshake => "connecting",
            Phase::Flushing => "flushing",
            Phase::Live => "connected",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Start,
    /// A `Wait` ended on its own.
    Timer,
    /// The node queued something (or a long-poll was interrupted for that reason).
    Woken,
    /// A pull answered: `pending_count` as the gateway reported it (including this
    /// batch) and how many of the batch the node took (acked).
    Pulled {
        pending_count: u64,
        received: u64,
        /// The node could not store part of the batch (left queued upstream).
        stalled: bool,
    },
    /// An outbox upload finished; `more` = a full batch went, there may be more.
    Pushed {
        more: bool,
    },
    AuditSynced,
    RevocationsFetched,
    /// Local software wrote reported state (or a long-poll was interrupted for that).
    StateWritten,
    /// A [`Action::ReportState`] is done: the report went, or nothing had changed.
    StateReported,
    /// A request failed (network, 5xx, 401 …). `jitter` in [-1, 1] from the caller's RNG.
    /// `slow`: it was sent but its answer did not come within the timeout.
    Failed {
        error: String,
        jitter: f64,
        slow: bool,
    },
    /// The gateway refused the request's timestamp and stated its time, `gateway_ms`
    /// (verified: signed by the gateway, for this request).
    ClockSkew {
        error: String,
        gateway_ms: u64,
    },
    /// The answer to [`Action::CorrectTime`]: whether the node's time moved back.
    TimeCorrected {
        moved: bool,
        jitter: f64,
    },
    Shutdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pull {
        wait_s: u64,
        max: u32,
    },
    Push {
        max: u32,
    },
    SyncAudit {
        max_entries: u32,
    },
    FetchRevocations,
    /// Report the node's state (`POST …/report`). `fresh`: the first report of this
    /// connection, everything in it; otherwise the worker reads the inventory and sends
    /// only what moved or was written since the last report, or nothing.
    ReportState {
        fresh: bool,
    },
    /// Sleep until `until_ms` (or a wake-up / shutdown).
    Wait {
        until_ms: u64,
    },
    /// Move the node's time back to `gateway_ms` if its clock agrees (`store::time`).
    CorrectTime {
        gateway_ms: u64,
    },
    Stop,
}
