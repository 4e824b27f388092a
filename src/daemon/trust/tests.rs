use super::legacy::KV_TRUST;
use super::*;
use crate::envelope::Keys;
use std::sync::{Arc, Mutex};

fn doc(id: &str) -> IdentityDocument {
    IdentityDocument::new(id, "node", &Keys::generate(), "2026-01-01T00:00:00Z")
}

const RIGHTS: Rights = Rights {
    send: true,
    issue: false,
};

/// A source the test writes, as `trust add` in another process would, counting
/// how often the cache parsed a copy.
struct Source {
    peers: Mutex<(u64, TrustStore)>,
    copies: Mutex<u64>,
}

fn cache(src: &Arc<Source>, now_ms: u64) -> TrustCache {
    let s = src.clone();
    let load: Loader = Box::new(move |known| {
        let g = s.peers.lock().unwrap();
        if Some(g.0) == known {
            return Ok(None);
        }
        *s.copies.lock().unwrap() += 1;
        Ok(Some((g.0, Update::Full(g.1.clone()))))
    });
    TrustCache::with_loader(load, &doc("gateway:me"), now_ms).unwrap()
}

fn write(src: &Source, edit: impl FnOnce(&mut TrustStore)) {
    let mut g = src.peers.lock().unwrap();
    edit(&mut g.1);
    g.0 += 1;
}

fn source() -> Arc<Source> {
    Arc::new(Source {
        peers: Mutex::new((1, TrustStore::new())),
        copies: Mutex::new(0),
    })
}

#[test]
fn nodes_enrolled_one_after_another_are_each_found_on_their_first_miss() {
    let src = source();
    let c = cache(&src, 10_000);
    // Before: a miss re-read at most once a second, so the second node, enrolled
    // 100 ms after the first one's miss, was refused until that second passed.
    for (i, at) in [10_000u64, 10_100, 10_200].into_iter().enumerate() {
        let id = format!("node:n{i}");
        write(&src, |t| {
            t.add(doc(&id), RIGHTS).unwrap();
        });
        assert!(c.get(at).get(&id).is_none(), "a fresh copy is not re-read");
        c.recheck(at);
        assert!(c.get(at).get(&id).is_some(), "{id} missing after its miss");
    }
}

#[test]
fn a_removed_peer_is_refused_once_the_copy_is_a_second_old() {
    let src = source();
    write(&src, |t| {
        t.add(doc("node:a"), RIGHTS).unwrap();
    });
    let c = cache(&src, 0);
    assert!(c.get(0).get("node:a").is_some());
    write(&src, |t| {
        t.remove("node:a");
    });
    // Known peers never miss: only the age of the copy brings the removal in.
    assert!(c.get(RECHECK_MS - 1).get("node:a").is_some());
    assert!(c.get(RECHECK_MS).get("node:a").is_none());
    // The role's own identity is always an issuer.
    assert!(c.get(RECHECK_MS).get("gateway:me").unwrap().rights.issue);
}

#[test]
fn an_unchanged_source_is_not_copied_again() {
    let src = source();
    let c = cache(&src, 0);
    for t in 1..50u64 {
        c.recheck(t * 10);
        c.get(t * RECHECK_MS);
    }
    assert_eq!(*src.copies.lock().unwrap(), 1, "only the first load copies");
}

