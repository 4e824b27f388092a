//! Group commit: one thread owns every write.
//!
//! Callers send a request (a `Vec<WriteOp>` plus a oneshot reply) over a channel. The
//! writer takes the first request, drains whatever else is already waiting, evaluates
//! each request against a read-your-writes overlay of the group, and commits the whole
//! group as ONE engine batch. It answers only after a sync that started after that
//! commit (see [`Writer::run`]). So many concurrent enqueues cost one fsync, and nobody
//! hears `Ok` before the data is on disk.
//!
//! Requests are independent: one whose ops are invalid (queue full, bad audit index) is
//! answered with its own error and its writes are taken back out of the group (undo
//! log, see [`super::tx`]); the others commit. If the engine batch itself fails (ENOSPC),
//! every request of the group gets the error and nothing of the group is visible.

use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::blobs::Blobs;
use super::codec::{
    parse_u64, u64_val, META_NEXT_SEQ, META_SEEN_CREATED_MAX, META_TIME_FLOOR, T_BLOBREF, T_META,
};
use super::engine::{Engine, Reader};
use super::error::StoreError;
use super::ops::{self, OpOutcome, WriteOp};
use super::options::StoreOptions;
use super::time::TimeKeeper;
use super::tx::{Overlay, Tx};

/// Upper bound of requests merged into one batch (keeps a batch's memory bounded).
const MAX_GROUP: usize = 1024;

pub type Reply = oneshot::Sender<Result<Vec<OpOutcome>, StoreError>>;

pub enum Msg {
    Write {
        ops: Vec<WriteOp>,
        reply: Option<Reply>,
    },
    Shutdown,
    /// From the sync thread: the sync it was handed is done.
    Synced,
}

/// Counters of committed groups, read by [`crate::store::Store::commit_stats`].
#[derive(Debug, Default)]
pub struct CommitStats {
    /// Engine commits.
    pub commits: std::sync::atomic::AtomicU64,
    /// Syncs (fsyncs) that made commits durable; one may cover several commits.
    pub syncs: std::sync::atomic::AtomicU64,
    /// Requests made durable by those commits.
    pub requests: std::sync::atomic::AtomicU64,
}

pub struct Writer {
    pub stats: Arc<CommitStats>,
    pub engine: Arc<dyn Engine>,
    pub blobs: Blobs,
    pub opts: StoreOptions,
    pub time: Arc<TimeKeeper>,
    pub next_seq: u64,
    /// Per KV namespace, the last numbered key this writer took: where the search for
    /// the next one starts (`ops::next_numbered_key`).
    pub kv_numbers: std::collections::HashMap<String, u64>,
    /// `time::TimeKeeper::seen_created_max` as last committed: written again only when
    /// it moved, so a commit without inbound envelopes costs nothing more.
    pub seen_written: u64,
    /// The writer's own channel, for the sync thread's [`Msg::Synced`].
    pub wake: mpsc::Sender<Msg>,
}

type Answer = (Option<Reply>, Result<Vec<OpOutcome>, StoreError>);

/// A group the engine has committed (or refused), waiting for the sync that makes it
/// durable before anyone is answered.
struct Committed {
    answers: Vec<Answer>,
    /// Requests answered `Ok` (their writes, if any, are in the commit).
    ok: u64,
    /// Whether the commit wrote anything: a group whose requests changed nothing (a
    /// sweep that found nothing due) commits nothing and costs no sync.
    wrote: bool,
    /// The time floor the commit persisted.
    floor_ms: u64,
    /// Blob files to delete once the commit is durable.
    unreferenced: Vec<[u8; 32]>,
}

/// Makes committed groups durable and answers them; shared by the writer (inline) and
/// the sync thread.
#[derive(Clone)]
struct Settler {
    engine: Arc<dyn Engine>,
    time: Arc<TimeKeeper>,
    stats: Arc<CommitStats>,
}

impl Settler {
    /// One sync for all of `groups` (each committed before this is called), then
    /// `durable` if it succeeded, then the answers.
    fn settle(&self, groups: Vec<Committed>, durable: &mut dyn FnMut()) {
        let synced = if groups.iter().any(|g| g.wrote) {
            let r = self.engine.sync();
            if r.is_ok() {
                self.stats
                    .syncs
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            r
        } else {
            Ok(())
        };
        if synced.is_ok() {
            durable();
        }
        for g in groups {
            if synced.is_ok() {
                use std::sync::atomic::Ordering::Relaxed;
                if g.wrote {
                    self.time.persisted(g.floor_ms);
                    self.stats.commits.fetch_add(1, Relaxed);
                }
                self.stats.requests.fetch_add(g.ok, Relaxed);
            }
            for (reply, answer) in g.answers {
                let answer = match (&synced, answer) {
                    (Err(e), Ok(_)) => Err(StoreError::from(e.clone())),
                    (_, a) => a,
                };
                if let Some(reply) = reply {
                    // A caller that stopped waiting is fine: the write is durable anyway.
                    let _ = reply.send(answer);
                }
            }
        }
    }
}

/// Where a group's requests come from: `first`, then whatever [`Feed::more`] yields.
struct Feed<'a> {
    rx: &'a mpsc::Receiver<Msg>,
    /// A sync handed to the sync thread has not reported back yet.
    in_flight: bool,
    shutdown: bool,
    taken: usize,
}

