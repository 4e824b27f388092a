//! Tests of the audit log as the daemon and `outpost audit verify` use it.

use std::sync::Arc;

use ed25519_dalek::SigningKey;

use super::*;

const NODE: &str = "node:pump-17";

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn record(i: u64) -> AuditRecord {
    let mut r = AuditRecord::new(AuditEvent::ToolCall, AuditOutcome::Ok);
    r.tool_name = Some("echo".into());
    r.job_id = Some(format!("job-{i}"));
    r.args_sha256 = Some(sha256_hex(format!("args-{i}").as_bytes()));
    r
}

/// A log with `n` entries and checkpoints at 3 and at `n`.
fn filled(n: u64) -> (Arc<MemoryAuditStorage>, AuditLog<Arc<MemoryAuditStorage>>) {
    let storage = Arc::new(MemoryAuditStorage::new());
    let log = AuditLog::open(storage.clone()).unwrap();
    for i in 0..n {
        let (idx, _) = log.append(record(i), 1_000 + i).unwrap();
        assert_eq!(idx, i);
        if i == 2 {
            log.checkpoint(&key(), NODE).unwrap();
        }
    }
    log.checkpoint(&key(), NODE).unwrap();
    (storage, log)
}

fn verify(log: &AuditLog<Arc<MemoryAuditStorage>>) -> VerifyReport {
    log.verify(&[key().verifying_key()], NODE).unwrap()
}

#[test]
fn append_returns_evidence_matching_the_stored_bytes() {
    let (storage, log) = filled(10);
    let rows = storage.read(0, 100).unwrap();
    assert_eq!(rows.len(), 10);
    let leaves: Vec<Hash> = rows.iter().map(|(_, b)| leaf_hash(b)).collect();
    assert_eq!(log.root(), root(&leaves));
    let (idx, leaf) = log.append(record(10), 5).unwrap();
    assert_eq!(idx, 10);
    let (_, bytes) = &storage.read(10, 1).unwrap()[0];
    assert_eq!(leaf, leaf_hash(bytes));
    let e: AuditEntry = serde_json::from_slice(bytes).unwrap();
    assert_eq!((e.index, e.ts_ms), (10, 5));
}

#[test]
fn reopen_rebuilds_the_same_root_across_pages() {
    let (storage, log) = filled(2_500);
    let before = (log.size(), log.root());
    drop(log);
    let reopened = AuditLog::open(storage).unwrap();
    assert_eq!((reopened.size(), reopened.root()), before);
    assert!(verify(&reopened).is_ok());
}

#[test]
fn untouched_log_verifies() {
    let (_, log) = filled(20);
    let r = verify(&log);
    assert!(r.is_ok(), "{:?}", r.failures);
    assert_eq!(r.entries, 20);
    assert_eq!(r.checkpoints_checked, 2);
    assert_eq!(r.root, log.root());
}

#[test]
fn altered_entry_fails_verify() {
    let (storage, log) = filled(20);
    storage.tamper(|rows| {
        let row = rows.get_mut(&5).unwrap();
        let text = String::from_utf8(row.clone()).unwrap();
        *row = text.replace("job-5", "job-X").into_bytes();
    });
    let r = verify(&log);
    assert!(
        r.failures
            .contains(&VerifyFailure::RootMismatch { size: 20 }),
        "{r:?}"
    );
    // The early checkpoint (size 3) does not cover entry 5 and still holds.
    assert!(!r
        .failures
        .contains(&VerifyFailure::RootMismatch { size: 3 }));
}

#[test]
fn removed_entry_fails_verify() {
    let (storage, log) = filled(20);
    storage.tamper(|rows| {
        rows.remove(&7);
    });
    let r = verify(&log);
    assert!(!r.is_ok());
    assert!(
        r.failures.contains(&VerifyFailure::Gap {
            position: 7,
            key: 8
        }),
        "{r:?}"
    );
    assert!(r.failures.contains(&VerifyFailure::CheckpointBeyondLog {
        size: 20,
        entries: 19
    }));
}

