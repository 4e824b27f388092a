//! The conformance suite: one generic fn per behaviour, run for every engine.

use super::*;

for_each_engine!(
    fifo_within_priority,
    a_pipelined_drain_with_a_cursor_sees_each_message_once_in_order,
    duplicates_are_detected_while_queued_and_after_ack,
    queue_full_at_the_per_recipient_cap,
    byte_budget_gives_storage_full_without_eviction,
    too_large_and_already_expired_are_refused,
    ack_removes_and_leaves_a_delivered_tombstone,
    expired_messages_are_never_returned_and_are_swept,
    failure_backoff_blocks_the_head_then_dead_letters,
    large_bodies_live_in_blobs_and_are_collected,
    dedup_window_survives_restart_and_is_pruned,
    kv_put_get_list_delete,
    kv_put_next_numbers_in_order_and_never_twice,
    results_are_kept_until_keep_until,
    audit_append_checks_the_index_and_is_atomic_with_a_result,
    concurrent_producers_all_commit,
    everything_survives_reopen,
    list_pages_peers_stats_and_next_expiry,
    time_floor_survives_a_1970_boot,
    a_sweep_with_nothing_due_writes_nothing,
    a_clean_close_persists_the_time_floor,
    a_time_correction_lowers_the_persisted_floor_and_survives_reopen,
    newer_schema_is_refused_older_is_migrated,
    v2_tombstones_move_into_the_id_tree,
    v3_uuid_ids_are_packed_on_open,
    lane_messages_expire_without_an_index_entry,
    a_lane_closes_past_its_stray_budget,
    backup_is_a_usable_store,
    invalid_names_are_refused_without_panic,
);

/// The batch op that stamps `version` as the store's schema (to fake an old or a newer
/// store).
fn schema_op(version: u64) -> engine::BatchOp {
    engine::BatchOp::Put {
        tree: codec::T_META,
        key: codec::META_SCHEMA.to_vec(),
        value: codec::u64_val(version),
    }
}

fn fifo_within_priority(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    for (id, prio) in [("a", 1), ("b", 5), ("c", 1), ("d", 5), ("e", 0)] {
        s.enqueue(msg("gw", id, prio, b"x")).wait().unwrap();
    }
    s.enqueue(msg("other", "z", 9, b"x")).wait().unwrap();
    let got = s.next_batch("outbox", "gw", 10, T0).unwrap();
    assert_eq!(ids(&got), vec!["b", "d", "a", "c", "e"]);
    assert_eq!(s.pending("outbox", "gw").unwrap(), 5);
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 2, T0).unwrap()),
        vec!["b", "d"]
    );
}

fn a_pipelined_drain_with_a_cursor_sees_each_message_once_in_order(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    let mut want = Vec::new();
    for (i, prio) in (0..23).zip([0u8, 2, 1].into_iter().cycle()) {
        let id = format!("m{i:02}");
        s.enqueue(msg("gw", &id, prio, b"x")).wait().unwrap();
        want.push((std::cmp::Reverse(prio), i, id));
    }
    s.enqueue(msg("other", "z", 9, b"x")).wait().unwrap();
    want.sort();
    let want: Vec<String> = want.into_iter().map(|w| w.2).collect();
    // Read batch n+1 while the ack of batch n is still in flight.
    let mut got = Vec::new();
    let mut in_flight = Vec::new();
    let mut last: Option<StoredMessage> = None;
    loop {
        let b = s
            .next_batch_after("outbox", "gw", last.as_ref(), 5, T0)
            .unwrap();
        let Some(tail) = b.last().cloned() else {
            break;
        };
        let batch_ids = ids(&b);
        got.extend(batch_ids.clone());
        in_flight.push(s.ack("outbox", "gw", batch_ids, T0));
        last = Some(tail);
    }
    for a in in_flight {
        assert!(a.wait().unwrap().iter().all(|o| o.was_stored));
    }
    assert_eq!(got, want);
    assert_eq!(s.pending("outbox", "gw").unwrap(), 0);
    assert_eq!(s.pending("outbox", "other").unwrap(), 1);
    assert!(s.next_batch("outbox", "gw", 10, T0).unwrap().is_empty());
}

fn duplicates_are_detected_while_queued_and_after_ack(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    assert!(matches!(
        s.enqueue(msg("gw", "m1", 0, b"x")).wait().unwrap(),
        EnqueueOutcome::Queued { .. }
    ));
    assert_eq!(
        s.enqueue(msg("gw", "m1", 0, b"x")).wait().unwrap(),
        EnqueueOutcome::Duplicate
    );
    s.ack("outbox", "gw", vec!["m1".into()], T0).wait().unwrap();
    assert_eq!(
        s.enqueue(msg("gw", "m1", 0, b"x")).wait().unwrap(),
        EnqueueOutcome::Duplicate
    );
    assert_eq!(s.pending("outbox", "gw").unwrap(), 0);
}

fn queue_full_at_the_per_recipient_cap(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let o = StoreOptions {
        max_messages_per_recipient: 3,
        ..opts(kind)
    };
    let s = Store::open(d.path(), o, Arc::new(c.clone())).unwrap();
    for i in 0..3 {
        s.enqueue(msg("gw", &format!("m{i}"), 0, b"x"))
            .wait()
            .unwrap();
    }
    let e = s.enqueue(msg("gw", "m3", 0, b"x")).wait().unwrap_err();
    assert!(matches!(e, StoreError::QueueFull { retry_after_s } if retry_after_s > 0));
    // Another recipient is unaffected, and an ack makes room.
    s.enqueue(msg("gw2", "n0", 0, b"x")).wait().unwrap();
    s.ack("outbox", "gw", vec!["m0".into()], T0).wait().unwrap();
    s.enqueue(msg("gw", "m3", 0, b"x")).wait().unwrap();
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["m1", "m2", "m3"]
    );
}

