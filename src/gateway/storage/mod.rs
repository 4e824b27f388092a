//! The gateway's state behind one interface ([`GatewayState`]), so that the handlers
//! speak of commands, jobs, results, deliveries, the inbox, revocations and audit
//! copies — never of queue, KV or dedup-scope names.
//!
//! Two implementations: [`embedded::Embedded`], the store every node runs too (a single
//! file set on the gateway's disk, one process), and `postgres::Postgres` (gateway
//! replicas sharing one database). Everything above them — the handlers, the sweeper,
//! liveness, events — is the same on both; what only replicas share is its own trait
//! ([`SharedState`]), and the events every engine keeps are [`EventTable`].
//!
//! Contract every implementation keeps (the handlers rely on it):
//! - A future that resolves `Ok` has made its write durable (fsynced, or committed by
//!   the database). Nothing is acknowledged to a caller before that. (Events are kept
//!   as long as the engine keeps them: [`EventTable`].)
//! - Per node, [`GatewayState::take_batch`] hands out messages in the order they were
//!   queued (priority first, then arrival), never one that expired. What is not
//!   acknowledged is handed out again by the node's next pull (the node deduplicates).
//! - A node has one pull at a time: [`GatewayState::begin_pull`] supersedes the node's
//!   earlier pulls, at whichever replica they are held, and a superseded pull hands
//!   out nothing more — so two pulls never hand the same message out concurrently.
//! - [`GatewayState::queue_command`] stores a job binding and its command in one
//!   transaction: either both exist afterwards or neither; so does
//!   [`GatewayState::queue_keyed_command`] with a caller's idempotency key.
//! - An enqueue whose commit was sent but not answered (the database went away) is
//!   never answered as not written: it is settled (looked up once the database is
//!   back) or answered [`StateError::OutcomeUnknown`].
//! - Ids are unique per gateway: a second message with a known id is
//!   [`Queued::Duplicate`] and nothing is written.

pub mod embedded;
mod enrollments;
mod events;
pub mod fleet;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod rollouts;
mod shared;
#[cfg(feature = "postgres")]
pub mod snapshot;
pub mod tenants;
mod trust_edit;

use std::future::Future;
use std::pin::Pin;

use crate::audit::AuditRecord;
pub use crate::daemon::trust::Update as TrustUpdate;
use crate::envelope::TrustStore;
pub use crate::store::{ExpiredMessage, MessageStatus, QueueStat};
pub use enrollments::{
    pending_json, retired_records, rotated_records, settleable, trust_node, Decision,
    EnrollmentRecord, EnrollmentState, Facts, Kind, PendingAudit, RecordState, RetireAudit,
    SettleAudit, TenantRoom, TokenRecord, NODE_RIGHTS,
};
pub use events::{EventRow, EventTable};
pub use shared::SharedState;
pub use trust_edit::TrustEdit;

/// Queue names the state reports in [`QueueStat::queue`] (and `/v1/status`, metrics
/// and logs show): messages waiting for a node (`peer` = the node)…
pub const QUEUE_TO_NODE: &str = crate::store::names::Q_TO_NODE;
/// …and messages nodes sent to the gateway itself (`peer` = the sender).
pub const QUEUE_INBOX: &str = crate::store::names::Q_GATEWAY_INBOX;

/// What every call returns: a boxed future, so the trait stays object-safe
/// (`Arc<dyn GatewayState>`) without a macro crate.
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, StateError>> + Send + 'a>>;

/// Why the gateway's state could not answer. The HTTP edge maps each to a status
/// (`api::gateway`); nothing here knows one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The store's own error (queue full, storage full, expired, corrupt, i/o…).
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The backing service cannot be reached now (a database restarting); retry.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A record the gateway wrote earlier cannot be read back.
    #[error("stored record unreadable: {0}")]
    Corrupt(String),
    /// The write was sent with its commit, and the answer was lost (the connection or
    /// the database went away): it may or may not be stored. Never "nothing was
    /// written" — a caller that retries without its idempotency key could duplicate it.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
}

/// A sealed envelope waiting for its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForNode {
    pub node_id: String,
    pub message_id: String,
    pub payload_type: String,
    pub priority: u8,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    /// The envelope as JSON bytes, exactly as the node will receive it.
    pub envelope: Vec<u8>,
    /// `queue.max_attempts`, kept with the message for the console. The gateway does not
    /// dead-letter by it (PROTOCOL §14: retries and dead letters are the node outbox's):
    /// a message a node never acknowledges is handed out again until it expires.
    pub max_attempts: u32,
    /// The event the message's enqueue causes (`(ts_ms, event as JSON)`), committed to
    /// the state's [`EventTable`] with the message (in the same transaction, where the
    /// engine has them), so the caller need not wait for a second commit; none when the
    /// enqueue writes nothing (a duplicate).
    pub event: Option<(u64, String)>,
}

