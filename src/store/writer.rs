//! Group commit: one thread owns every write.
//!
//! Callers send a request (a `Vec<WriteOp>` plus a oneshot reply) over a channel. The
//! writer takes the first request, drains whatever else is already waiting, evaluates
//! each request against a read-your-writes overlay of the group, and applies the whole
//! group as ONE engine batch (one fsync). Only then does it answer. So many concurrent
//! enqueues cost one fsync, and nobody hears `Ok` before the data is on disk.
//!
//! Requests are independent: one whose ops are invalid (queue full, bad audit index) is
//! answered with its own error and its writes are dropped from the group; the others
//! commit. If the engine batch itself fails (ENOSPC), every request of the group gets
//! the error and nothing of the group is visible.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::blobs::Blobs;
use super::codec::{u64_val, META_TIME_FLOOR, T_BLOBREF, T_META};
use super::engine::{BatchOp, Engine, Reader, Tree};
use super::ops::{self, OpOutcome, WriteOp};
use super::time::TimeKeeper;
use super::{StoreError, StoreOptions};

/// Upper bound of requests merged into one batch (keeps a batch's memory bounded).
const MAX_GROUP: usize = 1024;

pub type Reply = oneshot::Sender<Result<Vec<OpOutcome>, StoreError>>;

pub enum Msg {
    Write {
        ops: Vec<WriteOp>,
        reply: Option<Reply>,
    },
    Shutdown,
}

/// Pending writes of a group or a request, per tree: `None` = delete. Per-tree maps so
/// a lookup borrows the key instead of building a `(tree, Vec)` to search with.
#[derive(Default)]
pub struct Overlay {
    trees: BTreeMap<Tree, BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
}

impl Overlay {
    fn get(&self, tree: Tree, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.trees.get(&tree)?.get(key)
    }
    fn set(&mut self, tree: Tree, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.trees.entry(tree).or_default().insert(key, value);
    }
    fn merge(&mut self, other: Overlay) {
        for (tree, m) in other.trees {
            self.trees.entry(tree).or_default().extend(m);
        }
    }
    fn into_batch(self) -> Vec<BatchOp> {
        let mut out = Vec::new();
        for (tree, m) in self.trees {
            out.extend(m.into_iter().map(|(key, v)| match v {
                Some(value) => BatchOp::Put { tree, key, value },
                None => BatchOp::Delete { tree, key },
            }));
        }
        out
    }
}

/// One request's view while it is evaluated: its own writes over the group's over the
/// engine's committed state (read through the writer's own [`Reader`]). Point reads
/// only; ops that need a range scan read committed state and re-check every hit through
/// [`Tx::get`].
pub struct Tx<'a> {
    pub view: &'a dyn Reader,
    pub blobs: &'a Blobs,
    pub opts: &'a StoreOptions,
    group: &'a Overlay,
    local: Overlay,
    pub now_ms: u64,
    pub next_seq: &'a mut u64,
    /// Blob hashes whose last reference went away in this request.
    pub unreferenced_blobs: Vec<[u8; 32]>,
}

impl Tx<'_> {
    pub fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(v) = self.local.get(tree, key) {
            return Ok(v.clone());
        }
        if let Some(v) = self.group.get(tree, key) {
            return Ok(v.clone());
        }
        Ok(self.view.get(tree, key)?)
    }
    pub fn put(&mut self, tree: Tree, key: Vec<u8>, value: Vec<u8>) {
        self.local.set(tree, key, Some(value));
    }
    pub fn delete(&mut self, tree: Tree, key: Vec<u8>) {
        self.local.set(tree, key, None);
    }
}

/// Counters of committed groups, read by [`crate::store::Store::commit_stats`].
#[derive(Debug, Default)]
pub struct CommitStats {
    /// Engine commits (one fsync each).
    pub commits: std::sync::atomic::AtomicU64,
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
}

impl Writer {
    pub fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let mut shutdown = false;
        while !shutdown {
            let first = match rx.recv() {
                Ok(m) => m,
                Err(_) => break,
            };
            let mut reqs = Vec::new();
            match first {
                Msg::Write { ops, reply } => reqs.push((ops, reply)),
                Msg::Shutdown => shutdown = true,
            }
            while reqs.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(Msg::Write { ops, reply }) => reqs.push((ops, reply)),
                    Ok(Msg::Shutdown) => shutdown = true,
                    Err(_) => break,
                }
            }
            if !reqs.is_empty() {
                self.commit_group(reqs);
            }
        }
        tracing::debug!(engine = self.engine.name(), "store writer stopped");
    }

    fn commit_group(&mut self, reqs: Vec<(Vec<WriteOp>, Option<Reply>)>) {
        let now_ms = self.time.now_ms();
        let mut answers = Vec::with_capacity(reqs.len());
        let mut unreferenced = Vec::new();
        let mut reqs = Some(reqs);
        let engine = self.engine.clone();
        let result = engine.write_group(&mut |view| {
            let Some(reqs) = reqs.take() else {
                return Vec::new();
            };
            let mut group = Overlay::default();
            for (ops, reply) in reqs {
                let mut tx = Tx {
                    view,
                    blobs: &self.blobs,
                    opts: &self.opts,
                    group: &group,
                    local: Overlay::default(),
                    now_ms,
                    next_seq: &mut self.next_seq,
                    unreferenced_blobs: Vec::new(),
                };
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
                match failed {
                    None => {
                        let Tx {
                            local,
                            unreferenced_blobs,
                            ..
                        } = tx;
                        group.merge(local);
                        unreferenced.extend(unreferenced_blobs);
                        answers.push((reply, Ok(outcomes)));
                    }
                    Some(e) => answers.push((reply, Err(e))),
                }
            }
            if !answers.iter().any(|(_, r)| r.is_ok()) {
                return Vec::new();
            }
            // Advance the persisted time floor with every commit (see `time`).
            group.set(T_META, META_TIME_FLOOR.to_vec(), Some(u64_val(now_ms)));
            group.into_batch()
        });
        match &result {
            Ok(()) => {
                let ok = answers.iter().filter(|(_, r)| r.is_ok()).count() as u64;
                if ok > 0 {
                    use std::sync::atomic::Ordering::Relaxed;
                    self.time.persisted(now_ms);
                    self.stats.commits.fetch_add(1, Relaxed);
                    self.stats.requests.fetch_add(ok, Relaxed);
                }
                self.collect_blobs(&unreferenced);
            }
            Err(e) => tracing::warn!(error = %e, "store group commit failed"),
        }
        if answers.is_empty() {
            // The engine failed before the group was evaluated: answer everyone.
            for (_, reply) in reqs.into_iter().flatten() {
                if let (Some(reply), Err(e)) = (reply, &result) {
                    let _ = reply.send(Err(StoreError::from(e.clone())));
                }
            }
        }
        for (reply, answer) in answers {
            let answer = match (&result, answer) {
                (Err(e), Ok(_)) => Err(StoreError::from(e.clone())),
                (_, a) => a,
            };
            if let Some(reply) = reply {
                // A caller that stopped waiting is fine: the write is durable anyway.
                let _ = reply.send(answer);
            }
        }
        self.engine.after_group();
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