fn byte_budget_gives_storage_full_without_eviction(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let o = StoreOptions {
        max_store_bytes: 8 * 1024,
        ..opts(kind)
    };
    let s = Store::open(d.path(), o, Arc::new(c.clone())).unwrap();
    let mut n = 0;
    loop {
        match s
            .enqueue(msg("gw", &format!("m{n:03}"), 0, &[7u8; 1000]))
            .wait()
        {
            Ok(_) => n += 1,
            Err(StoreError::StorageFull) => break,
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert!(n < 100, "budget never enforced");
    }
    assert!(n >= 5, "budget hit too early: {n}");
    assert_eq!(s.pending("outbox", "gw").unwrap(), n);
    let first = s.next_batch("outbox", "gw", 1, T0).unwrap();
    s.ack("outbox", "gw", ids(&first), T0).wait().unwrap();
    s.enqueue(msg("gw", "after", 0, &[7u8; 1000]))
        .wait()
        .unwrap();
}

fn too_large_and_already_expired_are_refused(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let o = StoreOptions {
        max_message_bytes: 1000,
        ..opts(kind)
    };
    let s = Store::open(d.path(), o, Arc::new(c.clone())).unwrap();
    assert!(matches!(
        s.enqueue(msg("gw", "big", 0, &[0u8; 1001])).wait(),
        Err(StoreError::TooLarge {
            size: 1001,
            max: 1000
        })
    ));
    let mut m = msg("gw", "old", 0, b"x");
    m.expires_at_ms = T0;
    assert_eq!(s.enqueue(m).wait(), Err(StoreError::Expired));
    assert_eq!(s.pending("outbox", "gw").unwrap(), 0);
}

fn ack_removes_and_leaves_a_delivered_tombstone(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    s.enqueue(msg("gw", "m1", 0, b"x")).wait().unwrap();
    s.enqueue(msg("gw", "m2", 0, b"x")).wait().unwrap();
    s.mark_delivering("outbox", "gw", vec!["m1".into()])
        .wait()
        .unwrap();
    assert_eq!(
        s.status("m1").unwrap().unwrap().state,
        MessageState::Delivering
    );
    let out = s
        .ack("outbox", "gw", vec!["m1".into(), "nope".into()], T0)
        .wait()
        .unwrap();
    assert_eq!(
        out[0],
        AckOutcome {
            message_id: "m1".into(),
            was_stored: true
        }
    );
    assert_eq!(
        out[1],
        AckOutcome {
            message_id: "nope".into(),
            was_stored: false
        }
    );
    // Acking again is harmless and says it was not stored any more.
    let again = s.ack("outbox", "gw", vec!["m1".into()], T0).wait().unwrap();
    assert!(!again[0].was_stored);
    // Acking through the wrong recipient does not remove anything.
    let wrong = s
        .ack("outbox", "other", vec!["m2".into()], T0)
        .wait()
        .unwrap();
    assert!(!wrong[0].was_stored);
    assert_eq!(
        s.status("m1").unwrap().unwrap().state,
        MessageState::Delivered
    );
    assert_eq!(s.status("m2").unwrap().unwrap().state, MessageState::Queued);
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["m2"]
    );
}

fn expired_messages_are_never_returned_and_are_swept(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    let mut short = msg("gw", "short", 5, b"x");
    short.expires_at_ms = T0 + 1_000;
    s.enqueue(short).wait().unwrap();
    s.enqueue(msg("gw", "long", 0, b"x")).wait().unwrap();
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 1_000));
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0 + 999).unwrap()),
        vec!["short", "long"]
    );
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0 + 1_000).unwrap()),
        vec!["long"]
    );
    let swept = s.sweep_expired(T0 + 1_000).wait().unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].message_id, "short");
    let st = s.status("short").unwrap().unwrap();
    assert_eq!(st.state, MessageState::Expired);
    assert_eq!(st.reason.as_deref(), Some(REASON_TIMEOUT));
    assert_eq!(s.pending("outbox", "gw").unwrap(), 1);
    assert!(s.sweep_expired(T0 + 1_000).wait().unwrap().is_empty());
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 3_600_000));
}

fn failure_backoff_blocks_the_head_then_dead_letters(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    let mut m = msg("gw", "a", 0, b"x");
    m.max_attempts = Some(3);
    s.enqueue(m).wait().unwrap();
    s.enqueue(msg("gw", "b", 0, b"x")).wait().unwrap();
    let dead = s
        .record_failure("outbox", "gw", vec!["a".into()], T0, 0.0)
        .wait()
        .unwrap();
    assert!(dead.is_empty());
    let st = s.status("a").unwrap().unwrap();
    assert_eq!((st.attempts, st.next_attempt_at_ms), (1, T0 + 5_000));
    // "a" is backing off: nothing overtakes it.
    assert!(s
        .next_batch("outbox", "gw", 10, T0 + 4_999)
        .unwrap()
        .is_empty());
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0 + 5_000).unwrap()),
        vec!["a", "b"]
    );
    s.record_failure("outbox", "gw", vec!["a".into()], T0 + 5_000, 0.0)
        .wait()
        .unwrap();
    assert_eq!(
        s.status("a").unwrap().unwrap().next_attempt_at_ms,
        T0 + 15_000
    );
    let dead = s
        .record_failure("outbox", "gw", vec!["a".into()], T0 + 15_000, 0.0)
        .wait()
        .unwrap();
    assert_eq!(dead, vec!["a".to_string()]);
    assert_eq!(s.status("a").unwrap().unwrap().state, MessageState::Dead);
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0 + 15_000).unwrap()),
        vec!["b"]
    );
    let dl = s.dead_letters(None, 10).unwrap();
    assert_eq!(ids(&dl.items), vec!["a"]);
    s.requeue("a").wait().unwrap();
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0 + 15_000).unwrap()),
        vec!["a", "b"]
    );
    assert_eq!(s.status("a").unwrap().unwrap().attempts, 0);
    assert_eq!(s.requeue("a").wait(), Err(StoreError::NotFound));
    // Dead again, then purged.
    for _ in 0..3 {
        s.record_failure("outbox", "gw", vec!["a".into()], T0 + 20_000, 0.0)
            .wait()
            .unwrap();
    }
    assert_eq!(s.purge_dead().wait().unwrap(), 1);
    assert!(s.dead_letters(None, 10).unwrap().items.is_empty());
    assert_eq!(s.pending("outbox", "gw").unwrap(), 1);
}

