//! The durable mailbox (SPEC §4): queues, dedup window, results, audit rows, small KV.
//!
//! ## Shape
//!
//! ```text
//!  callers (API, sync, sweeper, CLI)
//!     │ reads: get / streaming scan (any thread, never block the writer)
//!     │ writes: Vec<WriteOp> + oneshot ──► writer thread (group commit, one fsync)
//!     ▼                                        │
//!  queue semantics (ops.rs, read.rs) ─────────┘   written once, for every engine
//!     ▼
//!  trait Engine (engine/mod.rs: contract)  ── SqliteEngine (default) | SledEngine (feature)
//!  blobs/ab/cdef… content-addressed files for bodies over the threshold
//! ```
//!
//! ## Guarantees
//!
//! - A write call returns `Ok` only after its batch is fsynced ([`writer`]). Write calls
//!   return a [`Submitted`] handle: `.await` it in async code or `.wait()` it in blocking
//!   code. The write is submitted when the call is made; dropping the handle does not
//!   cancel it.
//! - Per `(queue, peer)` strict FIFO within priority (key layout in [`codec`]).
//!   [`Store::next_batch`] never returns expired messages and honours
//!   `next_attempt_at_ms` **without overtaking**: it walks the queue in order, skips
//!   expired entries, and stops at the first message whose next attempt is still in the
//!   future. A backing-off message therefore blocks the ones behind it (head-of-line), which
//!   is what strict FIFO requires.
//! - A message leaves its queue only through ack, expiry (sweeper), dead-lettering, or
//!   quarantine of a damaged record — never by eviction. Over the per-recipient cap:
//!   [`StoreError::QueueFull`]; over the byte budget or on ENOSPC/EDQUOT:
//!   [`StoreError::StorageFull`].
//! - Reads stream: restart with any number of queued messages loads nothing but one
//!   page at a time. Per-recipient depth and bytes are persisted counters.
//! - Time is [`Store::now_ms`]: the clock, floored by a persisted time floor (see [`time`]).
//! - Schema: [`SCHEMA_VERSION`]; an older store is migrated on open, a newer one refused.
//!
//! Read calls are synchronous and short (one page); from async code they are fine for
//! page-sized work, use `spawn_blocking` for exports and `doctor`.

pub mod backoff;
pub mod blobs;
pub mod codec;
mod counter;
pub mod engine;
mod lanes;
mod maintenance;
pub mod ops;
mod read;
mod records;
mod schema;
pub mod time;
mod trees;
mod tx;
pub mod types;
mod writer;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::clock::SharedClock;

pub use engine::{EngineError, EngineKind};
pub use maintenance::DoctorReport;
pub use ops::{OpOutcome, WriteOp, REASON_MAX_ATTEMPTS, REASON_TIMEOUT};
pub use types::*;

/// Current on-disk schema version (see `schema.rs` for the migrations).
pub const SCHEMA_VERSION: u64 = 4;

/// Tunables; `Default` gives the SPEC defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreOptions {
    pub engine: EngineKind,
    /// Per `(queue, peer)` hard cap (SPEC §4.6).
    pub max_messages_per_recipient: u64,
    /// Global budget for queued + dead messages (records and blobs).
    pub max_store_bytes: u64,
    pub max_message_bytes: u64,
    /// Bodies larger than this go to blob files.
    pub blob_threshold_bytes: u64,
    /// Default `max_attempts` for messages that do not set one (0 = until expiry).
    pub max_attempts: u32,
    /// How long `delivered`/`expired`/`rejected` tombstones answer `status()`.
    pub status_retention_ms: u64,
    /// The `Retry-After` hint carried by [`StoreError::QueueFull`].
    pub queue_full_retry_after_s: u64,
    /// Decode every record (and hash every blob) on open, quarantining damage before
    /// anything is delivered. Costs one read of the store at start; when off, damage is
    /// still quarantined when a read meets it, and `doctor` finds it.
    pub verify_on_open: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            engine: EngineKind::default(),
            max_messages_per_recipient: 10_000,
            max_store_bytes: 256 * 1024 * 1024,
            max_message_bytes: 1024 * 1024,
            blob_threshold_bytes: 64 * 1024,
            max_attempts: 100,
            status_retention_ms: 7 * 24 * 3600 * 1000,
            queue_full_retry_after_s: 30,
            verify_on_open: true,
        }
    }
}