/// What a caller's job id is bound to at the gateway: a repeat by the same caller for
/// the same node, tool and arguments is answered from it; anything else is a conflict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobRecord {
    pub message_id: String,
    pub tool_name: String,
    pub args_sha256: String,
}

/// A caller's job, stored with its TASK_REQUEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// [`job_key`] of (node, caller, job id).
    pub key: String,
    pub record: JobRecord,
}

/// A caller's idempotency key for a command, stored with the command in its
/// transaction: a repeat of the same request is answered from it, another request
/// naming the same message id is a conflict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommandKey {
    /// The command's message id (the key stands for it: `gateway::commands`).
    pub message_id: String,
    /// The token subject that used the key (keys are scoped per subject).
    pub subject: String,
    /// sha256 (hex) of what was asked: node, command type, body, TTL.
    pub request_sha256: String,
    /// The command's expiry, as the first answer gave it.
    pub expires_at_ms: u64,
    /// The key is answered until then (at least the command's life), then forgotten.
    pub keep_until_ms: u64,
}

/// Key of a caller's job for one node: job ids are scoped per caller (token subject)
/// and node, so two callers' ids never collide.
pub fn job_key(node_id: &str, subject: &str, job_id: &str) -> String {
    let scope = crate::audit::sha256_hex(format!("{node_id}\n{subject}").as_bytes());
    format!("{scope}/{job_id}")
}

/// Outcome of storing a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// Durable.
    Queued,
    /// The id is known (queued, delivered or remembered): nothing was written.
    Duplicate,
}

/// A message handed to its node by a pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub message_id: String,
    pub envelope: Vec<u8>,
}

/// What one look of a pull asks for ([`GatewayState::take_batch`]).
#[derive(Debug, Clone, Copy)]
pub struct Take<'a> {
    /// The pull's number ([`GatewayState::begin_pull`]).
    pub pull: u64,
    pub max: usize,
    pub max_bytes: usize,
    /// The last message of the node's previous batch, when the node pipelines.
    pub after: Option<&'a str>,
}

/// A pull's batch and how many messages were waiting when it was taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullBatch {
    pub deliveries: Vec<Delivery>,
    pub pending: u64,
    /// Nothing was handed out: a newer pull of the same node began (see
    /// [`GatewayState::begin_pull`]); this one answers empty at once.
    pub superseded: bool,
}

/// A node's ack: ids it received, and ids it refused with its code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAck {
    pub delivered: Vec<String>,
    pub rejected: Vec<(String, String)>,
    /// The events the ack may cause (`(ts_ms, [(message id, event as JSON)])`): for each
    /// id it removes, that id's event is committed to the state's [`EventTable`] with
    /// the removal (in the same transaction, where the engine has them, so a replica
    /// that dies after the commit cannot lose it); none for an id it did not remove.
    pub events: (u64, Vec<(String, String)>),
}

/// A message a node sent to the gateway itself (not a result): kept in the inbox
/// until an operator acknowledges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxMessage {
    pub from_node: String,
    pub message_id: String,
    pub payload_type: String,
    pub priority: u8,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    /// The record the inbox lists (`sync::wire::InboxRecord` bytes).
    pub record: Vec<u8>,
    /// The id is refused as a replay until then.
    pub remember_until_ms: u64,
}

/// A node's TASK_RESULT, filed under the request it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiledResult {
    /// The TASK_REQUEST's message id (or the result's own, when it names none of this
    /// node's requests).
    pub request_id: String,
    /// The result's own envelope id: refused as a replay until `remember_until_ms`.
    pub result_message_id: String,
    /// The decrypted result as the node sent it.
    pub plaintext: Vec<u8>,
    pub remember_until_ms: u64,
}

/// One thing an upload brought that the gateway keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upload {
    Result(FiledResult),
    Inbox(InboxMessage),
}

/// A message waiting in a node's queue, as the console lists it (no envelope).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    pub message_id: String,
    pub payload_type: String,
    pub priority: u8,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub attempts: u32,
    /// Deliveries before it is dead-lettered; 0 = until expiry.
    pub max_attempts: u32,
}

/// Outcome of a revocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// Added under this version (versions only grow).
    Added { version: u64 },
    /// Already revoked; nothing changed.
    Duplicate,
}