fn large_bodies_live_in_blobs_and_are_collected(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    s.enqueue(msg("gw", "big", 0, &body)).wait().unwrap();
    s.enqueue(msg("gw", "big2", 0, &body)).wait().unwrap();
    let path = s.inner.blobs.path(&blobs::sha256(&body));
    assert!(path.is_file());
    let got = s.next_batch("outbox", "gw", 10, T0).unwrap();
    assert_eq!(got[0].body, body);
    s.ack("outbox", "gw", vec!["big".into()], T0)
        .wait()
        .unwrap();
    assert!(path.is_file(), "still referenced by big2");
    s.ack("outbox", "gw", vec!["big2".into()], T0)
        .wait()
        .unwrap();
    assert!(!path.exists(), "unreferenced blob not deleted");
    assert_eq!(s.bytes_used().unwrap(), 0);
}

fn dedup_window_survives_restart_and_is_pruned(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    {
        let s = open(kind, d.path(), &c);
        s.remember("inbox", "r1", T0 + 10_000).wait().unwrap();
        let mut m = msg("app", "r2", 0, b"x");
        m.queue = "inbox".into();
        m.dedup_until_ms = Some(T0 + 20_000);
        s.enqueue(m).wait().unwrap();
        assert!(s.seen("inbox", "r1").unwrap());
        assert!(!s.seen("other", "r1").unwrap());
    }
    let s = open(kind, d.path(), &c);
    assert!(s.seen("inbox", "r1").unwrap());
    assert!(s.seen("inbox", "r2").unwrap());
    c.set(T0 + 10_001);
    s.sweep_expired(T0 + 10_001).wait().unwrap();
    assert!(!s.seen("inbox", "r1").unwrap());
    assert!(s.seen("inbox", "r2").unwrap());
}

fn kv_put_get_list_delete(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    s.kv_put("trust", "b", b"2".to_vec()).wait().unwrap();
    s.kv_put("trust", "a", b"1".to_vec()).wait().unwrap();
    s.kv_put("trustx", "c", b"3".to_vec()).wait().unwrap();
    assert_eq!(s.kv_get("trust", "a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(
        s.kv_list("trust").unwrap(),
        vec![
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec())
        ]
    );
    // A range from a key on, bounded, never into the next namespace.
    let from = |k: &str, n: usize| -> Vec<String> {
        let rows = s.kv_list_from("trust", k, n).unwrap();
        rows.into_iter().map(|(k, _)| k).collect()
    };
    assert_eq!(from("a", 10), ["a", "b"]);
    assert_eq!(from("aa", 10), ["b"]);
    assert_eq!(from("", 1), ["a"]);
    assert!(from("c", 10).is_empty() && from("a", 0).is_empty());
    // The keys starting with a prefix, and nothing after them.
    s.kv_put("trust", "a b", b"4".to_vec()).wait().unwrap();
    let with = |p: &str| -> Vec<String> {
        let rows = s.kv_list_prefix("trust", p).unwrap();
        rows.into_iter().map(|(k, _)| k).collect()
    };
    assert_eq!(with("a"), ["a", "a b"]);
    assert_eq!(with("a "), ["a b"]);
    assert_eq!(with(""), ["a", "a b", "b"]);
    assert!(with("c").is_empty());
    s.kv_delete("trust", "a b").wait().unwrap();
    s.kv_delete("trust", "a").wait().unwrap();
    assert_eq!(s.kv_get("trust", "a").unwrap(), None);
}

fn kv_put_next(s: &Store, ns: &str, value: &str) {
    let mut b = Batch::new();
    b.kv_put_next(ns, value.as_bytes().to_vec());
    s.commit(b).wait().unwrap();
}

fn numbered(s: &Store, ns: &str) -> Vec<(String, String)> {
    s.kv_list(ns)
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v).unwrap()))
        .collect()
}

fn kv_put_next_numbers_in_order_and_never_twice(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    // Two in one batch, a key that is no number, another namespace: 0, 1, then 2.
    s.kv_put("pend", "other", b"o".to_vec()).wait().unwrap();
    s.kv_put("pendx", &seq_key(7), b"x".to_vec())
        .wait()
        .unwrap();
    let mut b = Batch::new();
    b.kv_put_next("pend", b"a".to_vec())
        .kv_put_next("pend", b"b".to_vec());
    s.commit(b).wait().unwrap();
    kv_put_next(&s, "pend", "c");
    let k = |n: u64| seq_key(n);
    let want = |v: &[(u64, &str)]| -> Vec<(String, String)> {
        let mut w: Vec<(String, String)> = v.iter().map(|(n, x)| (k(*n), x.to_string())).collect();
        w.push(("other".into(), "o".into()));
        w
    };
    assert_eq!(numbered(&s, "pend"), want(&[(0, "a"), (1, "b"), (2, "c")]));
    // After the highest: a gap left by a delete below it is not filled; the highest
    // deleted is taken again.
    s.kv_delete("pend", &k(0)).wait().unwrap();
    s.kv_delete("pend", &k(2)).wait().unwrap();
    kv_put_next(&s, "pend", "d");
    assert_eq!(numbered(&s, "pend"), want(&[(1, "b"), (2, "d")]));
    // A request that failed took its number back: the next one takes it, no gap (the
    // trust log's readers need its numbers without holes).
    let mut b = Batch::new();
    b.kv_put_next("pend", b"lost".to_vec())
        .kv_put("", "k", b"v".to_vec());
    assert!(s.commit(b).wait().is_err(), "an empty namespace is refused");
    kv_put_next(&s, "pend", "e");
    assert_eq!(numbered(&s, "pend"), want(&[(1, "b"), (2, "d"), (3, "e")]));
    // Writers at once (their requests share groups): each its own number.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    kv_put_next(&s, "many", &format!("{t}-{i}"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let many = numbered(&s, "many");
    let keys: Vec<String> = many.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys, (0..80).map(k).collect::<Vec<_>>());
    let values: std::collections::BTreeSet<&str> = many.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(values.len(), 80, "none overwritten");
}