#[test]
fn removed_and_renumbered_entry_fails_verify() {
    // An attacker who also closes the gap (shifts later rows down) is caught by the
    // index inside each entry and by the checkpoint.
    let (storage, log) = filled(20);
    storage.tamper(|rows| {
        let mut v: Vec<Vec<u8>> = std::mem::take(rows).into_values().collect();
        v.remove(7);
        *rows = v
            .into_iter()
            .enumerate()
            .map(|(i, b)| (i as u64, b))
            .collect();
    });
    let r = verify(&log);
    assert!(r.failures.contains(&VerifyFailure::IndexMismatch {
        position: 7,
        claimed: 8
    }));
    assert!(!r
        .failures
        .iter()
        .any(|f| matches!(f, VerifyFailure::Gap { .. })));
}

#[test]
fn reordered_entries_fail_verify() {
    let (storage, log) = filled(20);
    storage.tamper(|rows| {
        let a = rows.get(&10).unwrap().clone();
        let b = rows.get(&11).unwrap().clone();
        rows.insert(10, b);
        rows.insert(11, a);
    });
    let r = verify(&log);
    assert!(r.failures.contains(&VerifyFailure::IndexMismatch {
        position: 10,
        claimed: 11
    }));
    assert!(r
        .failures
        .contains(&VerifyFailure::RootMismatch { size: 20 }));
}

#[test]
fn checkpoint_from_another_key_fails_verify() {
    let (storage, log) = filled(4);
    let forged = sign_checkpoint(
        &SigningKey::from_bytes(&[9; 32]),
        &origin_for(NODE),
        4,
        &log.root(),
    );
    storage.put_checkpoint(4, &forged).unwrap();
    let r = verify(&log);
    assert!(matches!(
        r.failures.as_slice(),
        [VerifyFailure::BadCheckpoint { size: 4, .. }]
    ));
}

#[test]
fn checkpoint_is_parseable_and_matches_the_tree() {
    let (_, log) = filled(5);
    let note = log.checkpoint(&key(), NODE).unwrap();
    let cp = parse_and_verify(&note, &key().verifying_key(), "outpost/node:pump-17").unwrap();
    assert_eq!((cp.size, cp.root), (5, log.root()));
    assert_eq!(log.latest_checkpoint().unwrap().unwrap(), (5, note));
}

#[test]
fn failed_append_poisons_until_reopen() {
    let storage = Arc::new(MemoryAuditStorage::new());
    let log = AuditLog::open(storage.clone()).unwrap();
    log.append(record(0), 1).unwrap();
    storage.fail_appends(true);
    assert!(matches!(
        log.append(record(1), 2),
        Err(AuditError::Storage(_))
    ));
    storage.fail_appends(false);
    assert!(matches!(
        log.append(record(1), 2),
        Err(AuditError::Poisoned)
    ));
    let log = AuditLog::open(storage).unwrap();
    assert_eq!(log.append(record(1), 3).unwrap().0, 1);
}

#[test]
fn open_refuses_a_gap() {
    let (storage, _) = filled(5);
    storage.tamper(|rows| {
        rows.remove(&2);
    });
    assert!(matches!(
        AuditLog::open(storage),
        Err(AuditError::Corrupt(_))
    ));
}