/// Everything a store call can fail with. Cloneable: one failed group commit answers
/// every caller of the group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("queue full")]
    QueueFull { retry_after_s: u64 },
    #[error("storage full")]
    StorageFull,
    #[error("message too large: {size} bytes (max {max})")]
    TooLarge { size: u64, max: u64 },
    #[error("message already expired")]
    Expired,
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("not found")]
    NotFound,
    #[error("audit index {got} does not extend the log (length {expected})")]
    AuditIndex { expected: u64, got: u64 },
    #[error("store schema version {found} is newer than this binary supports ({supported}); upgrade outpost or restore a backup")]
    SchemaTooNew { found: u64, supported: u64 },
    #[error("store corrupt: {0}")]
    Corrupt(String),
    #[error("storage engine: {0}")]
    Engine(String),
    #[error("i/o: {0}")]
    Io(String),
    #[error("store is closed")]
    Closed,
}

impl StoreError {
    pub fn from_io(what: &str, e: &std::io::Error) -> Self {
        match EngineError::from_io(e) {
            EngineError::Full(_) => StoreError::StorageFull,
            _ => StoreError::Io(format!("{what}: {e}")),
        }
    }
}

impl From<EngineError> for StoreError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Full(_) => StoreError::StorageFull,
            EngineError::Corrupt(m) => StoreError::Corrupt(m),
            EngineError::Other(m) => StoreError::Engine(m),
        }
    }
}

struct Inner {
    dir: PathBuf,
    opts: StoreOptions,
    engine: Arc<dyn engine::Engine>,
    blobs: blobs::Blobs,
    time: Arc<time::TimeKeeper>,
    tx: Mutex<Option<mpsc::Sender<writer::Msg>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Records quarantined since open (reported by `doctor` and `open_report`).
    quarantined_on_open: Vec<String>,
    stats: Arc<writer::CommitStats>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            if let Some(tx) = tx.take() {
                let _ = tx.send(writer::Msg::Shutdown);
            }
        }
        if let Ok(mut t) = self.thread.lock() {
            if let Some(t) = t.take() {
                let _ = t.join();
            }
        }
    }
}

/// Counters of the writer since the store was opened ([`Store::commit_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitCounts {
    /// Engine commits (groups).
    pub commits: u64,
    /// fsyncs that made them durable (one can cover several commits).
    pub syncs: u64,
    /// Requests answered `Ok` after those syncs.
    pub requests: u64,
}

/// The store handle: cheap to clone, shareable across threads and tasks.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .field("engine", &self.inner.engine.name())
            .finish()
    }
}

/// A submitted write: `.await` it, or `.wait()` from a thread that is not a runtime
/// worker. The write is already on its way when this exists.
pub struct Submitted<T> {
    rx: Result<oneshot::Receiver<Result<Vec<OpOutcome>, StoreError>>, StoreError>,
    map: fn(Vec<OpOutcome>) -> Result<T, StoreError>,
}

impl<T> Submitted<T> {
    /// Blocks until the batch is durable. Panics if called on an async runtime thread
    /// (tokio forbids blocking there) — use `.await` in async code.
    pub fn wait(self) -> Result<T, StoreError> {
        let rx = self.rx?;
        let out = rx.blocking_recv().map_err(|_| StoreError::Closed)??;
        (self.map)(out)
    }
}

impl<T> Future for Submitted<T> {
    type Output = Result<T, StoreError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let rx = match &mut this.rx {
            Ok(rx) => rx,
            Err(e) => return Poll::Ready(Err(e.clone())),
        };
        match Pin::new(rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Err(StoreError::Closed)),
            Poll::Ready(Ok(Err(e))) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(Ok(out))) => Poll::Ready((this.map)(out)),
        }
    }
}

fn unexpected<T>(what: &str) -> Result<T, StoreError> {
    Err(StoreError::Engine(format!(
        "writer answered {what} unexpectedly"
    )))
}