/// Two stores on one directory, as the gateway and an `outpost trust add` next to it
/// (SQLite only: sled admits one process): numbered puts from both never meet.
#[test]
fn two_stores_on_one_directory_never_take_the_same_number() {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let a = open(EngineKind::Sqlite, d.path(), &c);
    let b = open(EngineKind::Sqlite, d.path(), &c);
    let threads: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(w, s)| {
            std::thread::spawn(move || {
                for i in 0..25 {
                    kv_put_next(&s, "pend", &format!("{w}-{i}"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for s in [&a, &b] {
        let all = numbered(s, "pend");
        assert_eq!(all.len(), 50, "none overwritten: {all:?}");
        let keys: Vec<String> = all.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, (0..50).map(seq_key).collect::<Vec<_>>());
    }
}

fn results_are_kept_until_keep_until(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    s.result_put("job1", b"ok".to_vec(), T0 + 1_000)
        .wait()
        .unwrap();
    assert_eq!(s.result_get("job1").unwrap(), Some(b"ok".to_vec()));
    c.set(T0 + 1_000);
    assert_eq!(s.result_get("job1").unwrap(), None);
    s.sweep_expired(T0 + 1_000).wait().unwrap();
    assert_eq!(s.inner.engine.get(codec::T_RESULT, b"job1").unwrap(), None);
}

fn audit_append_checks_the_index_and_is_atomic_with_a_result(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    s.audit_append(0, b"e0".to_vec()).wait().unwrap();
    assert_eq!(
        s.audit_append(5, b"bad".to_vec()).wait(),
        Err(StoreError::AuditIndex {
            expected: 1,
            got: 5
        })
    );
    // Result + audit in one request: a bad index drops the result too.
    let r = s
        .write(vec![
            WriteOp::ResultPut {
                job_id: "j".into(),
                result: b"r".to_vec(),
                keep_until_ms: T0 + 9_999,
            },
            WriteOp::AuditAppend {
                index: 7,
                entry: b"x".to_vec(),
            },
        ])
        .wait();
    assert!(r.is_err());
    assert_eq!(s.result_get("j").unwrap(), None);
    s.write(vec![
        WriteOp::ResultPut {
            job_id: "j".into(),
            result: b"r".to_vec(),
            keep_until_ms: T0 + 9_999,
        },
        WriteOp::AuditAppend {
            index: 1,
            entry: b"e1".to_vec(),
        },
    ])
    .wait()
    .unwrap();
    assert_eq!(s.result_get("j").unwrap(), Some(b"r".to_vec()));
    assert_eq!(s.audit_len().unwrap(), 2);
    assert_eq!(s.audit_read(1, 10).unwrap(), vec![(1, b"e1".to_vec())]);
    s.checkpoint_put(2, "sig".into()).wait().unwrap();
    assert_eq!(s.checkpoints().unwrap(), vec![(2, "sig".to_string())]);
}

fn concurrent_producers_all_commit(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    let c0 = s.commit_stats();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..20 {
                    s.enqueue(msg(&format!("p{t}"), &format!("{t}-{i}"), 0, b"x"))
                        .wait()
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Every request counted once; never more commits than requests (group commit), and
    // never more syncs than commits.
    let c = s.commit_stats();
    assert_eq!(c.requests - c0.requests, 16 * 20);
    let commits = c.commits - c0.commits;
    assert!((1..=16 * 20).contains(&commits));
    assert!((1..=commits).contains(&(c.syncs - c0.syncs)));
    for t in 0..16 {
        let got = s.next_batch("outbox", &format!("p{t}"), 100, T0).unwrap();
        let want: Vec<String> = (0..20).map(|i| format!("{t}-{i}")).collect();
        assert_eq!(ids(&got), want, "per-producer order kept");
    }
}

fn everything_survives_reopen(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    {
        let s = open(kind, d.path(), &c);
        s.enqueue(msg("gw", "a", 0, b"1")).wait().unwrap();
        s.enqueue(msg("gw", "b", 0, b"2")).wait().unwrap();
        s.ack("outbox", "gw", vec!["a".into()], T0).wait().unwrap();
        s.kv_put("n", "k", b"v".to_vec()).wait().unwrap();
        s.close();
        assert_eq!(
            s.enqueue(msg("gw", "c", 0, b"3")).wait(),
            Err(StoreError::Closed)
        );
    }
    let s = open(kind, d.path(), &c);
    let got = s.next_batch("outbox", "gw", 10, T0).unwrap();
    assert_eq!(ids(&got), vec!["b"]);
    assert_eq!(got[0].body, b"2");
    assert_eq!(
        s.status("a").unwrap().unwrap().state,
        MessageState::Delivered
    );
    assert_eq!(s.kv_get("n", "k").unwrap(), Some(b"v".to_vec()));
    // Sequence numbers keep increasing across restarts (FIFO by arrival).
    s.enqueue(msg("gw", "c", 0, b"3")).wait().unwrap();
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["b", "c"]
    );
}

fn list_pages_peers_stats_and_next_expiry(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    for i in 0..5 {
        s.enqueue(msg("gw", &format!("g{i}"), 0, b"xy"))
            .wait()
            .unwrap();
    }
    s.enqueue(msg("hq", "h0", 0, b"xy")).wait().unwrap();
    let p1 = s.list("outbox", Some("gw"), None, 2).unwrap();
    assert_eq!(ids(&p1.items), vec!["g0", "g1"]);
    let p2 = s.list("outbox", Some("gw"), p1.next.as_deref(), 2).unwrap();
    assert_eq!(ids(&p2.items), vec!["g2", "g3"]);
    let p3 = s.list("outbox", Some("gw"), p2.next.as_deref(), 2).unwrap();
    assert_eq!(ids(&p3.items), vec!["g4"]);
    assert_eq!(p3.next, None);
    assert_eq!(s.list("outbox", None, None, 100).unwrap().items.len(), 6);
    assert_eq!(s.peers("outbox").unwrap(), vec!["gw", "hq"]);
    let stats = s.queue_stats(T0 + 61_000).unwrap();
    assert_eq!(stats.len(), 2);
    assert_eq!(
        (
            stats[0].peer.as_str(),
            stats[0].depth,
            stats[0].oldest_age_s
        ),
        ("gw", 5, 61)
    );
    assert!(stats[0].bytes > 0);
    assert!(s.list("outbox", None, Some("zz"), 1).is_err());
}

fn time_floor_survives_a_1970_boot(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    {
        let s = open(kind, d.path(), &c);
        let mut m = msg("gw", "soon", 0, b"x");
        m.expires_at_ms = T0 + 60_000;
        s.enqueue(m).wait().unwrap();
        c.set(T0 + 30_000);
        s.touch_time().wait().unwrap();
    }
    // Reboot without RTC: the clock says 1970.
    let c2 = ManualClock::new(10_000);
    let s = open(kind, d.path(), &c2);
    assert_eq!(s.now_ms(), T0 + 30_000);
    assert_eq!(
        s.next_batch("outbox", "gw", 10, s.now_ms()).unwrap().len(),
        1
    );
    c2.advance_ms(30_000);
    let now = s.now_ms();
    assert_eq!(now, T0 + 60_000);
    assert!(s.next_batch("outbox", "gw", 10, now).unwrap().is_empty());
    assert_eq!(s.sweep_expired(now).wait().unwrap().len(), 1);
}

/// An idle store stays still: a sweep pass that finds nothing due commits nothing (no
/// floor, no fsync); it used to commit the time floor on every pass, one fsync every
/// 4 s on an idle node and every second on a gateway.
fn a_sweep_with_nothing_due_writes_nothing(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    let mut m = msg("gw", "later", 0, b"x");
    m.expires_at_ms = T0 + 60_000;
    s.enqueue(m).wait().unwrap();
    let c0 = s.commit_stats();
    for _ in 0..5 {
        c.advance_ms(4_000);
        assert!(s.sweep_expired(s.now_ms()).wait().unwrap().is_empty());
    }
    let c1 = s.commit_stats();
    assert_eq!(
        (c1.commits, c1.syncs),
        (c0.commits, c0.syncs),
        "{c0:?} → {c1:?}"
    );
    assert_eq!(c1.requests, c0.requests + 5, "each pass still answered");
    // One that expires something commits, and carries the floor with it.
    c.set(T0 + 60_000);
    assert_eq!(s.sweep_expired(s.now_ms()).wait().unwrap().len(), 1);
    assert_eq!(s.commit_stats().commits, c0.commits + 1);
    assert_eq!(s.time_floor_lag_ms(), 0);
    // The floor then lags until the next commit or touch.
    c.advance_ms(5_000);
    assert_eq!(s.time_floor_lag_ms(), 5_000);
    s.touch_time().wait().unwrap();
    assert_eq!(s.time_floor_lag_ms(), 0);
    assert_eq!(s.commit_stats().commits, c0.commits + 2);
}

/// The floor is persisted coarsely while running, and exactly on a clean stop.
fn a_clean_close_persists_the_time_floor(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    {
        let s = open(kind, d.path(), &c);
        s.touch_time().wait().unwrap();
        c.advance_ms(90_000);
        s.close_keeping_time();
    }
    let s = open(kind, d.path(), &ManualClock::new(10_000));
    assert_eq!(s.now_ms(), T0 + 90_000);
}

/// RELIABILITY F2: the floor is written with every commit and used to keep a clock
/// that went a week ahead and came back a week ahead forever. A correction must lower
/// the persisted floor too, or the next start would resume from a week ahead.
fn a_time_correction_lowers_the_persisted_floor_and_survives_reopen(kind: EngineKind) {
    const WEEK: u64 = 7 * 86_400_000;
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0 + WEEK);
    {
        let s = open(kind, d.path(), &c);
        // An envelope remembered before: its created_at is persisted by its commit.
        s.note_seen_created(T0 - 10);
        let mut m = msg("gw", "seen", 0, b"x");
        m.expires_at_ms = T0 + 2 * WEEK;
        s.enqueue(m).wait().unwrap();
        // NTP sets the clock right; without a trusted time the floor holds.
        c.set(T0);
        assert_eq!(s.now_ms(), T0 + WEEK);
        s.touch_time().wait().unwrap();
        assert!(
            s.correct_time(T0 + WEEK, 150_000).is_none(),
            "a trusted time that agrees with the floor changes nothing"
        );
        let (fix, durable) = s.correct_time(T0 + 100, 150_000).expect("corrected");
        durable.wait().unwrap();
        assert_eq!(fix.high_water_ms, T0 + WEEK);
        assert_eq!(fix.corrected_at_ms, T0 + 100);
        assert_eq!(fix.seen_created_max_ms, T0 - 10);
        assert_eq!(s.now_ms(), T0 + 100);
    }
    // Reopened (even with the clock in 1970): time resumes from the lowered floor, and
    // the correction is remembered.
    let c2 = ManualClock::new(10_000);
    let s = open(kind, d.path(), &c2);
    assert_eq!(s.now_ms(), T0 + 100);
    let fix = s.time_correction().unwrap();
    assert_eq!(
        (
            fix.high_water_ms,
            fix.corrected_at_ms,
            fix.seen_created_max_ms
        ),
        (T0 + WEEK, T0 + 100, T0 - 10)
    );
    assert_eq!(s.inner.time.seen_created_max(), T0 - 10);
    // A store from before the newest-created_at key: bounded by its floor plus the
    // largest skew a configuration allows.
    s.inner
        .engine
        .apply(&[engine::BatchOp::Delete {
            tree: codec::T_META,
            key: codec::META_SEEN_CREATED_MAX.to_vec(),
        }])
        .unwrap();
    drop(s);
    let s = open(kind, d.path(), &c2);
    assert_eq!(
        s.inner.time.seen_created_max(),
        T0 + 100 + time::MAX_SKEW_MS
    );
}

fn newer_schema_is_refused_older_is_migrated(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    {
        let s = open(kind, d.path(), &c);
        s.enqueue(msg("gw", "a", 0, b"x")).wait().unwrap();
        s.enqueue(msg("gw", "b", 0, b"x")).wait().unwrap();
        // Pretend this is a v1 store: no counters.
        s.inner
            .engine
            .apply(&[
                engine::BatchOp::Delete {
                    tree: codec::T_COUNT,
                    key: codec::count_key("outbox", "gw"),
                },
                schema_op(1),
            ])
            .unwrap();
    }
    {
        let s = open(kind, d.path(), &c);
        assert_eq!(
            s.pending("outbox", "gw").unwrap(),
            2,
            "counters rebuilt by migration"
        );
        // Both messages are in the recipient's lane: the rebuilt counter says so, or the
        // sweeper would never look for them.
        assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 3_600_000));
        s.inner
            .engine
            .apply(&[schema_op(SCHEMA_VERSION + 1)])
            .unwrap();
    }
    let e = Store::open(d.path(), opts(kind), Arc::new(c.clone())).unwrap_err();
    assert!(matches!(e, StoreError::SchemaTooNew { .. }));
    assert!(e.to_string().contains("newer"));
}

/// A queued message with a canonical UUID id, in every old store these tests build.
pub(super) const LIVE_UUID: &str = "0190f5c2-7b1e-7a3c-9d4e-5f6a7b8c9d0e";

/// The `i`th extra rejected id of [`make_v2_store`]: text (`rej-<i>`) for even `i`, a
/// canonical UUID for odd `i`, so migrations meet both kinds of id.
pub(super) fn v2_id(i: usize) -> String {
    if i % 2 == 0 {
        format!("rej-{i}")
    } else {
        uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + i as u128)
            .hyphenated()
            .to_string()
    }
}

/// What a schema-3 (or older) binary would have written for the id tree as it is now:
/// every packed key back under its id's text.
fn unpack_ids(e: &dyn engine::Engine) -> Vec<engine::BatchOp> {
    let mut ops = Vec::new();
    e.scan(codec::T_BYID, &[codec::ID_KEY_UUID], None, &mut |k, v| {
        ops.push(engine::BatchOp::Delete {
            tree: codec::T_BYID,
            key: k.to_vec(),
        });
        ops.push(engine::BatchOp::Put {
            tree: codec::T_BYID,
            key: codec::id_of_key(k).unwrap().into_bytes(),
            value: v.to_vec(),
        });
        true
    })
    .unwrap();
    ops
}

/// Builds a closed schema-3 store in `dir`: "done" acked, "live" and [`LIVE_UUID`]
/// queued, and `extra` rejected ids [`v2_id`], every id-tree key as text.
pub(super) fn make_v3_store(kind: EngineKind, dir: &Path, c: &ManualClock, extra: usize) {
    let s = old_store_messages(kind, dir, c);
    let e = &*s.inner.engine;
    let mut batch = unpack_ids(e);
    batch.push(schema_op(3));
    let mut tomb = vec![TOMBSTONE];
    tomb.extend(rejected_status().encode());
    batch.extend(rejected_ids(extra, codec::T_BYID, &tomb));
    e.apply(&batch).unwrap();
}

/// What every old store these tests build starts from: "done" acked, "live" and
/// [`LIVE_UUID`] queued.
fn old_store_messages(kind: EngineKind, dir: &Path, c: &ManualClock) -> Store {
    let s = open(kind, dir, c);
    s.enqueue(msg("gw", "done", 0, b"x")).wait().unwrap();
    s.enqueue(msg("gw", "live", 0, b"x")).wait().unwrap();
    s.enqueue(msg("gw", LIVE_UUID, 0, b"x")).wait().unwrap();
    s.ack("outbox", "gw", vec!["done".into()], T0)
        .wait()
        .unwrap();
    s
}

/// The writes that record `extra` rejected ids [`v2_id`] the way an old schema did:
/// `status` under the id's text in `tree`, and its expiry entry (pruned at T0 + 1 s).
fn rejected_ids(extra: usize, tree: engine::Tree, status: &[u8]) -> Vec<engine::BatchOp> {
    let mut ops = Vec::with_capacity(2 * extra);
    for i in 0..extra {
        let id = v2_id(i).into_bytes();
        ops.push(engine::BatchOp::Put {
            tree: codec::T_STATUS_EXP,
            key: codec::time_key(T0 + 1_000, &id),
            value: Vec::new(),
        });
        ops.push(engine::BatchOp::Put {
            tree,
            key: id,
            value: status.to_vec(),
        });
    }
    ops
}

/// The tombstone of the old stores' extra ids: rejected, pruned at T0 + 1 s.
fn rejected_status() -> StatusRecord {
    StatusRecord {
        state: MessageState::Rejected,
        queue: "outbox".into(),
        peer: "gw".into(),
        attempts: 0,
        next_attempt_at_ms: 0,
        reason: "bad".into(),
        keep_until_ms: T0 + 1_000,
        dead_seq: 0,
    }
}

/// Builds a closed schema-2 store in `dir`: message "done" acked (its tombstone in the
/// old status tree), "live" and [`LIVE_UUID`] queued, and `extra` rejected ids
/// [`v2_id`] whose tombstones v2 kept there too (pruned at T0 + 1 s). Id-tree keys are
/// text, as before schema 4.
pub(super) fn make_v2_store(kind: EngineKind, dir: &Path, c: &ManualClock, extra: usize) {
    let s = old_store_messages(kind, dir, c);
    // Turn the store back into schema 2: the tombstone goes to the status tree, and
    // plenty more tombstones (rejected ids) are added the way v2 wrote them.
    let e = &s.inner.engine;
    let tomb = e.get(codec::T_BYID, b"done").unwrap().unwrap();
    assert_eq!(tomb[0], TOMBSTONE);
    let mut batch = unpack_ids(&**e);
    batch.extend([
        engine::BatchOp::Delete {
            tree: codec::T_BYID,
            key: b"done".to_vec(),
        },
        engine::BatchOp::Put {
            tree: codec::T_STATUS,
            key: b"done".to_vec(),
            value: tomb[1..].to_vec(),
        },
        schema_op(2),
    ]);
    batch.extend(rejected_ids(
        extra,
        codec::T_STATUS,
        &rejected_status().encode(),
    ));
    e.apply(&batch).unwrap();
}

/// Every id-tree key is what [`codec::id_key`] gives its id: no canonical UUID is left
/// under its text.
pub(super) fn assert_ids_packed(s: &Store) {
    s.inner
        .engine
        .scan(codec::T_BYID, &[], None, &mut |k, _| {
            let id = codec::id_of_key(k).expect("an id-tree key");
            assert_eq!(codec::id_key(&id), k, "{id} is not under its packed key");
            true
        })
        .unwrap();
}

/// A schema-2 store kept tombstones in their own tree and every id as text: opening it
/// moves them into the id tree and packs the UUID ids (more than one chunk's worth of
/// each here), and everything that reads a status or an id still sees them.
fn v2_tombstones_move_into_the_id_tree(kind: EngineKind) {
    const EXTRA: usize = 10_000;
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    make_v2_store(kind, d.path(), &c, EXTRA);
    let s = open(kind, d.path(), &c);
    assert_migrated(&s, EXTRA);
    assert_eq!(
        tree_len(&s, codec::T_STATUS),
        0,
        "the old tombstone tree is empty"
    );
    // A moved tombstone still makes its id a duplicate, and is pruned on time.
    for i in [7, 8] {
        assert_eq!(
            s.enqueue(msg("gw", &v2_id(i), 0, b"x")).wait().unwrap(),
            EnqueueOutcome::Duplicate
        );
    }
    s.sweep_expired(T0 + 1_000).wait().unwrap();
    assert!(s.status(&v2_id(7)).unwrap().is_none());
    assert!(s.status(&v2_id(8)).unwrap().is_none());
    assert_eq!(
        s.status("done").unwrap().unwrap().state,
        MessageState::Delivered
    );
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["live", LIVE_UUID]
    );
    // The UUID message acks by its id like any other.
    s.ack("outbox", "gw", vec![LIVE_UUID.into()], T0)
        .wait()
        .unwrap();
    assert_eq!(
        s.status(LIVE_UUID).unwrap().unwrap().state,
        MessageState::Delivered
    );
    assert_ids_packed(&s);
}

