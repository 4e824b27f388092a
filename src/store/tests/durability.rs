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

/// Two writers on one SQLite store — the daemon, and an `outpost queue requeue` or
/// `envelope` command run next to it — each keep a sequence counter. Each takes it from
/// the store under its write lock, so the second one's message never takes the first
/// one's queue key (which would overwrite that record). sled admits one process only.
#[test]
fn two_processes_writing_one_store_never_share_a_queue_key() {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let daemon = open(EngineKind::Sqlite, d.path(), &c);
    let cli = open(EngineKind::Sqlite, d.path(), &c);
    for i in 0..3 {
        daemon
            .enqueue(msg("gw", &format!("d{i}"), 0, b"x"))
            .wait()
            .unwrap();
        cli.enqueue(msg("gw", &format!("c{i}"), 0, b"x"))
            .wait()
            .unwrap();
    }
    cli.close();
    let want = vec!["d0", "c0", "d1", "c1", "d2", "c2"];
    assert_eq!(
        ids(&daemon.next_batch("outbox", "gw", 10, T0).unwrap()),
        want
    );
    daemon.close();
    let s = open(EngineKind::Sqlite, d.path(), &c);
    assert_eq!(s.pending("outbox", "gw").unwrap(), 6);
    assert_eq!(ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()), want);
    assert!(s.doctor().unwrap().healthy());
}

/// Opening a store collects blob files nothing references — but a writer in another
/// process (the daemon, while an `outpost` command opens the store) writes a blob
/// inside its group's transaction and commits the reference after it (here: a second
/// later). The collection looks under the write lock, so it waits for that commit
/// instead of deleting a blob an acknowledged message is about to need. (Should the
/// open be slower than that second, the test passes without proving anything; it never
/// fails wrongly.)
#[test]
fn opening_never_collects_a_blob_another_writer_is_about_to_reference() {
    use crate::store::blobs::{sha256, Blobs};
    use crate::store::codec::u64_val;
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    open(EngineKind::Sqlite, d.path(), &c).close();
    let body = vec![9u8; 100_000];
    let h = sha256(&body);
    let dir = d.path().to_path_buf();
    let (started, wait) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let mut conn = rusqlite::Connection::open(dir.join(engine::sqlite::DB_FILE)).unwrap();
        let t = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        Blobs::open(&dir).unwrap().put(&h, &body).unwrap();
        started.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_secs(1));
        let table = format!("t{}", crate::store::codec::T_BLOBREF);
        t.execute(
            &format!("INSERT INTO {table} (k, v) VALUES (?1, ?2)"),
            rusqlite::params![h.to_vec(), u64_val(1)],
        )
        .unwrap();
        t.commit().unwrap();
    });
    wait.recv().unwrap();
    let s = open(EngineKind::Sqlite, d.path(), &c);
    writer.join().unwrap();
    assert!(
        s.inner.blobs.path(&h).is_file(),
        "a blob whose reference was being committed was collected"
    );
}