impl Store {
    /// Opens (creating if needed) the store in `dir`, migrates an older schema, refuses a
    /// newer one, and starts the writer thread.
    pub fn open(dir: &Path, opts: StoreOptions, clock: SharedClock) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::from_io("create store dir", &e))?;
        let engine: Arc<dyn engine::Engine> = Arc::from(engine::open(opts.engine, dir)?);
        Self::open_on(dir, opts, clock, engine)
    }

    /// [`Store::open`] on an engine already opened in `dir` (tests wrap one).
    pub(crate) fn open_on(
        dir: &Path,
        opts: StoreOptions,
        clock: SharedClock,
        engine: Arc<dyn engine::Engine>,
    ) -> Result<Store, StoreError> {
        let blobs =
            blobs::Blobs::open(dir).map_err(|e| StoreError::from_io("open blob dir", &e))?;
        let opened = schema::prepare(engine.as_ref(), &blobs, opts.verify_on_open)?;
        let time = Arc::new(time::TimeKeeper::new(clock, opened.time_floor_ms));
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(writer::CommitStats::default());
        let w = writer::Writer {
            stats: stats.clone(),
            engine: engine.clone(),
            blobs: blobs.clone(),
            opts: opts.clone(),
            time: time.clone(),
            next_seq: opened.next_seq,
            wake: tx.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("outpost-store-writer".into())
            .spawn(move || w.run(rx))
            .map_err(|e| StoreError::Io(format!("spawn writer: {e}")))?;
        tracing::info!(
            dir = %dir.display(),
            engine = engine.name(),
            schema = SCHEMA_VERSION,
            quarantined = opened.quarantined.len(),
            "store opened"
        );
        Ok(Store {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                opts,
                engine,
                blobs,
                time,
                tx: Mutex::new(Some(tx)),
                thread: Mutex::new(Some(thread)),
                quarantined_on_open: opened.quarantined,
                stats,
            }),
        })
    }

    /// `true` once an fsync of the store failed: every later write fails until the
    /// store is reopened (the daemon then withholds its watchdog ping, so systemd
    /// restarts it and recovery re-reads what is really on disk).
    pub fn sync_failed(&self) -> bool {
        self.inner.engine.sync_failed()
    }

    /// What the writer has made durable since open: requests per sync is how well
    /// group commit is batching.
    pub fn commit_stats(&self) -> CommitCounts {
        use std::sync::atomic::Ordering::Relaxed;
        CommitCounts {
            commits: self.inner.stats.commits.load(Relaxed),
            syncs: self.inner.stats.syncs.load(Relaxed),
            requests: self.inner.stats.requests.load(Relaxed),
        }
    }

    /// Stops the writer after it committed everything already submitted. Later writes
    /// fail with [`StoreError::Closed`]. Dropping the last handle does the same.
    pub fn close(&self) {
        self.inner.shutdown();
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn options(&self) -> &StoreOptions {
        &self.inner.opts
    }

    pub fn engine_name(&self) -> &'static str {
        self.inner.engine.name()
    }

    /// Records quarantined while opening (e.g. during a migration scan).
    pub fn open_report(&self) -> &[String] {
        &self.inner.quarantined_on_open
    }

    /// The store's notion of now (see [`time`]): never below the persisted floor.
    pub fn now_ms(&self) -> u64 {
        self.inner.time.now_ms()
    }

    fn submit_raw(
        &self,
        ops: Vec<WriteOp>,
        want_reply: bool,
    ) -> Result<oneshot::Receiver<Result<Vec<OpOutcome>, StoreError>>, StoreError> {
        let (reply, rx) = oneshot::channel();
        let guard = self.inner.tx.lock().map_err(|_| StoreError::Closed)?;
        let tx = guard.as_ref().ok_or(StoreError::Closed)?;
        tx.send(writer::Msg::Write {
            ops,
            reply: if want_reply { Some(reply) } else { None },
        })
        .map_err(|_| StoreError::Closed)?;
        Ok(rx)
    }

    fn submit<T>(
        &self,
        ops: Vec<WriteOp>,
        map: fn(Vec<OpOutcome>) -> Result<T, StoreError>,
    ) -> Submitted<T> {
        Submitted {
            rx: self.submit_raw(ops, true),
            map,
        }
    }

    /// Fire-and-forget write used by readers that found damage (quarantine).
    fn submit_detached(&self, ops: Vec<WriteOp>) {
        if let Err(e) = self.submit_raw(ops, false) {
            tracing::warn!(error = %e, "could not submit background store write");
        }
    }

    /// Applies `ops` atomically in one request (all or none) inside the next group
    /// commit. Use it to make e.g. an audit append and a tool result one transaction.
    pub fn write(&self, ops: Vec<WriteOp>) -> Submitted<Vec<OpOutcome>> {
        self.submit(ops, Ok)
    }

    pub fn enqueue(&self, msg: NewMessage) -> Submitted<EnqueueOutcome> {
        self.submit(vec![WriteOp::Enqueue(msg)], |o| {
            match o.into_iter().next() {
                Some(OpOutcome::Enqueued(e)) => Ok(e),
                _ => unexpected("enqueue"),
            }
        })
    }

    /// Marks messages as handed to a transport (status `delivering`); they stay queued.
    pub fn mark_delivering(&self, queue: &str, peer: &str, ids: Vec<String>) -> Submitted<()> {
        self.submit(
            vec![WriteOp::MarkDelivering {
                queue: queue.into(),
                peer: peer.into(),
                ids,
            }],
            |_| Ok(()),
        )
    }

    /// Counts a failed attempt for each id and schedules the next one by
    /// [`backoff::delay_ms`] with `jitter` in `[-1, 1]`. Returns the ids that ran out of
    /// attempts and moved to the dead-letter queue.
    pub fn record_failure(
        &self,
        queue: &str,
        peer: &str,
        ids: Vec<String>,
        now_ms: u64,
        jitter: f64,
    ) -> Submitted<Vec<String>> {
        self.submit(
            vec![WriteOp::RecordFailure {
                queue: queue.into(),
                peer: peer.into(),
                ids,
                now_ms,
                jitter,
            }],
            |o| match o.into_iter().next() {
                Some(OpOutcome::Dead(d)) => Ok(d),
                _ => unexpected("record_failure"),
            },
        )
    }

    /// Removes delivered messages; leaves a `delivered` tombstone for `status()`.
    pub fn ack(
        &self,
        queue: &str,
        peer: &str,
        ids: Vec<String>,
        now_ms: u64,
    ) -> Submitted<Vec<AckOutcome>> {
        self.submit(
            vec![WriteOp::Ack {
                queue: queue.into(),
                peer: peer.into(),
                ids,
                now_ms,
            }],
            |o| match o.into_iter().next() {
                Some(OpOutcome::Acked(a)) => Ok(a),
                _ => unexpected("ack"),
            },
        )
    }

    /// Removes messages whose `expires_at <= now_ms` (status `expired`, reason
    /// `timeout_in_queue`) and prunes dedup entries, results and tombstones past their
    /// keep-until. Returns what expired, for the event/metric/audit the caller emits.
    pub fn sweep_expired(&self, now_ms: u64) -> Submitted<Vec<ExpiredMessage>> {
        self.submit(
            vec![
                WriteOp::SweepExpired {
                    now_ms,
                    limit: 10_000,
                },
                WriteOp::Prune {
                    now_ms,
                    limit: 10_000,
                },
            ],
            |o| match o.into_iter().next() {
                Some(OpOutcome::Expired(e)) => Ok(e),
                _ => unexpected("sweep"),
            },
        )
    }

    /// Moves a dead letter back to its original place in its queue with attempts reset.
    pub fn requeue(&self, message_id: &str) -> Submitted<()> {
        let now_ms = self.now_ms();
        self.submit(
            vec![WriteOp::Requeue {
                message_id: message_id.into(),
                now_ms,
            }],
            |_| Ok(()),
        )
    }

    /// Deletes up to 10,000 dead letters per call; returns how many.
    pub fn purge_dead(&self) -> Submitted<usize> {
        self.submit(vec![WriteOp::PurgeDead { limit: 10_000 }], |o| {
            match o.into_iter().next() {
                Some(OpOutcome::Count(n)) => Ok(n),
                _ => unexpected("purge"),
            }
        })
    }

    /// Records a `rejected` status for a message that was refused (kept for status()).
    pub fn reject(&self, queue: &str, peer: &str, message_id: &str, reason: &str) -> Submitted<()> {
        let now_ms = self.now_ms();
        self.submit(
            vec![WriteOp::Reject {
                queue: queue.into(),
                peer: peer.into(),
                message_id: message_id.into(),
                reason: reason.into(),
                now_ms,
            }],
            |_| Ok(()),
        )
    }

    /// Remembers `id` in the dedup window of `scope` until `keep_until_ms` (durable).
    pub fn remember(&self, scope: &str, id: &str, keep_until_ms: u64) -> Submitted<()> {
        self.submit(
            vec![WriteOp::Remember {
                scope: scope.into(),
                id: id.into(),
                keep_until_ms,
            }],
            |_| Ok(()),
        )
    }

    pub fn kv_put(&self, ns: &str, key: &str, value: Vec<u8>) -> Submitted<()> {
        self.submit(
            vec![WriteOp::KvPut {
                ns: ns.into(),
                key: key.into(),
                value,
            }],
            |_| Ok(()),
        )
    }

    pub fn kv_delete(&self, ns: &str, key: &str) -> Submitted<()> {
        self.submit(
            vec![WriteOp::KvDelete {
                ns: ns.into(),
                key: key.into(),
            }],
            |_| Ok(()),
        )
    }

    /// Stores a tool result for `job_id` idempotency until `keep_until_ms`.
    pub fn result_put(&self, job_id: &str, result: Vec<u8>, keep_until_ms: u64) -> Submitted<()> {
        self.submit(
            vec![WriteOp::ResultPut {
                job_id: job_id.into(),
                result,
                keep_until_ms,
            }],
            |_| Ok(()),
        )
    }

    /// Appends an audit entry at `index`, which must equal the current length.
    pub fn audit_append(&self, index: u64, entry: Vec<u8>) -> Submitted<()> {
        self.submit(vec![WriteOp::AuditAppend { index, entry }], |_| Ok(()))
    }

    pub fn checkpoint_put(&self, size: u64, note: String) -> Submitted<()> {
        self.submit(vec![WriteOp::CheckpointPut { size, note }], |_| Ok(()))
    }

    /// Durably advances the time floor to `now_ms()` (call periodically, e.g. from the
    /// sweeper, so an idle store still remembers how late it has been).
    pub fn touch_time(&self) -> Submitted<()> {
        self.submit(vec![WriteOp::Touch], |_| Ok(()))
    }
}