/// A schema-3 store keeps every id as text: opening it packs the UUID ids (two chunks'
/// worth) and leaves the others, with every status readable and the queue intact.
fn v3_uuid_ids_are_packed_on_open(kind: EngineKind) {
    const EXTRA: usize = 10_000;
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    make_v3_store(kind, d.path(), &c, EXTRA);
    let s = open(kind, d.path(), &c);
    assert_migrated(&s, EXTRA);
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["live", LIVE_UUID]
    );
    assert_eq!(
        s.enqueue(msg("gw", LIVE_UUID, 0, b"x")).wait().unwrap(),
        EnqueueOutcome::Duplicate
    );
    assert!(s.doctor().unwrap().healthy());
    drop(s);
    // Opening again finds nothing left to pack.
    let s = open(kind, d.path(), &c);
    assert_migrated(&s, EXTRA);
}

/// What every migrated old store built here looks like: current schema, each id once
/// under its packed key, every status where it was.
pub(super) fn assert_migrated(s: &Store, extra: usize) {
    let e = &s.inner.engine;
    assert_eq!(
        e.get(codec::T_META, codec::META_SCHEMA).unwrap(),
        Some(codec::u64_val(SCHEMA_VERSION))
    );
    assert_eq!(tree_len(s, codec::T_BYID), extra + 3, "id tree entries");
    assert_ids_packed(s);
    let state = |id: &str| s.status(id).unwrap().map(|st| st.state);
    assert_eq!(state("done"), Some(MessageState::Delivered));
    assert_eq!(state("live"), Some(MessageState::Queued));
    assert_eq!(state(LIVE_UUID), Some(MessageState::Queued));
    for i in [0, 1, extra / 2, extra / 2 + 1, extra - 2, extra - 1] {
        let st = s.status(&v2_id(i)).unwrap().unwrap();
        assert_eq!(
            (st.state, st.reason.as_deref()),
            (MessageState::Rejected, Some("bad")),
            "{i}"
        );
    }
    assert_eq!(s.pending("outbox", "gw").unwrap(), 2);
}

