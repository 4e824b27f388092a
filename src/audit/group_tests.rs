//! Group commit: appends queued behind a slow write share one storage batch.

use std::sync::Arc;

use ed25519_dalek::SigningKey;

use crate::audit::*;

const NODE: &str = "node:pump-17";

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn record(i: u64) -> AuditRecord {
    AuditRecord::tool_call(
        AuditOutcome::Ok,
        "echo",
        &format!("job-{i}"),
        &serde_json::json!({"i": i}),
    )
}

/// Storage whose first batch blocks until the test releases it, counting batches.
struct GatedStorage {
    inner: MemoryAuditStorage,
    batches: std::sync::atomic::AtomicUsize,
    gate: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl AuditStorage for GatedStorage {
    fn len(&self) -> Result<u64, StorageError> {
        self.inner.len()
    }
    fn append(&self, index: u64, entry: &[u8]) -> Result<(), StorageError> {
        self.inner.append(index, entry)
    }
    fn append_batch(&self, first: u64, entries: &[Vec<u8>]) -> Result<(), StorageError> {
        self.batches
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let gate = self.gate.lock().unwrap().take();
        if let Some(rx) = gate {
            rx.recv().unwrap();
        }
        self.inner.append_batch(first, entries)
    }
    fn read(&self, from: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        self.inner.read(from, limit)
    }
    fn put_checkpoint(&self, size: u64, note: &str) -> Result<(), StorageError> {
        self.inner.put_checkpoint(size, note)
    }
    fn checkpoints(&self) -> Result<Vec<(u64, String)>, StorageError> {
        self.inner.checkpoints()
    }
}

#[test]
fn appends_queued_behind_a_slow_write_share_one_batch() {
    let (release, rx) = std::sync::mpsc::channel();
    let storage = Arc::new(GatedStorage {
        inner: MemoryAuditStorage::new(),
        batches: Default::default(),
        gate: std::sync::Mutex::new(Some(rx)),
    });
    let log = Arc::new(AuditLog::open(storage.clone()).unwrap());
    let spawn = |i: u64| {
        let log = log.clone();
        std::thread::spawn(move || log.append(record(i), i).unwrap())
    };
    let first = spawn(0);
    // Wait (bounded) until the first write is in flight, then queue 20 more behind it.
    let deadline = std::time::Duration::from_secs(5);
    // Test-only deadline for a poll loop on plain threads (no tokio clock here).
    #[allow(clippy::disallowed_methods)]
    let poll = |cond: &dyn Fn() -> bool| {
        let start = std::time::Instant::now();
        while !cond() {
            assert!(start.elapsed() < deadline, "condition not reached");
            std::thread::yield_now();
        }
    };
    poll(&|| storage.batches.load(std::sync::atomic::Ordering::SeqCst) == 1);
    let rest: Vec<_> = (1..=20).map(spawn).collect();
    poll(&|| log.queued() == 20);
    assert_eq!(log.size(), 0, "nothing is visible before it is durable");
    release.send(()).unwrap();
    assert_eq!(first.join().unwrap().0, 0);
    let mut idx: Vec<u64> = rest.into_iter().map(|t| t.join().unwrap().0).collect();
    idx.sort_unstable();
    assert_eq!(idx, (1..=20).collect::<Vec<u64>>());
    assert_eq!(storage.batches.load(std::sync::atomic::Ordering::SeqCst), 2);
    log.checkpoint(&key(), NODE).unwrap();
    assert!(log.verify(&[key().verifying_key()], NODE).unwrap().is_ok());
}