#[test]
fn export_jsonl_since_and_recompute() {
    let (_, log) = filled(12);
    let mut all = Vec::new();
    assert_eq!(log.export_jsonl(0, &mut all).unwrap(), 12);
    let text = String::from_utf8(all).unwrap();
    let leaves: Vec<Hash> = text.lines().map(|l| leaf_hash(l.as_bytes())).collect();
    assert_eq!(root(&leaves), log.root());
    let mut tail = Vec::new();
    assert_eq!(log.export_jsonl(9, &mut tail).unwrap(), 3);
    let first: AuditEntry =
        serde_json::from_str(String::from_utf8(tail).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(first.index, 9);
}

#[test]
fn append_many_is_consecutive_and_consistent_with_old_checkpoint() {
    let (storage, log) = filled(3);
    let old = (log.size(), log.root());
    let out = log.append_many((3..8).map(record).collect(), 9).unwrap();
    assert_eq!(
        out.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![3, 4, 5, 6, 7]
    );
    let leaves: Vec<Hash> = storage
        .read(0, 100)
        .unwrap()
        .iter()
        .map(|(_, b)| leaf_hash(b))
        .collect();
    let proof = consistency_proof_from_leaves(old.0, &leaves).unwrap();
    assert!(verify_consistency(old.0, 8, &old.1, &log.root(), &proof));
}

#[test]
fn sync_batches_extend_the_gateway_tree_step_by_step() {
    let (_, log) = filled(10);
    let vk = key().verifying_key();
    let mut gateway = Frontier::new();
    let b1 = log.sync_batch(0, 4, &key(), NODE).unwrap();
    assert_eq!((b1.from, b1.size, b1.entries.len()), (0, 4, 4));
    let ext = verify_extension(&gateway, &b1.entries, &b1.checkpoint, &[vk], NODE).unwrap();
    gateway =
        Frontier::from_subtree_hashes(ext.frontier.size(), &ext.frontier.subtree_hashes()).unwrap();
    let b2 = log.sync_batch(4, 100, &key(), NODE).unwrap();
    assert_eq!((b2.from, b2.size), (4, 10));
    let ext = verify_extension(&gateway, &b2.entries, &b2.checkpoint, &[vk], NODE).unwrap();
    assert_eq!(ext.frontier.root(), log.root());
    assert_eq!(ext.leaf_hashes.len(), 6);
    // Checkpoints signed for sync are stored and checked by verify.
    let r = verify(&log);
    assert!(r.is_ok(), "{:?}", r.failures);
    assert_eq!(r.checkpoints_checked, 3);
    assert!(log.sync_batch(11, 1, &key(), NODE).is_err());
}

#[test]
fn gateway_refuses_gaps_reorders_alterations_and_forks() {
    let (_, log) = filled(8);
    let vk = key().verifying_key();
    let mut base = Frontier::new();
    let first = log.sync_batch(0, 3, &key(), NODE).unwrap();
    for e in &first.entries {
        base.push(leaf_hash(e));
    }
    let b = log.sync_batch(3, 100, &key(), NODE).unwrap();
    assert!(verify_extension(&base, &b.entries, &b.checkpoint, &[vk], NODE).is_ok());

    let mut gap = b.entries.clone();
    gap.remove(1);
    assert_eq!(
        verify_extension(&base, &gap, &b.checkpoint, &[vk], NODE),
        Err(ExtensionError::IndexMismatch {
            position: 4,
            claimed: 5
        })
    );
    let mut swapped = b.entries.clone();
    swapped.swap(0, 1);
    assert!(matches!(
        verify_extension(&base, &swapped, &b.checkpoint, &[vk], NODE),
        Err(ExtensionError::IndexMismatch {
            position: 3,
            claimed: 4
        })
    ));
    let mut altered = b.entries.clone();
    altered[2] = String::from_utf8(altered[2].clone())
        .unwrap()
        .replace("job-5", "job-9")
        .into_bytes();
    assert_eq!(
        verify_extension(&base, &altered, &b.checkpoint, &[vk], NODE),
        Err(ExtensionError::RootMismatch { size: 8 })
    );
    assert!(matches!(
        verify_extension(&base, &b.entries[..4], &b.checkpoint, &[vk], NODE),
        Err(ExtensionError::SizeMismatch {
            checkpoint: 8,
            computed: 7
        })
    ));
    // A gateway whose history differs (forked log) cannot be extended.
    let mut fork = Frontier::new();
    for i in 0..3 {
        fork.push(leaf_hash(format!("other-{i}").as_bytes()));
    }
    assert_eq!(
        verify_extension(&fork, &b.entries, &b.checkpoint, &[vk], NODE),
        Err(ExtensionError::RootMismatch { size: 8 })
    );
    let stranger = SigningKey::from_bytes(&[1; 32]).verifying_key();
    assert!(matches!(
        verify_extension(&base, &b.entries, &b.checkpoint, &[stranger], NODE),
        Err(ExtensionError::Checkpoint(_))
    ));
}

#[test]
fn open_from_a_persisted_frontier_skips_old_entries() {
    let (storage, log) = filled(50);
    let snap = log.frontier();
    let (size, hashes) = (snap.size(), snap.subtree_hashes());
    for i in 50..60 {
        log.append(record(i), 9).unwrap();
    }
    let expected = log.root();
    drop(log);
    let restored = Frontier::from_subtree_hashes(size, &hashes).unwrap();
    let log = AuditLog::open_from(storage.clone(), restored).unwrap();
    assert_eq!((log.size(), log.root()), (60, expected));
    // A snapshot claiming more entries than stored is refused.
    let mut too_big = Frontier::new();
    (0..61).for_each(|i| too_big.push(leaf_hash(&[i as u8])));
    assert!(matches!(
        AuditLog::open_from(storage, too_big),
        Err(AuditError::Corrupt(_))
    ));
}

#[test]
fn concurrent_appends_get_unique_dense_indexes() {
    let storage = Arc::new(MemoryAuditStorage::new());
    let log = Arc::new(AuditLog::open(storage).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                (0..50)
                    .map(|i| log.append(record(t * 100 + i), 1).unwrap().0)
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..400).collect::<Vec<u64>>());
    log.checkpoint(&key(), NODE).unwrap();
    assert!(verify(&log).is_ok());
}