pub(super) fn tree_len(s: &Store, tree: engine::Tree) -> usize {
    let mut n = 0;
    s.inner
        .engine
        .scan(tree, &[], None, &mut |_, _| {
            n += 1;
            true
        })
        .unwrap();
    n
}

fn expiry_index_len(s: &Store) -> usize {
    tree_len(s, codec::T_EXP)
}

fn expiring(peer: &str, id: &str, prio: u8, expires_at_ms: u64) -> NewMessage {
    let mut m = msg(peer, id, prio, b"x");
    m.expires_at_ms = expires_at_ms;
    m
}

/// Messages that arrive in expiry order (give or take the slack) skip the expiry index,
/// and the sweeper still expires every one of them on time: past an unexpired one
/// inside the slack, past a requeued dead letter in the middle, after a reopen; and
/// out-of-order arrivals are indexed as strays without ending the lane.
fn lane_messages_expire_without_an_index_entry(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let mut s = open(kind, d.path(), &c);
    let slack = LANE_SLACK_MS;
    // a2 expires 1 s before a1 but inside the slack: still in the lane. (Only a3 is
    // failed below, and dies at its first failure.)
    for (id, at) in [
        ("a0", 4_000),
        ("a1", 10_000),
        ("a2", 9_000),
        ("a3", 20_000),
        ("a4", 30_000),
        ("a5", 40_000),
    ] {
        let mut m = expiring("gw", id, 0, T0 + at);
        m.max_attempts = Some(1);
        s.enqueue(m).wait().unwrap();
    }
    // Another priority is not the lane's: indexed.
    s.enqueue(expiring("gw", "p9", 9, T0 + 5_000))
        .wait()
        .unwrap();
    assert_eq!(expiry_index_len(&s), 1);
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 4_000));

    // The lane is due (a0): this look expires a0, stops at a1, and must not put the
    // lane off past a2, which expires a second before a1.
    assert_eq!(swept_ids(&s, T0 + 5_000), vec!["a0", "p9"]);
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 9_000));
    // a2 has expired, a1 (before it) has not: the sweeper reads past a1.
    assert_eq!(swept_ids(&s, T0 + 9_500), vec!["a2"]);
    assert_eq!(
        s.status("a2").unwrap().unwrap().state,
        MessageState::Expired
    );
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 10_000));

    // a3 dies and is requeued into its old place, in the middle of the lane: indexed.
    let dead = s
        .record_failure("outbox", "gw", vec!["a3".into()], T0 + 9_500, 0.0)
        .wait()
        .unwrap();
    assert_eq!(dead, vec!["a3".to_string()]);
    s.requeue("a3").wait().unwrap();
    assert_eq!(expiry_index_len(&s), 1);

    // Out of order by more than the slack: indexed, a stray; the lane goes on.
    s.enqueue(expiring("gw", "late", 0, T0 + 40_000 - slack - 1))
        .wait()
        .unwrap();
    s.enqueue(expiring("gw", "after", 0, T0 + 50_000))
        .wait()
        .unwrap();
    assert_eq!(expiry_index_len(&s), 2, "a3 (requeued) and late");

    drop(s);
    s = open(kind, d.path(), &c);
    assert_eq!(swept_ids(&s, T0 + 30_000), vec!["a1", "a3", "a4"]);
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 40_000 - slack - 1));
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0 + 30_000).unwrap()),
        vec!["a5", "late", "after"]
    );
    let swept = s.sweep_expired(T0 + 40_000).wait().unwrap();
    assert_eq!(swept.len(), 2, "a5 (lane) and late (indexed)");
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 50_000));

    // Empty again: the next arrivals start a new lane; the old one left no due entry.
    assert_eq!(tree_len(&s, codec::T_LANE_DUE), 1);
    s.ack("outbox", "gw", vec!["after".into()], T0 + 40_000)
        .wait()
        .unwrap();
    assert_eq!(expiry_index_len(&s), 0);
    assert_eq!(
        tree_len(&s, codec::T_LANE_DUE),
        0,
        "after was the last member"
    );
    s.enqueue(expiring("gw", "n1", 3, T0 + 60_000))
        .wait()
        .unwrap();
    s.enqueue(expiring("gw", "n2", 3, T0 + 61_000))
        .wait()
        .unwrap();
    assert_eq!(expiry_index_len(&s), 0);
    assert_eq!(tree_len(&s, codec::T_LANE_DUE), 1, "one due entry per lane");
    assert_eq!(s.sweep_expired(T0 + 61_000).wait().unwrap().len(), 2);
    assert_eq!(s.pending("outbox", "gw").unwrap(), 0);
    assert!(s.doctor().unwrap().healthy());
}