impl Feed<'_> {
    /// The next request for the group being built. While a sync is in flight it waits
    /// for one (the group keeps growing until the disk is free again); otherwise it only
    /// takes what is already queued. `None` ends the group.
    fn more(&mut self) -> Option<(Vec<WriteOp>, Option<Reply>)> {
        while !self.shutdown && self.taken < MAX_GROUP {
            let msg = if self.in_flight {
                self.rx.recv().ok()
            } else {
                self.rx.try_recv().ok()
            };
            match msg {
                Some(Msg::Write { ops, reply }) => {
                    self.taken += 1;
                    return Some((ops, reply));
                }
                Some(Msg::Synced) => self.in_flight = false,
                Some(Msg::Shutdown) => self.shutdown = true,
                None => {
                    if self.in_flight {
                        // Disconnected: no more requests will come.
                        self.shutdown = true;
                    }
                    return None;
                }
            }
        }
        None
    }
}

impl Writer {
    /// The writer loop. A committed group is answered after a sync that started after
    /// its commit. When more requests are already waiting after a commit, that sync is
    /// handed to the sync thread and the writer starts the next group at once: it
    /// evaluates requests while the disk works and commits when the sync reports back,
    /// so each fsync covers everything that arrived during the previous one and the
    /// CPU work overlaps the disk's. With nothing waiting, the writer syncs itself,
    /// which keeps a lone caller's latency at one commit plus one fsync.
    pub fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let settler = Settler {
            engine: self.engine.clone(),
            time: self.time.clone(),
            stats: self.stats.clone(),
        };
        let (to_sync, sync_rx) = mpsc::channel::<Committed>();
        let background = settler.clone();
        let wake = self.wake.clone();
        let syncer = std::thread::Builder::new()
            .name("outpost-store-sync".into())
            .spawn(move || {
                while let Ok(first) = sync_rx.recv() {
                    let mut groups = vec![first];
                    while let Ok(g) = sync_rx.try_recv() {
                        groups.push(g);
                    }
                    background.settle(groups, &mut || {});
                    let _ = wake.send(Msg::Synced);
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "no store sync thread; syncing inline"))
            .ok();
        let mut feed = Feed {
            rx: &rx,
            in_flight: false,
            shutdown: false,
            taken: 0,
        };
        // A message taken to see whether anything is waiting (mpsc cannot peek).
        let mut carry = None;
        while !feed.shutdown {
            let first = match carry.take().map_or_else(|| rx.recv(), Ok) {
                Ok(Msg::Write { ops, reply }) => (ops, reply),
                Ok(Msg::Synced) => {
                    feed.in_flight = false;
                    continue;
                }
                Ok(Msg::Shutdown) | Err(_) => break,
            };
            feed.taken = 1;
            let mut group = self.commit_group(first, &mut feed);
            // Blob files may only go once the commit that dropped them is durable, and
            // only the writer may delete them (it also writes them): settle inline.
            if !group.wrote && feed.in_flight {
                // The feed stopped waiting for the sync in flight (shutdown): answers
                // that wrote nothing may still rest on that commit, so they wait for
                // a sync too.
                group.wrote = true;
            }
            let hand_off = group.wrote
                && group.unreferenced.is_empty()
                && syncer.is_some()
                && !feed.shutdown
                && !feed.in_flight;
            let mut group = Some(group);
            if hand_off {
                if let Ok(next) = rx.try_recv() {
                    let write = matches!(next, Msg::Write { .. });
                    carry = Some(next);
                    if let (true, Some(g)) = (write, group.take()) {
                        match to_sync.send(g) {
                            Ok(()) => feed.in_flight = true,
                            Err(mpsc::SendError(g)) => group = Some(g),
                        }
                    }
                }
            }
            if let Some(mut g) = group {
                let unreferenced = std::mem::take(&mut g.unreferenced);
                settler.settle(vec![g], &mut || self.collect_blobs(&unreferenced));
            }
            self.engine.after_group();
        }
        drop(to_sync);
        if let Some(t) = syncer {
            let _ = t.join();
        }
        tracing::debug!(engine = self.engine.name(), "store writer stopped");
    }