#[test]
fn shared_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<AuditLog<Arc<MemoryAuditStorage>>>();
    assert_send_sync::<crate::tools::Registry>();
}

/// The daemon's path: submit without waiting, confirm (or fail) later.
fn submit(log: &AuditLog<Arc<MemoryAuditStorage>>, i: u64, store_it: bool) -> Ticket {
    let storage = log.storage().clone();
    let (_, _stored, ticket) = log
        .append_submit(vec![record(i)], 7, |first, bytes| {
            store_it && storage.append_batch(first, &bytes).is_ok()
        })
        .unwrap();
    ticket
}

#[test]
fn size_root_and_checkpoints_cover_only_confirmed_entries() {
    let (_, log) = filled(3);
    let root3 = log.root();
    let a = submit(&log, 3, true);
    let b = submit(&log, 4, true);
    // Submitted, not confirmed: nothing reports them.
    assert_eq!((log.size(), log.root(), log.unconfirmed()), (3, root3, 2));
    let note = log.checkpoint(&key(), NODE).unwrap();
    assert!(note.contains("\n3\n"), "{note}");
    assert_eq!(log.sync_batch(0, 100, &key(), NODE).unwrap().size, 3);
    // Confirmations arriving out of order advance only over a confirmed prefix.
    log.confirm(b);
    assert_eq!(log.size(), 3);
    log.confirm(a);
    assert_eq!((log.size(), log.unconfirmed()), (5, 0));
    assert!(verify(&log).is_ok(), "{:?}", verify(&log));
}

/// The disk-full episode: an entry whose write failed is never covered by a checkpoint,
/// and the next entry takes its index; `verify` passes afterwards (it reported tampering
/// forever before).
#[test]
fn a_failed_append_is_never_checkpointed_and_verify_passes_after() {
    let (storage, log) = filled(3);
    storage.fail_appends(true);
    let lost = submit(&log, 3, true);
    // A checkpoint taken while the failure is still in flight, and one after it.
    log.checkpoint(&key(), NODE).unwrap();
    log.mark_failed(lost);
    log.checkpoint(&key(), NODE).unwrap();
    assert_eq!(log.size(), 3);
    storage.fail_appends(false);
    let next = submit(&log, 30, true);
    log.confirm(next);
    log.confirm(lost); // a stale ticket changes nothing
    assert_eq!(log.size(), 4);
    log.checkpoint(&key(), NODE).unwrap();
    let report = verify(&log);
    assert!(report.is_ok(), "{report:?}");
    let (_, bytes) = &storage.read(3, 1).unwrap()[0];
    let e: AuditEntry = serde_json::from_slice(bytes).unwrap();
    assert_eq!(e.job_id.as_deref(), Some("job-30"));
}