fn lane_of(s: &Store, peer: &str) -> Lane {
    let v = s
        .inner
        .engine
        .get(codec::T_COUNT, &codec::count_key("outbox", peer))
        .unwrap()
        .unwrap();
    Counter::decode(&v).unwrap().lane
}

/// Out-of-order arrivals are strays the lane tolerates up to its budget; one more closes
/// it, and strays are counted off as they leave.
fn a_lane_closes_past_its_stray_budget(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let mut s = open(kind, d.path(), &c);
    s.enqueue(expiring("gw", "m0", 0, T0 + 100_000))
        .wait()
        .unwrap();
    let strays = (0..LANE_STRAYS_MAX)
        .map(|i| WriteOp::Enqueue(expiring("gw", &format!("s{i}"), 0, T0 + 50_000)))
        .collect();
    s.write(strays).wait().unwrap();
    s.enqueue(expiring("gw", "m1", 0, T0 + 100_500))
        .wait()
        .unwrap();
    let lane = lane_of(&s, "gw");
    assert_eq!((lane.members, lane.strays), (2, LANE_STRAYS_MAX));
    assert_eq!(lane.closed_at_seq, u64::MAX, "still open");
    // One stray too many closes it; an in-order arrival after that is indexed too.
    s.enqueue(expiring("gw", "s-last", 0, T0 + 50_000))
        .wait()
        .unwrap();
    s.enqueue(expiring("gw", "m2", 0, T0 + 200_000))
        .wait()
        .unwrap();
    let lane = lane_of(&s, "gw");
    assert_eq!((lane.members, lane.strays), (2, LANE_STRAYS_MAX));
    assert_ne!(lane.closed_at_seq, u64::MAX);
    assert_eq!(expiry_index_len(&s), LANE_STRAYS_MAX as usize + 2);
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 50_000));

    // A counter rebuild (here: migration from v1) derives the same lane from the records:
    // members m0 and m1, the strays between them, closed after m1.
    s.inner.engine.apply(&[schema_op(1)]).unwrap();
    drop(s);
    s = open(kind, d.path(), &c);
    let lane = lane_of(&s, "gw");
    assert_eq!((lane.members, lane.strays), (2, LANE_STRAYS_MAX));
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 50_000));

    let swept = s.sweep_expired(T0 + 50_000).wait().unwrap();
    assert_eq!(swept.len(), LANE_STRAYS_MAX as usize + 1);
    let lane = lane_of(&s, "gw");
    assert_eq!((lane.members, lane.strays), (2, 0), "strays counted off");
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 100_000));
    assert_eq!(swept_ids(&s, T0 + 100_500), vec!["m0", "m1"]);
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 200_000));
}

