//! The durable mailbox (PROTOCOL §14): queues, dedup window, results, audit rows, small KV.
//!
//! ## Shape
//!
//! ```text
//!  callers (API, sync, sweeper, CLI)
//!     │ reads: get / streaming scan (any thread, never block the writer)
//!     │ writes: Vec<WriteOp> + oneshot ──► writer thread (group commit, one fsync)
//!     ▼                                        │
//!  queue semantics (ops/, read.rs) ───────────┘   written once, for every engine
//!     ▼
//!  trait Engine (engine/mod.rs: contract)  ── SqliteEngine (default) | SledEngine (feature)
//!  blobs/ab/cdef… content-addressed files for bodies over the threshold
//! ```
//!
//! ## Guarantees
//!
//! - A write call returns `Ok` only after its batch is fsynced (`writer`). Write calls
//!   return a [`Submitted`] handle: `.await` it in async code or `.wait()` it in blocking
//!   code. The write is submitted when the call is made; dropping the handle does not
//!   cancel it.
//! - Per `(queue, peer)` strict FIFO within priority (key layout in `codec`).
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
//! - Time is [`Store::now_ms`]: the clock, floored by a persisted time floor (see `time`).
//! - Schema: [`SCHEMA_VERSION`]; an older store is migrated on open, a newer one refused.
//!
//! Read calls are synchronous and short (one page); from async code they are fine for
//! page-sized work, use `spawn_blocking` for exports and `doctor`.
//!
//! ## Layering (who may depend on whom)
//!
//! A module uses only modules of lower layers (or its own); nothing depends upwards and
//! there are no cycles. Only this file and the re-exports below are public.
//!
//! 1. Leaves: `trees` (tree ids, meta keys: the tree map), `backoff`, `time`, `blobs`.
//! 2. `engine` (the seam and its engines) → `trees`. `error` ([`StoreError`]) and
//!    `options` ([`StoreOptions`]) → `engine`.
//! 3. On-disk encoding: `codec` (keys, sealed values) → `trees`; `types` (the API's
//!    values) → `codec`; `records` (stored messages, ids, tombstones) → `codec`,
//!    `types`; `counter` (per-recipient counters and lanes) → `codec`.
//! 4. `lanes` (expiry-ordered lanes) → `engine`, `codec`, `records`, `counter`;
//!    `tx` (a request's view of its group) → `engine`, `blobs`, `error`, `options`;
//!    `damage` (finding and quarantining damaged records) → `engine`, `codec`,
//!    `records`, `blobs`, `error`.
//! 5. `ops` (queue semantics as write operations) → `tx`, `lanes` and the layers
//!    below; `submitted` ([`Submitted`]) → `ops`, `error`.
//! 6. `writer` (group commit) → `ops`, `tx`, `engine`, `time`; `schema` (checks and
//!    migrates on open) → `damage`, `lanes`, `engine`, the encoding layer.
//! 7. The handle: this file ([`Store`]: open, close, submitting to the writer), `write`
//!    (write calls), `read` (read calls) and `maintenance` (doctor, backup, compact) —
//!    `impl Store` blocks over everything below.
//!
//! `benches/store.rs` needs one engine constant besides the API: [`bench`](mod@bench).

pub(crate) mod backoff;
mod batch;
mod blobs;
mod codec;
mod counter;
mod damage;
mod disk;
mod engine;
mod error;
mod lanes;
mod maintenance;
pub mod names;
mod ops;
mod options;
mod read;
mod records;
mod schema;
mod submitted;
mod time;
mod trees;
mod tx;
mod types;
mod write;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use tokio::sync::oneshot;

use crate::clock::SharedClock;

pub use batch::{Batch, Committed};
pub use codec::seq_key;
pub use disk::{disk_usage, DiskUsage};
pub use engine::EngineKind;
pub use error::StoreError;
pub(crate) use ops::{OpOutcome, WriteOp};
pub use ops::{REASON_MAX_ATTEMPTS, REASON_TIMEOUT};
pub use options::StoreOptions;
pub use schema::SCHEMA_VERSION;
pub use submitted::Submitted;
pub use time::{TimeCorrection, FLOOR_EVERY_MS};
pub use types::{
    AckOutcome, DoctorReport, EnqueueOutcome, ExpiredMessage, MessageState, MessageStatus,
    NewMessage, Page, QueueStat, StoredMessage,
};

