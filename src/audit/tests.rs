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
    log.verify(&key().verifying_key(), NODE).unwrap()
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