/// The revocation list from version `since` on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevocationList {
    /// Token ids revoked after `since`.
    pub revoked: Vec<String>,
    /// The newest version (0 = none ever).
    pub version: u64,
}

/// An accepted extension of a node's audit copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditExtension {
    /// Index of the first entry (the confirmed size before).
    pub start: u64,
    pub entries: Vec<Vec<u8>>,
    /// The signed checkpoint note that covers them, and its size.
    pub checkpoint_size: u64,
    pub checkpoint: String,
}

/// What a shared state announces that other replicas committed (database-backed
/// state only: the embedded store has one writer, the gateway itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Something was queued for, or acknowledged by, this node.
    Queued(String),
    /// Pull number `.1` of node `.0` began: the node's older pulls end.
    Pulled(String, u64),
    /// Notices may have been missed (the listener reconnected): re-check everything.
    Resync,
}

/// A node as every replica sees it (shared state): when it was last heard from, and
/// until when some replica holds a long-poll of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeSeen {
    pub last_seen_ms: Option<u64>,
    pub polling_until_ms: u64,
}

/// The gateway's durable state. See the module documentation for the contract.
pub trait GatewayState:
    EnrollmentState + fleet::FleetState + rollouts::RolloutState + tenants::TenantState + Send + Sync
{
    /// Wall-clock milliseconds as the state sees them (the store's monotonic-floored
    /// clock for the embedded engine).
    fn now_ms(&self) -> u64;

    /// What replicas sharing this state share ([`SharedState`]); `None` for a state only
    /// this process writes (the gateway then keeps liveness and the replay window in its
    /// own memory).
    fn replicas(&self) -> Option<&dyn SharedState>;

    /// The events dashboards follow ([`EventTable`]), on every engine.
    fn events(&self) -> &dyn EventTable;

    /// Queue a sealed envelope for its node, with the caller's job binding (tool calls)
    /// in the same transaction.
    fn queue_command(&self, msg: ForNode, job: Option<NewJob>) -> Fut<'_, Queued>;
    /// Queue a command with the caller's idempotency key in the same transaction.
    /// `Duplicate` when the key or the message id is taken (nothing was written): the
    /// caller answers from [`Self::command_key`]. The caller serialises requests for one
    /// message id within its process (the embedded engine relies on it).
    fn queue_keyed_command(&self, msg: ForNode, key: CommandKey) -> Fut<'_, Queued>;
    /// The idempotency key stored for a command's message id, while it is kept.
    fn command_key<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<CommandKey>>;
    /// Queue an envelope one node sent to another (forwarded unopened).
    fn forward(&self, msg: ForNode) -> Fut<'_, Queued>;
    /// The job a caller's key is bound to.
    fn job<'a>(&'a self, key: &'a str) -> Fut<'a, Option<JobRecord>>;
    /// The node a TASK_REQUEST was sent to.
    fn request_node<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<String>>;
    /// The TASK_RESULT filed under a request, as the node sent it.
    fn result<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<Vec<u8>>>;
    /// File a result (and remember its envelope id) in one transaction.
    fn file_result(&self, result: FiledResult) -> Fut<'_, ()>;
    /// Store what one upload brought, in one transaction; one outcome per item, in
    /// order (a result is always `Queued`: filing it again is harmless). On error
    /// nothing of it was stored.
    fn receive_uploads(&self, items: Vec<Upload>) -> Fut<'_, Vec<Queued>>;
    /// An envelope id a node uploaded before (a result or an inbox message).
    fn upload_seen<'a>(&'a self, message_id: &'a str) -> Fut<'a, bool>;
    /// [`Self::upload_seen`] for many ids at once: those already received.
    fn uploads_seen<'a>(
        &'a self,
        message_ids: &'a [String],
    ) -> Fut<'a, std::collections::HashSet<String>>;

    /// A pull of `node` begins: returns its number, which supersedes every earlier
    /// pull of the node (their next [`Self::take_batch`] is `superseded`), and wakes
    /// them so they answer at once.
    fn begin_pull<'a>(&'a self, node: &'a str) -> Fut<'a, u64>;
    /// Up to `take.max` messages for `node` and about `take.max_bytes` of envelopes
    /// (always at least one), marked as being delivered — unless pull number
    /// `take.pull` was superseded. With `take.after`, the batch begins after that
    /// message when it is still queued (a node asks for its next batch while it stores
    /// the previous one, whose ack is still to come); otherwise at the queue's head.
    fn take_batch<'a>(&'a self, node: &'a str, take: Take<'a>) -> Fut<'a, PullBatch>;
    /// Remove what the node acknowledged; returns the ids that were removed (an id
    /// acknowledged twice is removed once).
    fn ack<'a>(&'a self, node: &'a str, ack: NodeAck) -> Fut<'a, Vec<String>>;

    /// Keep a message a node sent to the gateway.
    fn inbox_put(&self, msg: InboxMessage) -> Fut<'_, Queued>;
    /// Inbox records (of one sender when `from` names it), oldest first per sender.
    fn inbox_list<'a>(&'a self, from: Option<&'a str>, limit: usize) -> Fut<'a, Vec<Vec<u8>>>;
    /// Acknowledge an inbox message: `None` = no such message, `Some(removed)`.
    fn inbox_ack<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<bool>>;

    /// Where a message (command or inbox message) is now.
    fn message_status<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<MessageStatus>>;
    /// Up to `limit` messages waiting for `node`, in the order a pull hands them out,
    /// never one that expired (even before the sweep removed it).
    fn queued_for<'a>(&'a self, node: &'a str, limit: usize) -> Fut<'a, Vec<QueuedMessage>>;
    /// Depth, head age and bytes per node queue (and the inbox, by sender).
    fn queue_stats(&self) -> Fut<'_, Vec<QueueStat>>;
    /// Dead-letter what expired (each message exactly once).
    fn sweep_expired(&self) -> Fut<'_, Vec<ExpiredMessage>>;

    /// Revoke a token id (versions are assigned one at a time), with `audit` as a
    /// pending entry of the gateway's own audit log in the same transaction when it is
    /// [`Revoked::Added`] (a duplicate writes nothing).
    fn revoke<'a>(&'a self, jti: &'a str, audit: &'a AuditRecord) -> Fut<'a, Revoked>;
    /// Revocations newer than `since`.
    fn revocations(&self, since: u64) -> Fut<'_, RevocationList>;
    /// Is this token id revoked? Asked on every token check, synchronously (the
    /// check is pure): answer from memory or a cheap local read.
    fn is_revoked(&self, jti: &str) -> Result<bool, StateError>;

    /// Every entry of a node's audit copy, in index order.
    fn audit_entries<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Vec<u8>>>;
    /// One entry of a node's audit copy.
    fn audit_entry<'a>(&'a self, node: &'a str, index: u64) -> Fut<'a, Option<Vec<u8>>>;
    /// How many entries a node's audit copy holds (replicas ask before trusting their
    /// cached view of it).
    fn audit_size<'a>(&'a self, node: &'a str) -> Fut<'a, u64>;
    /// [`Self::audit_size`] of many nodes at once (`GET /v1/nodes` on a fleet).
    fn audit_sizes<'a>(
        &'a self,
        nodes: &'a [String],
    ) -> Fut<'a, std::collections::HashMap<String, u64>>;
    /// The checkpoints stored with a node's audit copy, `(size, signed note)` by size.
    fn audit_checkpoints<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<(u64, String)>>;
    /// Store a verified extension and its checkpoint in one transaction.
    fn audit_extend<'a>(&'a self, node: &'a str, ext: AuditExtension) -> Fut<'a, ()>;

    /// The trust store (peers `outpost trust add` enrolled), read synchronously.
    fn load_trust(&self) -> Result<TrustStore, StateError>;
    /// What changed in the trust store since the copy at version `known` (`None`: none
    /// held): the new version and the update to apply (every peer, or only the peers
    /// changed where the engine can say which); `None` when unchanged. The trust cache
    /// asks on every miss and about once a second, so "unchanged" must be cheap.
    fn load_trust_since(
        &self,
        known: Option<u64>,
    ) -> Result<Option<(u64, TrustUpdate)>, StateError>;
    /// False once the state can no longer make writes durable (a failed fsync): the
    /// watchdog stops pinging so systemd restarts the gateway.
    fn durable(&self) -> bool;
    /// Whether the state can take a write now (`/readyz`): `Err` says why not (the
    /// database cannot be reached, or takes no writes). Bounded in time: a database that
    /// does not answer is "not ready" within about a second, not a hung probe.
    fn ready(&self) -> Fut<'_, ()>;
    /// Flush and close (at shutdown).
    fn close(&self) -> Fut<'_, ()>;

    /// Apply a hand edit of the enrolled peers (`outpost trust add/rm`, on either engine)
    /// to the peers as they are now (a peer the edit does not name keeps what another
    /// writer did meanwhile), with `audit` (the caller's entries of what it changed, one
    /// per peer) as pending entries of the gateway's own audit log in the same
    /// transaction: both are stored, or neither.
    fn save_trust<'a>(&'a self, edit: &'a TrustEdit, audit: &'a [AuditRecord]) -> Fut<'a, ()>;
}