fn backup_is_a_usable_store(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    let big = vec![3u8; 100_000];
    s.enqueue(msg("gw", "a", 0, b"x")).wait().unwrap();
    s.enqueue(msg("gw", "big", 0, &big)).wait().unwrap();
    let dest = b.path().join("snap");
    s.backup_to(&dest).unwrap();
    s.enqueue(msg("gw", "after", 0, b"x")).wait().unwrap();
    let restored = open(kind, &dest, &c);
    let got = restored.next_batch("outbox", "gw", 10, T0).unwrap();
    assert_eq!(ids(&got), vec!["a", "big"]);
    assert_eq!(got[1].body, big);
}

fn invalid_names_are_refused_without_panic(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let s = open(kind, d.path(), &c);
    let mut m = msg("g\0w", "a", 0, b"x");
    assert!(matches!(
        s.enqueue(m.clone()).wait(),
        Err(StoreError::Invalid(_))
    ));
    m.peer = String::new();
    assert!(matches!(s.enqueue(m).wait(), Err(StoreError::Invalid(_))));
    assert!(matches!(
        s.enqueue(msg("gw", "", 0, b"x")).wait(),
        Err(StoreError::Invalid(_))
    ));
    // A failing request does not fail the others of its group.
    s.enqueue(msg("gw", "ok", 0, b"x")).wait().unwrap();
}
