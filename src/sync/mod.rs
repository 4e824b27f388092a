//! Node ↔ gateway sync (PROTOCOL §12.6, §5, §13.4).
//!
//! - [`machine`]: the protocol as a pure state machine `(event, now) → action`
//!   (reconnect order, backoff, what is due), property-tested.
//! - [`transport`]: signed HTTP requests with reqwest + rustls.
//! - [`capped`]: every peer's answer read with a cap (streamed, stopped once over).
//! - [`worker`]: the thin async loop that performs each action and feeds the outcome
//!   back as the next event.
//! - [`wire`]: the node ↔ gateway messages as serde types, shared by both roles (the
//!   gateway's node API serialises them, the worker deserialises them), plus the
//!   record the inbox and tasks queues keep.
//!
//! The node daemon plugs in through [`NodeLink`] (the one seam: how a pulled envelope
//! enters the node's receive pipeline, how the node signs an audit checkpoint, which
//! key it pins for its gateway) and
//! gets a [`SyncHandle`] for `/v1/status`, metrics and wake-ups.
//!
//! Store conventions the loop relies on: the node's outgoing envelopes sit in queue
//! [`Q_OUTBOX`] (any peer: the gateway forwards what is not addressed to it); state kept
//! in KV namespaces [`KV_SYNC`] and [`KV_META`]; revoked token ids in KV namespace [`KV_REVOKED`]
//! (key = jti), which the node's token check consults.

pub mod advice;
pub mod capped;
mod chores;
pub mod enroll;
pub mod machine;
mod pull;
mod report;
mod rotate;
pub mod state_report;
pub mod transport;
pub mod wire;
pub mod worker;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::Notify;

pub use machine::{Action, Event, Machine, MachineConfig, Phase};
pub use transport::{SyncError, Transport};
pub use worker::{spawn, SyncDeps};

pub use crate::store::names::{KV_META, KV_REVOKED, KV_SYNC, Q_OUTBOX};
/// KV key (in [`KV_META`]) of the audit size the gateway last confirmed (decimal text;
/// the node's `/v1/status` reads it as `audit.synced_size`).
pub const KEY_AUDIT_SYNCED: &str = "audit_synced_size";
pub const KEY_REVOCATIONS_VERSION: &str = "revocations_version";

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the node did with a pulled envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundOutcome {
    /// Durably stored: ack it.
    Accepted,
    /// Already had it: ack it (the gateway must stop resending).
    Duplicate,
    /// Refused by the pipeline (bad signature, expired …): ack it too, a resend would
    /// be refused again. `code` is logged.
    Rejected { code: String },
    /// Could not store it now (store full, shutting down): leave it queued upstream and
    /// stop this batch so FIFO order holds.
    Retry,
}

/// The node daemon side of sync. Contract:
/// - `receive_batch` runs the full receive pipeline on each envelope's JSON bytes and
///   resolves only after the outcomes are durable (Accepted means fsynced); one
///   outcome per envelope, in order, and no envelope after a `Retry` was stored.
/// - `audit_batch(confirmed, max)` returns the node's audit entries from the gateway's
///   confirmed size (at most `max`) with a checkpoint signed for exactly that extended
///   tree — `AuditLog::sync_batch` does this — or `Ok(None)` when nothing is new.
pub trait NodeLink: Send + Sync + 'static {
    fn receive_batch(&self, envelopes: Vec<Vec<u8>>) -> BoxFuture<'_, Vec<InboundOutcome>>;
    fn audit_batch(
        &self,
        confirmed_size: u64,
        max_entries: usize,
    ) -> BoxFuture<'_, Result<Option<crate::audit::SyncBatch>, String>>;
    /// An outbound message left the outbox without delivery: `event` is `dead`
    /// (attempts exhausted) or `rejected` (refused upstream, `reason` = its code), so the
    /// node can audit and count it.
    fn outbound_failed<'a>(
        &'a self,
        event: &'static str,
        peer: &'a str,
        message_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ()>;
    /// The signing key the node's trust store pins for `peer` (its gateway's signed
    /// time statements are verified with it), if it has one.
    fn pinned_key(&self, peer: &str) -> Option<ed25519_dalek::VerifyingKey>;
    /// The TLS pin (`tls_spki_sha256`) of `peer`'s trusted identity document, if it
    /// has one: the node's upstream TLS is verified by it (crate::tls_pin).
    fn pinned_tls(&self, peer: &str) -> Option<[u8; 32]> {
        let _ = peer;
        None
    }
    /// A key rotation `outpost identity rotate` left for the gateway, if any (a file
    /// read: asked while the link is up, every few seconds at most).
    fn pending_rotation(&self) -> Option<OwnRotation>;
    /// The gateway handed over its own key rotation with a pull: trust its new key
    /// (keeping the retired one for the grace), unless the node already does. Cheap
    /// when nothing changes: it comes with every pull during the grace.
    fn gateway_rotated(&self, rotation: crate::envelope::KeyRotation) -> BoxFuture<'_, ()>;
    /// The gateway accepted `rotation`: switch to the new keys (files, then memory).
    fn rotation_accepted(
        &self,
        rotation: crate::envelope::KeyRotation,
    ) -> BoxFuture<'_, Result<(), String>>;
    /// The desired and reported versions the node holds (memory: asked on every pull).
    fn state_versions(&self) -> StateVersions;
    /// The node's reported document as stored (a store read).
    fn reported_state(&self) -> Result<crate::fleet::Versioned, String>;
    /// A new reading of the node's inventory (PROTOCOL §16.3): file reads, no writes.
    fn inventory(&self) -> BoxFuture<'_, crate::fleet::Inventory>;
}