#[test]
fn misses_during_a_check_share_its_answer() {
    // Callers that miss while a check is under way wait for it and do not each ask.
    let src = source();
    let c = Arc::new(cache(&src, 0));
    write(&src, |t| {
        t.add(doc("node:b"), RIGHTS).unwrap();
    });
    let held = c.checking.lock().unwrap();
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || {
                c.recheck(5);
                c.get(5).get("node:b").is_some()
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    // A check that begins now (after every waiter missed) answers them all.
    c.check(5);
    drop(held);
    for w in waiters {
        assert!(w.join().unwrap());
    }
    assert_eq!(
        *src.copies.lock().unwrap(),
        2,
        "one initial load, one check"
    );
}

fn store() -> (tempfile::TempDir, crate::store::Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(
        dir.path(),
        crate::store::StoreOptions::default(),
        crate::clock::system(),
    )
    .unwrap();
    (dir, store)
}

fn peers(n: usize) -> TrustStore {
    let mut t = TrustStore::new();
    for i in 0..n {
        t.add(doc(&format!("node:d{i:04}")), RIGHTS).unwrap();
    }
    t
}

/// `(namespace, key)` → value of every trust row.
fn trust_rows(store: &Store) -> std::collections::BTreeMap<(String, String), Vec<u8>> {
    use crate::store::names::{KV_TRUST_LOG, KV_TRUST_PEERS};
    let mut out = std::collections::BTreeMap::new();
    for ns in [KV_TRUST, KV_TRUST_PEERS, KV_TRUST_LOG] {
        for (k, v) in store.kv_list(ns).unwrap() {
            out.insert((ns.to_string(), k), v);
        }
    }
    out
}

/// Rows that differ between two reads of [`trust_rows`] (written, changed or deleted).
fn rows_changed(
    before: &std::collections::BTreeMap<(String, String), Vec<u8>>,
    after: &std::collections::BTreeMap<(String, String), Vec<u8>>,
) -> Vec<(String, String)> {
    let keys: std::collections::BTreeSet<_> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

/// With 1,000 peers trusted, one peer put (an enrollment) writes its row and one log
/// entry, and a holder of the version before it reads that one peer.
#[test]
fn one_peer_written_is_one_row_and_one_entry_and_read_alone() {
    let (_dir, store) = store();
    let t = peers(1_000);
    save(&store, &t).unwrap();
    let (v, update) = read_since(&store, None).unwrap().unwrap();
    assert_eq!(update, Update::Full(t.clone()));
    assert_eq!(read_since(&store, Some(v)).unwrap(), None, "unchanged");

    let before = trust_rows(&store);
    let new = doc("node:d0500a");
    let mut one = TrustStore::new();
    one.add(new.clone(), RIGHTS).unwrap();
    let mut batch = crate::store::Batch::new();
    stage(&store, &mut batch, &[Change::of(&one, "node:d0500a")]).unwrap();
    store.commit(batch).wait().unwrap();
    let changed = rows_changed(&before, &trust_rows(&store));
    assert_eq!(changed.len(), 2, "{changed:?}");

    let (v2, update) = read_since(&store, Some(v)).unwrap().unwrap();
    assert_eq!(v2, v + 1);
    assert_eq!(
        update,
        Update::Changed(vec![Change::of(&one, "node:d0500a")])
    );
    assert_eq!(read_since(&store, Some(v2)).unwrap(), None);
    let mut all = t;
    all.add(new, RIGHTS).unwrap();
    assert_eq!(load(&store).unwrap(), all);
}

/// A cache over the store follows puts and removals by the changes alone, its own
/// entry kept; a holder behind the log's oldest entry, or at a version the log never
/// reached (another store), reads every peer.
#[test]
fn the_cache_follows_the_rows_and_a_holder_past_the_log_reads_everything() {
    let (_dir, store) = store();
    save(&store, &peers(3)).unwrap();
    let me = doc("gateway:me");
    let c = TrustCache::load(&store, &me, 0).unwrap();
    assert_eq!(c.get(0).len(), 4);
    let mut t = load(&store).unwrap();
    t.remove("node:d0001");
    t.add(doc("node:e"), RIGHTS).unwrap();
    save(&store, &t).unwrap();
    c.recheck(1);
    let held = c.get(1);
    assert!(held.get("node:d0001").is_none() && held.get("node:e").is_some());
    assert!(held.get("gateway:me").unwrap().rights.issue);
    let (v, _) = read_since(&store, None).unwrap().unwrap();
    assert!(
        matches!(read_since(&store, Some(v + 5)).unwrap(), Some((w, Update::Full(_))) if w == v)
    );

    // Writes past the log's bound: the oldest entries are cut, a holder of one of them
    // reads every peer, a newer holder only what changed.
    let first = v;
    for i in 0..(changes::LOG_KEEP + changes::LOG_CUT + 1) {
        let mut one = TrustStore::new();
        one.add(
            doc("node:churn"),
            Rights {
                send: i % 2 == 0,
                issue: false,
            },
        )
        .unwrap();
        let mut batch = crate::store::Batch::new();
        stage(&store, &mut batch, &[Change::of(&one, "node:churn")]).unwrap();
        store.commit(batch).wait().unwrap();
    }
    let log = store.kv_list(crate::store::names::KV_TRUST_LOG).unwrap();
    assert!(
        log.len() as u64 <= changes::LOG_KEEP + changes::LOG_CUT,
        "{}",
        log.len()
    );
    let full = read_since(&store, Some(first)).unwrap().unwrap();
    assert!(matches!(full.1, Update::Full(ref all) if all.len() == 4));
    let recent = read_since(&store, Some(full.0 - 2)).unwrap().unwrap();
    assert!(matches!(recent.1, Update::Changed(ref c) if c.len() == 1));
    c.recheck(2);
    assert_eq!(
        *c.get(2),
        with_me(load(&store).unwrap(), &me_peer(&me).unwrap())
    );
}

/// A store an older build wrote (the record cut into rows with a stamp, or one value)
/// is read as it is, unchanged checks read its stamp, and the first write of a peer
/// converts it: nothing lost, the old rows gone, every holder reads the new rows.
#[test]
fn a_store_in_the_old_format_is_read_and_converted_by_the_first_write() {
    for single in [false, true] {
        let (_dir, store) = store();
        let t = peers(30);
        if single {
            store
                .kv_put(KV_TRUST, legacy::KEY, t.to_bytes())
                .wait()
                .unwrap();
        } else {
            legacy::write_old(&store, &t);
            assert!(store.kv_list(KV_TRUST).unwrap().len() > 10);
        }
        assert_eq!(load(&store).unwrap(), t);
        let (v, update) = read_since(&store, None).unwrap().unwrap();
        assert!(v >= rows::LEGACY);
        assert_eq!(update, Update::Full(t.clone()));
        assert_eq!(read_since(&store, Some(v)).unwrap(), None, "unchanged");
        assert_eq!(
            peer(&store, "node:d0007").unwrap(),
            t.get("node:d0007").cloned()
        );
        let me = doc("gateway:me");
        let c = TrustCache::load(&store, &me, 0).unwrap();

        // The first write: one peer removed, and the rest converted in its commit.
        let mut batch = crate::store::Batch::new();
        stage(&store, &mut batch, &[Change::remove("node:d0003")]).unwrap();
        store.commit(batch).wait().unwrap();
        assert!(store.kv_list(KV_TRUST).unwrap().is_empty(), "old rows gone");
        let mut want = t.clone();
        want.remove("node:d0003");
        assert_eq!(load(&store).unwrap(), want);
        let (_, update) = read_since(&store, Some(v)).unwrap().unwrap();
        assert_eq!(update, Update::Full(want.clone()));
        c.recheck(1);
        assert_eq!(*c.get(1), with_me(want, &me_peer(&me).unwrap()));
    }
}

/// Rows that do not match the old record's stamp (a write between the stamp's read
/// and the scan) are never taken for the record.
#[test]
fn old_rows_that_do_not_match_their_stamp_are_not_taken() {
    let (_dir, store) = store();
    legacy::write_old(&store, &peers(1));
    store
        .kv_put(KV_TRUST, &legacy::chunk_key(0), b"{\"torn\":".to_vec())
        .wait()
        .unwrap();
    assert!(read_since(&store, None).is_err());
}

/// A node's store is small and mostly idle: reading it and asking "changed?" writes
/// nothing, and a save of the same peers commits nothing.
#[test]
fn reading_and_saving_the_same_peers_write_nothing() {
    let (_dir, store) = store();
    let t = peers(2);
    save(&store, &t).unwrap();
    let before = trust_rows(&store);
    let me = doc("node:me");
    let c = TrustCache::load(&store, &me, 0).unwrap();
    for at in 1..5 {
        c.get(at * RECHECK_MS);
        c.recheck(at * RECHECK_MS);
    }
    save(&store, &t).unwrap();
    assert_eq!(effective(&store, &me).unwrap().len(), 3);
    assert!(rows_changed(&before, &trust_rows(&store)).is_empty());
}
