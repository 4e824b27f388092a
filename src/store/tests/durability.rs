//! The writer answers a group only after a sync that started after its commit, also
//! when it hands syncs to its sync thread and commits the next group meanwhile.
//!
//! A wrapper engine numbers every commit and records which message ids it carried; a
//! sync raises the durable watermark to the last commit made *before* it started. Every
//! caller that hears `Ok` checks its message's commit is under the watermark at that
//! moment; answering before the sync (or after a sync that began too early) fails it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::store::codec::T_BYID;
use crate::store::engine::{self, BatchOp, Engine, EngineError, GroupBuilder};

struct Watch {
    inner: Box<dyn Engine>,
    commits: AtomicU64,
    durable: AtomicU64,
    /// Message id → number of the commit that carried it.
    carried: Mutex<HashMap<Vec<u8>, u64>>,
    fail_syncs: AtomicBool,
}

impl Watch {
    fn open(kind: EngineKind, dir: &Path) -> Arc<Watch> {
        Arc::new(Watch {
            inner: engine::open(kind, dir).unwrap(),
            commits: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            carried: Mutex::new(HashMap::new()),
            fail_syncs: AtomicBool::new(false),
        })
    }

    /// Whether the commit that carried `id` is known durable now.
    fn is_durable(&self, id: &str) -> bool {
        let n = self
            .carried
            .lock()
            .unwrap()
            .get(&crate::store::codec::id_key(id))
            .copied();
        n.is_some_and(|n| n <= self.durable.load(Ordering::SeqCst))
    }
}

pass_through_reader!(Watch);

impl Engine for Watch {
    fn name(&self) -> &'static str {
        "watch"
    }
    fn commit_group(&self, build: &mut GroupBuilder<'_>) -> Result<(), EngineError> {
        let mut ids = Vec::new();
        self.inner.commit_group(&mut |view| {
            let batch = build(view);
            for op in &batch {
                if let BatchOp::Put { tree, key, .. } = op {
                    if *tree == T_BYID {
                        ids.push(key.clone());
                    }
                }
            }
            batch
        })?;
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        let mut carried = self.carried.lock().unwrap();
        for id in ids {
            carried.insert(id, n);
        }
        Ok(())
    }
    fn sync(&self) -> Result<(), EngineError> {
        let upto = self.commits.load(Ordering::SeqCst);
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(EngineError::Other("injected fsync failure".into()));
        }
        self.inner.sync()?;
        self.durable.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }
    pass_through_engine_methods!();
}

fn open_watched(kind: EngineKind, dir: &Path) -> (Store, Arc<Watch>) {
    let w = Watch::open(kind, dir);
    let c = ManualClock::new(T0);
    let s = Store::open_on(dir, opts(kind), Arc::new(c), w.clone()).unwrap();
    (s, w)
}

fn nobody_hears_ok_before_the_sync_after_their_commit(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let (s, w) = open_watched(kind, d.path());
    let threads: Vec<_> = (0..32)
        .map(|t| {
            let s = s.clone();
            let w = w.clone();
            std::thread::spawn(move || {
                let mut early = 0;
                for i in 0..40 {
                    let id = format!("{t}-{i}");
                    s.enqueue(msg("gw", &id, 0, &[7; 512])).wait().unwrap();
                    if !w.is_durable(&id) {
                        early += 1;
                    }
                }
                early
            })
        })
        .collect();
    let early: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(early, 0, "answers sent before their commit was synced");
    let c = s.commit_stats();
    assert_eq!(c.requests, 32 * 40);
    assert!(c.syncs >= 1 && c.syncs <= c.commits, "{c:?}");
    assert_eq!(s.pending("outbox", "gw").unwrap(), 32 * 40);
}

fn a_failed_sync_fails_the_callers_and_is_not_counted(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let (s, w) = open_watched(kind, d.path());
    s.enqueue(msg("gw", "before", 0, b"x")).wait().unwrap();
    w.fail_syncs.store(true, Ordering::SeqCst);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..10)
                    .filter(|i| {
                        s.enqueue(msg("gw", &format!("{t}-{i}"), 0, b"y"))
                            .wait()
                            .is_ok()
                    })
                    .count()
            })
        })
        .collect();
    let ok: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(ok, 0, "a write was answered Ok although its sync failed");
    assert_eq!(s.commit_stats().requests, 1);
}

for_each_engine!(
    nobody_hears_ok_before_the_sync_after_their_commit,
    a_failed_sync_fails_the_callers_and_is_not_counted,
);