/// The desired and reported versions a node holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateVersions {
    pub desired: u64,
    pub reported: u64,
}

/// A rotation of this node's keys waiting for the gateway.
pub struct OwnRotation {
    pub statement: crate::envelope::KeyRotation,
    /// `identity rotate --compromised`: asked with `grace=none`.
    pub no_grace: bool,
    /// With `no_grace`, the new pair: once the gateway applied the rotation it refuses
    /// the retired key, so a retry after a lost answer is signed with this one.
    pub next: Option<Arc<crate::envelope::Keys>>,
}

/// What `/v1/status` shows under `upstream`.
#[derive(Debug, Clone, Default)]
pub struct SyncStatus {
    pub state: String,
    /// The gateway URL in use (one of `upstream.urls`).
    pub url: String,
    pub connected: bool,
    pub last_ok_ms: Option<u64>,
    pub last_error: Option<String>,
    /// What to do about `last_error` ([`advice`]).
    pub hint: Option<String>,
    /// The class of `last_error` ([`advice::Advice::class`]).
    pub reason: Option<&'static str>,
    /// The first failure since the gateway last answered.
    pub failing_since_ms: Option<u64>,
    /// When the reconnect backoff tries again.
    pub next_attempt_at_ms: Option<u64>,
    pub audit_synced_size: u64,
    pub pulled: u64,
    pub pushed: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub status: Mutex<SyncStatus>,
    pub wake: Notify,
    /// Local software wrote reported state: report it (ends a long-poll).
    pub report_wake: Notify,
    /// The gateway said (signed) that this node's time is ahead of its own, and the
    /// node's clock does not agree with the gateway's yet (RELIABILITY F2).
    pub clock_ahead: std::sync::atomic::AtomicBool,
}

/// Handle the daemon keeps: status for the API, `wake()` after queueing outbox work.
#[derive(Debug, Clone)]
pub struct SyncHandle {
    pub(crate) shared: Arc<Shared>,
    pub url: String,
}

impl SyncHandle {
    /// Whether the node knows its time is ahead of its gateway's (signed word from the
    /// gateway, a clock that does not agree yet): an envelope sealed now would carry
    /// that time and be refused upstream as `not_yet_valid`.
    pub fn clock_ahead(&self) -> bool {
        self.shared
            .clock_ahead
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The node queued something for upstream: interrupt the long-poll and push now.
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// Local software wrote reported state: interrupt the long-poll and report it.
    pub fn report_state(&self) {
        self.shared.report_wake.notify_one();
    }

    pub fn status(&self) -> SyncStatus {
        self.shared
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn connected(&self) -> bool {
        self.status().connected
    }

    /// `{state, url, last_ok_ms, last_error, audit_synced_size}` for `/v1/status`.
    pub fn status_json(&self) -> Value {
        let s = self.status();
        json!({
            "state": s.state,
            "url": if s.url.is_empty() { self.url.clone() } else { s.url.clone() },
            "connected": s.connected,
            "last_ok_ms": s.last_ok_ms,
            "last_error": s.last_error,
            "hint": s.hint,
            "reason": s.reason,
            "failing_since_ms": s.failing_since_ms,
            "next_attempt_at_ms": s.next_attempt_at_ms,
            "audit_synced_size": s.audit_synced_size,
            "envelopes_pulled": s.pulled,
            "envelopes_pushed": s.pushed,
        })
    }
}