    /// Evaluates and commits one group: `first`, then what `feed` yields while the
    /// engine's write transaction is open. Nobody is answered yet (see [`Settler`]).
    fn commit_group(
        &mut self,
        first: (Vec<WriteOp>, Option<Reply>),
        feed: &mut Feed<'_>,
    ) -> Committed {
        let now_ms = self.time.now_ms();
        // What the group persists as the floor: read once every request of the group
        // is taken, so a request submitted after a time correction never commits with a
        // floor read before it (the floor can go down: `time::TimeKeeper::correct_back`).
        let mut floor_ms = now_ms;
        let mut seen_ms = self.seen_written;
        let mut wrote = false;
        let mut answers: Vec<Answer> = Vec::new();
        let mut unreferenced = Vec::new();
        let mut first = Some(first);
        let engine = self.engine.clone();
        let result = engine.commit_group(&mut |view| {
            let Some(first) = first.take() else {
                return Vec::new();
            };
            self.catch_up_seq(view);
            let mut group = Overlay::default();
            let mut next = Some(first);
            while let Some((ops, reply)) = next.take().or_else(|| feed.more()) {
                let (answer, blobs) = self.evaluate(view, &mut group, now_ms, ops);
                if answer.is_ok() {
                    unreferenced.extend(blobs);
                }
                answers.push((reply, answer));
            }
            if !answers.iter().any(|(_, r)| r.is_ok()) || group.is_empty() {
                // Nothing changed (failed requests, or a sweep that found nothing due):
                // nothing is written, not even the floor, so an idle store stays still.
                return Vec::new();
            }
            wrote = true;
            (floor_ms, seen_ms) = self.stamp_meta(&mut group);
            group.into_batch()
        });
        if let Err(e) = &result {
            tracing::warn!(error = %e, "store group commit failed");
            // Nothing of the group is visible: every caller gets the error.
            for (_, answer) in answers.iter_mut() {
                if answer.is_ok() {
                    *answer = Err(StoreError::from(e.clone()));
                }
            }
            unreferenced.clear();
            wrote = false;
            if let Some((_, reply)) = first.take() {
                // The engine failed before the group was evaluated.
                answers.push((reply, Err(StoreError::from(e.clone()))));
            }
        }
        let ok = answers.iter().filter(|(_, r)| r.is_ok()).count() as u64;
        if wrote {
            self.seen_written = seen_ms;
        }
        Committed {
            answers,
            ok,
            wrote,
            floor_ms,
            unreferenced,
        }
    }

    /// Takes the queue sequence another process on the same store (an `outpost queue
    /// requeue` or `envelope` command next to the running daemon) may have advanced
    /// since this writer's last group. `view` is read under this group's write lock, so
    /// two writers never give two messages the same queue key (the later one would
    /// overwrite the earlier record).
    fn catch_up_seq(&mut self, view: &dyn Reader) {
        if let Ok(Some(n)) = view
            .get(T_META, META_NEXT_SEQ)
            .map(|v| v.as_deref().and_then(parse_u64))
        {
            self.next_seq = self.next_seq.max(n);
        }
    }

    /// One request of the group, all or nothing: its outcomes and the blobs it left
    /// unreferenced, or the first op's error with its writes taken back out of `group`.
    fn evaluate(
        &mut self,
        view: &dyn Reader,
        group: &mut Overlay,
        now_ms: u64,
        ops: Vec<WriteOp>,
    ) -> (Result<Vec<OpOutcome>, StoreError>, Vec<[u8; 32]>) {
        let mut tx = Tx::new(
            view,
            &self.blobs,
            &self.opts,
            group,
            now_ms,
            &mut self.next_seq,
            &mut self.kv_numbers,
        );
        let mut outcomes = Vec::with_capacity(ops.len());
        let mut failed = None;
        for op in ops {
            match ops::apply(&mut tx, op) {
                Ok(o) => outcomes.push(o),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let (undo, unreferenced_blobs) = tx.finish();
        match failed {
            None => (Ok(outcomes), unreferenced_blobs),
            Some(e) => {
                group.roll_back(undo);
                (Err(e), Vec::new())
            }
        }
    }

    /// Piggy-backs the time floor on a group that writes (see `time`), and the newest
    /// envelope creation time seen when it moved; returns both as written. Read after
    /// the group's last request: an envelope noted before its enqueue was submitted is
    /// covered by the commit that stores it.
    fn stamp_meta(&self, group: &mut Overlay) -> (u64, u64) {
        let floor_ms = self.time.now_ms();
        group.set(T_META, META_TIME_FLOOR.to_vec(), Some(u64_val(floor_ms)));
        let seen_ms = self.time.seen_created_max();
        if seen_ms != self.seen_written {
            group.set(
                T_META,
                META_SEEN_CREATED_MAX.to_vec(),
                Some(u64_val(seen_ms)),
            );
        }
        (floor_ms, seen_ms)
    }

    /// Deletes blob files whose reference count reached zero in a committed batch.
    fn collect_blobs(&self, hashes: &[[u8; 32]]) {
        for h in hashes {
            match self.engine.get(T_BLOBREF, h) {
                Ok(None) => {
                    if let Err(e) = self.blobs.remove(h) {
                        tracing::warn!(error = %e, "could not delete unreferenced blob");
                    }
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!(error = %e, "blob reference check failed"),
            }
        }
    }
}
