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
        if g.0 == known {
            return Ok(None);
        }
        *s.copies.lock().unwrap() += 1;
        Ok(Some((g.0, g.1.clone())))
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

/// With 10,000 nodes the record is megabytes, and every running role checks it
/// every second: a check of an unchanged record reads its stamp only, and no row of
/// the record is a value large enough to spill out of its page.
#[test]
fn a_check_of_an_unchanged_record_reads_only_its_stamp() {
    let (_dir, store) = store();
    let mut t = TrustStore::new();
    for i in 0..20 {
        t.add(doc(&format!("node:d{i}")), RIGHTS).unwrap();
    }
    save(&store, &t).unwrap();
    let rows = store.kv_list(KV_TRUST).unwrap();
    assert!(rows.len() > 10, "{} rows", rows.len());
    assert!(rows.iter().all(|(_, v)| v.len() <= CHUNK_BYTES));
    let read = Mutex::new(Vec::new());
    let get = |key: &str| {
        read.lock().unwrap().push(key.to_string());
        Ok(store.kv_get(KV_TRUST, key)?)
    };
    let list = || {
        read.lock().unwrap().push("(all rows)".to_string());
        Ok(store.kv_list(KV_TRUST)?)
    };
    let (fp, loaded) = load_since_with(&get, &list, 0).unwrap().unwrap();
    assert_eq!(loaded, t);
    read.lock().unwrap().clear();
    assert!(load_since_with(&get, &list, fp).unwrap().is_none());
    assert_eq!(*read.lock().unwrap(), [STAMP], "only the stamp was read");
    // A change is seen (its stamp differs) and read; a smaller record leaves rows
    // past its count, which are not read.
    t.remove("node:d3");
    t.remove("node:d4");
    save(&store, &t).unwrap();
    let (fp2, loaded) = load_since(&store, fp).unwrap().unwrap();
    assert_ne!(fp2, fp);
    assert_eq!(loaded, t);
    assert_eq!(load(&store).unwrap(), t);
}

/// Rows that do not match the stamp (a write between the stamp's read and the
/// scan) are never taken for the record.
#[test]
fn rows_that_do_not_match_the_stamp_are_not_taken() {
    let (_dir, store) = store();
    let mut t = TrustStore::new();
    t.add(doc("node:g"), RIGHTS).unwrap();
    save(&store, &t).unwrap();
    store
        .kv_put(KV_TRUST, &chunk_key(0), b"{\"torn\":".to_vec())
        .wait()
        .unwrap();
    assert!(load_since(&store, 0).is_err());
}

/// A record an older build wrote has no stamp: it is fingerprinted whole, to the
/// value the stamp of the same record has, so the first write that adds the stamp
/// does not read as a change, and a change is still seen.
#[test]
fn a_record_without_a_stamp_is_fingerprinted_whole() {
    let (_dir, store) = store();
    let mut t = TrustStore::new();
    t.add(doc("node:f"), RIGHTS).unwrap();
    store.kv_put(KV_TRUST, KEY, t.to_bytes()).wait().unwrap();
    let (fp, loaded) = load_since(&store, 0).unwrap().unwrap();
    assert_eq!(loaded, t);
    assert!(load_since(&store, fp).unwrap().is_none());
    save(&store, &t).unwrap();
    assert!(
        load_since(&store, fp).unwrap().is_none(),
        "same record, same stamp"
    );
    assert!(
        store.kv_get(KV_TRUST, KEY).unwrap().is_none(),
        "rewritten as rows"
    );
    t.remove("node:f");
    store.kv_put(KV_TRUST, KEY, t.to_bytes()).wait().unwrap();
    store.kv_delete(KV_TRUST, STAMP).wait().unwrap();
    assert_eq!(load_since(&store, fp).unwrap().unwrap().1, t);
}

#[test]
fn the_store_record_is_parsed_only_when_its_bytes_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(
        dir.path(),
        crate::store::StoreOptions::default(),
        crate::clock::system(),
    )
    .unwrap();
    let mut t = TrustStore::new();
    t.add(doc("node:c"), RIGHTS).unwrap();
    save(&store, &t).unwrap();
    let (fp, loaded) = load_since(&store, 0).unwrap().unwrap();
    assert_eq!(loaded, t);
    assert!(load_since(&store, fp).unwrap().is_none());
    t.remove("node:c");
    save(&store, &t).unwrap();
    assert_eq!(load_since(&store, fp).unwrap().unwrap().1, t);
}