/// What the store benchmarks (`benches/store.rs`) need beyond the API; not for the
/// daemon's code.
pub mod bench {
    /// Page size of a new SQLite store: what one WAL frame of a commit carries.
    pub const SQLITE_PAGE_SIZE: usize = super::engine::sqlite::PAGE_SIZE;
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
        let time = Arc::new(time::TimeKeeper::new(
            clock,
            opened.time_floor_ms,
            opened.time_history,
        ));
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(writer::CommitStats::default());
        let w = writer::Writer {
            stats: stats.clone(),
            engine: engine.clone(),
            blobs: blobs.clone(),
            opts: opts.clone(),
            time: time.clone(),
            next_seq: opened.next_seq,
            kv_numbers: Default::default(),
            seen_written: opened.time_history.seen_created_max_ms,
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

    /// [`Store::close`] for a daemon: first persists the time floor if time moved past
    /// it since the last commit, so a clean restart resumes exactly where it stopped (an
    /// idle daemon persists the floor only every [`time::FLOOR_EVERY_MS`]).
    pub fn close_keeping_time(&self) {
        if self.time_floor_lag_ms() > 0 {
            // Queued before the writer's stop message: committed and synced first.
            self.submit_detached(vec![WriteOp::Touch]);
        }
        self.close();
    }

    /// How far the store's time is past the persisted time floor; the daemons call
    /// [`Store::touch_time`] once it reaches [`time::FLOOR_EVERY_MS`].
    pub fn time_floor_lag_ms(&self) -> u64 {
        self.inner.time.floor_lag_ms()
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

    /// The store's notion of now (see `time`): never below the persisted floor.
    pub fn now_ms(&self) -> u64 {
        self.inner.time.now_ms()
    }

    /// Real time is known to be at least `ms`: the store's time moves forward to it if
    /// it is behind (never back; persisted as the floor with the next commit). Returns
    /// how far it moved.
    pub fn time_not_before(&self, ms: u64) -> u64 {
        self.inner.time.not_before(ms)
    }

    /// The node's gateway stated (signed) that real time is `trusted_ms`: if the store's
    /// time is ahead of it by more than `tolerance_ms` and the clock agrees with it
    /// within `tolerance_ms`, time goes back to `max(clock, trusted_ms)` (see `time`,
    /// RELIABILITY F2). Returns the correction and the write that makes it durable —
    /// the lowered floor and the correction itself, restored on open — or `None` when
    /// nothing changed.
    pub fn correct_time(
        &self,
        trusted_ms: u64,
        tolerance_ms: u64,
    ) -> Option<(TimeCorrection, Submitted<()>)> {
        let c = self.inner.time.correct_back(trusted_ms, tolerance_ms)?;
        let durable = self.submit(
            vec![WriteOp::TimeCorrected {
                high_water_ms: c.high_water_ms,
                corrected_at_ms: c.corrected_at_ms,
                seen_created_max_ms: c.seen_created_max_ms,
            }],
            |_| Ok(()),
        );
        Some((c, durable))
    }

    /// An envelope created at `created_at_ms` is about to be stored and its id remembered
    /// for replay protection: call before the commit that stores it (see `time`).
    pub fn note_seen_created(&self, created_at_ms: u64) {
        self.inner.time.note_seen_created(created_at_ms);
    }

    /// The latest correction of the store's time, if it was ever moved back: until real
    /// time passes its `high_water_ms`, replay memory may be missing entries for
    /// envelopes that expired by the time the store's time was then.
    pub fn time_correction(&self) -> Option<TimeCorrection> {
        self.inner.time.correction()
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
        Submitted::new(self.submit_raw(ops, true), map)
    }

    /// Fire-and-forget write used by readers that found damage (quarantine).
    fn submit_detached(&self, ops: Vec<WriteOp>) {
        if let Err(e) = self.submit_raw(ops, false) {
            tracing::warn!(error = %e, "could not submit background store write");
        }
    }
}
