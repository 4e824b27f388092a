use super::*;
use crate::envelope::{IdentityDocument, Keys, Rights};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// Two documents (two keys) for each of five ids, made once.
fn docs() -> &'static Vec<[IdentityDocument; 2]> {
    static DOCS: std::sync::OnceLock<Vec<[IdentityDocument; 2]>> = std::sync::OnceLock::new();
    DOCS.get_or_init(|| {
        (0..5)
            .map(|i| {
                let id = format!("node:{i}");
                let d = || {
                    IdentityDocument::new(&id, "node", &Keys::generate(), "2026-01-01T00:00:00Z")
                };
                [d(), d()]
            })
            .collect()
    })
}

#[test]
fn an_entry_round_trips_and_junk_is_no_entry() {
    for e in [
        Entry::Put("node:a".into()),
        Entry::Removed("node:b c".into()),
    ] {
        assert_eq!(Entry::from_bytes(&e.to_bytes()), Some(e));
    }
    for junk in [&b""[..], b"+", b"*node:a", b"-\xff"] {
        assert_eq!(Entry::from_bytes(junk), None);
    }
}

#[test]
fn the_last_entry_of_an_id_wins_and_each_id_is_read_once() {
    let last = last_per_id([
        Entry::Put("a".into()),
        Entry::Removed("a".into()),
        Entry::Removed("b".into()),
        Entry::Put("b".into()),
        Entry::Put("b".into()),
    ]);
    assert_eq!(
        last.into_iter().collect::<Vec<_>>(),
        [("a".into(), false), ("b".into(), true)]
    );
}

#[test]
fn an_update_replaces_or_patches_the_held_copy() {
    let d = docs();
    let mut held = TrustStore::new();
    held.add(d[0][0].clone(), Rights::default()).unwrap();
    held.add(d[1][0].clone(), Rights::default()).unwrap();
    let mut want = TrustStore::new();
    want.add(d[1][1].clone(), Rights::default()).unwrap();
    want.add(d[2][0].clone(), Rights::default()).unwrap();
    let changes = vec![
        Change::remove("node:0"),
        Change::of(&want, "node:1"),
        Change::put(want.get("node:2").unwrap().clone()),
    ];
    let mut patched = held.clone();
    Update::Changed(changes).apply_to(&mut patched);
    assert_eq!(patched, want);
    Update::Full(TrustStore::new()).apply_to(&mut patched);
    assert!(patched.is_empty());
}

#[test]
fn the_log_stays_between_its_bounds_and_without_gaps() {
    let mut log = BTreeSet::new();
    for next in 0..20_000u64 {
        log.insert(next);
        let oldest = *log.first().unwrap();
        let b = bound(oldest);
        if log.contains(&b.probe) {
            for n in b.cut {
                log.remove(&n);
            }
        }
        let len = log.len() as u64;
        assert!(len <= LOG_KEEP + LOG_CUT, "{len} entries after {next}");
        assert!(
            len >= (next + 1).min(LOG_KEEP),
            "{len} entries after {next}"
        );
        assert_eq!(*log.last().unwrap() - *log.first().unwrap() + 1, len);
    }
}

/// A write of the model: peer `id` put with document `key` and `send`, or removed.
#[derive(Debug, Clone)]
enum Op {
    Put { id: usize, key: usize, send: bool },
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..5usize, 0..2usize, any::<bool>()).prop_map(|(id, key, send)| Op::Put { id, key, send }),
        (0..5usize).prop_map(Op::Remove),
    ]
}

/// The store after each op (index 0: empty) and the log's entries, one per op.
fn run(ops: &[Op]) -> (Vec<TrustStore>, Vec<Entry>) {
    let mut states = vec![TrustStore::new()];
    let mut log = Vec::new();
    for o in ops {
        let mut t = states.last().unwrap().clone();
        match *o {
            Op::Put { id, key, send } => {
                let rights = Rights { send, issue: false };
                t.add(docs()[id][key].clone(), rights).unwrap();
                log.push(Entry::Put(format!("node:{id}")));
            }
            Op::Remove(id) => {
                t.remove(&format!("node:{id}"));
                log.push(Entry::Removed(format!("node:{id}")));
            }
        }
        states.push(t);
    }
    (states, log)
}

/// What a reader applies for `entries`, reading each put row in `rows` (the store as it
/// is when the rows are read, which may be after the last entry read).
fn read(entries: &[Entry], rows: &TrustStore) -> Vec<Change> {
    last_per_id(entries.iter().cloned())
        .into_iter()
        .map(|(id, put)| match put {
            true => Change::of(rows, &id),
            false => Change::remove(&id),
        })
        .collect()
}

proptest! {
    /// A copy at version `held`, patched with the entries after it, is the store; and
    /// when a writer committed between the log's read and the rows' read (the rows are
    /// newer than the entries), the next read catches up all the same.
    #[test]
    fn a_patched_copy_is_the_store(
        ops in proptest::collection::vec(op(), 0..40),
        cuts in (0usize..41, 0usize..41, 0usize..41),
    ) {
        let (states, log) = run(&ops);
        let mut at = [cuts.0, cuts.1, cuts.2].map(|c| c.min(ops.len()));
        at.sort_unstable();
        let [held, entries_to, rows_at] = at;
        let mut copy = states[held].clone();
        apply(&mut copy, read(&log[held..entries_to], &states[rows_at]));
        // The next read: the entries after the last one read, rows as they are now.
        let last = ops.len();
        apply(&mut copy, read(&log[entries_to..], &states[last]));
        prop_assert_eq!(&copy, &states[last]);
    }
}
