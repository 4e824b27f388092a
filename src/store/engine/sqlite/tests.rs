//! The SQLite engine's own tests: layouts and migrations, WAL sync, the checkpointer,
//! the table map. (The behaviour every engine shares is in `store::tests::conformance`.)

use std::path::Path;
use std::sync::atomic::Ordering;

use rusqlite::{params, Connection};

use super::layout::{create_tables, LAYOUT};
use super::tables::SHARED_MARK;
use super::wal::{sync_wal, WAL_RECHECK_EVERY};
use super::{SqliteEngine, DB_FILE, PAGE_SIZE};
use crate::store::engine::{BatchOp, Engine, Reader};
use crate::store::trees::{parse_u64, META_SCHEMA, T_AUDIT, T_BYID, T_META, T_MSG};

#[test]
fn a_format_1_store_is_migrated_to_one_table_per_tree() {
    let d = tempfile::tempdir().unwrap();
    {
        // The format-1 layout, as the previous release created it.
        let c = Connection::open(d.path().join(DB_FILE)).unwrap();
        c.pragma_update(None, "page_size", 1024).unwrap();
        c.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .unwrap();
        c.execute_batch(
            "CREATE TABLE kv (tree INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL,
             PRIMARY KEY (tree, key)) WITHOUT ROWID;",
        )
        .unwrap();
        for (t, k, v) in [
            (T_META, &b"next_seq"[..], &b"7"[..]),
            (T_MSG, b"q\0p\0\xff\0\0\0\0\0\0\0\x02", b"second"),
            (T_MSG, b"q\0p\0\xff\0\0\0\0\0\0\0\x01", b"first"),
            (T_AUDIT, b"\0\0\0\0\0\0\0\0", b"entry"),
        ] {
            c.execute(
                "INSERT INTO kv (tree, key, value) VALUES (?1, ?2, ?3)",
                params![t, k, v],
            )
            .unwrap();
        }
    }
    let e = SqliteEngine::open(d.path()).unwrap();
    assert_eq!(
        e.get(T_META, b"next_seq").unwrap().as_deref(),
        Some(&b"7"[..])
    );
    let mut seen = Vec::new();
    e.scan(T_MSG, b"q\0p\0", None, &mut |_, v| {
        seen.push(v.to_vec());
        true
    })
    .unwrap();
    assert_eq!(seen, vec![b"first".to_vec(), b"second".to_vec()]);
    assert_eq!(
        e.get(T_AUDIT, &[0; 8]).unwrap().as_deref(),
        Some(&b"entry"[..])
    );
    let c = e.writer.lock().unwrap();
    let kv_rows: i64 = c
        .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        kv_rows, 1,
        "only the fence row is left in the layout-1 table"
    );
    drop(c);
    // Reopening a migrated store is a no-op.
    drop(e);
    let e = SqliteEngine::open(d.path()).unwrap();
    assert_eq!(
        e.get(T_MSG, b"q\0p\0\xff\0\0\0\0\0\0\0\x01")
            .unwrap()
            .as_deref(),
        Some(&b"first"[..])
    );
}

#[test]
fn a_failed_sync_is_sticky_until_reopen() {
    let d = tempfile::tempdir().unwrap();
    let put = |v: &[u8]| {
        vec![BatchOp::Put {
            tree: T_MSG,
            key: b"k".to_vec(),
            value: v.to_vec(),
        }]
    };
    {
        let e = SqliteEngine::open(d.path()).unwrap();
        e.write_group(&mut |_| put(b"1")).unwrap();
        e.fail_next_sync.store(true, Ordering::Relaxed);
        e.commit_group(&mut |_| put(b"2")).unwrap();
        assert!(!e.sync_failed());
        assert!(e.sync().is_err());
        assert!(e.sync_failed());
        // Nothing can be promised on top of a failed fsync: later writes fail too.
        assert!(e.sync().is_err());
        assert!(e.commit_group(&mut |_| put(b"3")).is_err());
        assert!(e.apply(&put(b"4")).is_err());
        assert!(e.write_group(&mut |_| put(b"5")).is_err());
    }
    let e = SqliteEngine::open(d.path()).unwrap();
    e.write_group(&mut |_| put(b"6")).unwrap();
    assert_eq!(e.get(T_MSG, b"k").unwrap(), Some(b"6".to_vec()));
}

#[test]
fn the_wal_handle_follows_a_recreated_wal() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join(DB_FILE);
    let mut slot = None;
    {
        let c = Connection::open(&path).unwrap();
        c.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .unwrap();
        c.execute_batch("CREATE TABLE x(a); INSERT INTO x VALUES (1);")
            .unwrap();
        sync_wal(&path, &mut slot).unwrap();
    }
    // The last connection closed: SQLite checkpointed and deleted the WAL.
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    assert!(!Path::new(&wal).exists());
    let c = Connection::open(&path).unwrap();
    c.execute_batch("INSERT INTO x VALUES (2);").unwrap();
    use std::os::unix::fs::MetadataExt;
    let old = slot.as_ref().unwrap().file.metadata().unwrap();
    assert_eq!(old.nlink(), 0, "the old handle is on the deleted WAL");
    // Within the re-check period the stale handle is kept; at the next re-check it
    // is replaced by the live file.
    let live = std::fs::metadata(&wal).unwrap().ino();
    let mut replaced_after = None;
    for n in 1..=WAL_RECHECK_EVERY {
        sync_wal(&path, &mut slot).unwrap();
        let ino = slot.as_ref().unwrap().file.metadata().unwrap().ino();
        if ino == live {
            replaced_after = Some(n);
            break;
        }
    }
    assert_eq!(replaced_after, Some(WAL_RECHECK_EVERY));
}

#[test]
fn the_background_checkpointer_keeps_the_wal_bounded() {
    let d = tempfile::tempdir().unwrap();
    let e = SqliteEngine::open(d.path()).unwrap();
    // 3,000 commits of a 3 KiB record: ~24 MiB of WAL frames if nothing checkpoints.
    for i in 0u32..3000 {
        e.apply(&[BatchOp::Put {
            tree: T_MSG,
            key: i.to_be_bytes().to_vec(),
            value: vec![7; 3000],
        }])
        .unwrap();
        e.after_group(); // as the store's writer does after answering a group
    }
    let wal = std::fs::metadata(d.path().join(format!("{DB_FILE}-wal")))
        .unwrap()
        .len();
    assert!(wal < 10 * 1024 * 1024, "WAL grew to {wal} bytes");
    assert_eq!(
        e.get(T_MSG, &2999u32.to_be_bytes())
            .unwrap()
            .map(|v| v.len()),
        Some(3000)
    );
}

#[test]
fn a_layout_1_binary_would_see_a_newer_schema_and_refuse() {
    let d = tempfile::tempdir().unwrap();
    drop(SqliteEngine::open(d.path()).unwrap());
    // What outpost 0.1 reads on open: tree 1 (meta), key "schema_version", in `kv`.
    let c = Connection::open(d.path().join(DB_FILE)).unwrap();
    let v: Vec<u8> = c
        .query_row(
            "SELECT value FROM kv WHERE tree = 1 AND key = ?1",
            params![META_SCHEMA],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        parse_u64(&v).unwrap() > 2,
        "0.1 supports schema 2 and refuses newer"
    );
    // A lost user_version does not turn the fence into data.
    c.pragma_update(None, "user_version", 0).unwrap();
    drop(c);
    let e = SqliteEngine::open(d.path()).unwrap();
    assert_eq!(
        e.get(T_META, META_SCHEMA).unwrap(),
        None,
        "fence not migrated"
    );
    drop(e);
    let c = Connection::open(d.path().join(DB_FILE)).unwrap();
    // A layout from the future is refused by this binary, not misread.
    c.pragma_update(None, "user_version", 9).unwrap();
    drop(c);
    let e = SqliteEngine::open(d.path()).err().expect("refused");
    assert!(e.to_string().contains("newer"), "{e}");
}

#[test]
fn trees_sharing_a_table_stay_apart() {
    use crate::store::trees::T_COUNT;
    let d = tempfile::tempdir().unwrap();
    let e = SqliteEngine::open(d.path()).unwrap();
    let put = |tree, k: &[u8], v: &[u8]| BatchOp::Put {
        tree,
        key: k.to_vec(),
        value: v.to_vec(),
    };
    e.apply(&[
        put(T_META, b"next_seq", b"m1"),
        put(T_META, b"", b"m0"),
        put(T_COUNT, b"outbox\0gw", b"c1"),
        put(T_COUNT, b"\xff", b"c2"),
    ])
    .unwrap();
    let all = |tree| {
        let mut v = Vec::new();
        e.scan(tree, &[], None, &mut |k, val| {
            v.push((k.to_vec(), val.to_vec()));
            true
        })
        .unwrap();
        v
    };
    assert_eq!(
        all(T_META),
        vec![
            (b"".to_vec(), b"m0".to_vec()),
            (b"next_seq".to_vec(), b"m1".to_vec())
        ]
    );
    assert_eq!(
        all(T_COUNT),
        vec![
            (b"outbox\0gw".to_vec(), b"c1".to_vec()),
            (b"\xff".to_vec(), b"c2".to_vec())
        ]
    );
    assert_eq!(e.get(T_COUNT, b"next_seq").unwrap(), None);
    e.apply(&[BatchOp::Delete {
        tree: T_COUNT,
        key: b"\xff".to_vec(),
    }])
    .unwrap();
    assert_eq!(all(T_COUNT).len(), 1);
    assert_eq!(all(T_META).len(), 2);
    // The id tree, whose table they live in, sees none of them and cannot reach them.
    e.apply(&[put(T_BYID, b"id-1", b"i1"), put(T_BYID, b"\xfe\xff", b"i2")])
        .unwrap();
    assert_eq!(
        all(T_BYID),
        vec![
            (b"id-1".to_vec(), b"i1".to_vec()),
            (b"\xfe\xff".to_vec(), b"i2".to_vec())
        ]
    );
    let mut seen = 0;
    e.scan(T_BYID, b"", Some(b"\xff\xff"), &mut |_, _| {
        seen += 1;
        true
    })
    .unwrap();
    assert_eq!(seen, 2, "an end past the id keys stops at them");
    let meta_key = [&[SHARED_MARK, T_META][..], b"next_seq"].concat();
    assert_eq!(e.get(T_BYID, &meta_key).unwrap(), None);
    for op in [
        put(T_BYID, &meta_key, b"x"),
        BatchOp::Delete {
            tree: T_BYID,
            key: meta_key.clone(),
        },
    ] {
        assert!(e.apply(&[op]).is_err());
    }
    assert_eq!(e.get(T_META, b"next_seq").unwrap(), Some(b"m1".to_vec()));
}

/// A layout-2 store kept meta and counters in `t1`: opening it moves them next to the
/// ids (layout 3), once, and every row reads back as before.
#[test]
fn layout_2_meta_and_counters_move_into_the_id_table() {
    use crate::store::trees::T_COUNT;
    let d = tempfile::tempdir().unwrap();
    {
        let c = Connection::open(d.path().join(DB_FILE)).unwrap();
        c.pragma_update(None, "page_size", PAGE_SIZE).unwrap();
        c.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .unwrap();
        create_tables(&c).unwrap();
        c.execute_batch(
            "CREATE TABLE kv (tree INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL,
             PRIMARY KEY (tree, key)) WITHOUT ROWID;",
        )
        .unwrap();
        let row = |t: &str, k: &[u8], v: &[u8]| {
            c.execute(
                &format!("INSERT INTO {t} (k, v) VALUES (?1, ?2)"),
                params![k, v],
            )
            .unwrap();
        };
        row("t1", b"\x01next_seq", b"m1");
        row("t1", b"\x08outbox\0gw", b"c1");
        row("t3", b"id-1", b"i1");
        c.pragma_update(None, "user_version", 2).unwrap();
    }
    for _ in 0..2 {
        let e = SqliteEngine::open(d.path()).unwrap();
        assert_eq!(e.get(T_META, b"next_seq").unwrap(), Some(b"m1".to_vec()));
        assert_eq!(e.get(T_COUNT, b"outbox\0gw").unwrap(), Some(b"c1".to_vec()));
        assert_eq!(e.get(T_BYID, b"id-1").unwrap(), Some(b"i1".to_vec()));
        drop(e);
        let c = Connection::open(d.path().join(DB_FILE)).unwrap();
        let n = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(n("PRAGMA user_version"), LAYOUT);
        assert_eq!(n("SELECT count(*) FROM t1"), 0);
        assert_eq!(n("SELECT count(*) FROM t3"), 3);
    }
}

#[test]
fn a_rewritten_large_record_keeps_its_row() {
    let d = tempfile::tempdir().unwrap();
    let e = SqliteEngine::open(d.path()).unwrap();
    let put = |v: &[u8]| BatchOp::Put {
        tree: T_MSG,
        key: b"k".to_vec(),
        value: v.to_vec(),
    };
    e.apply(&[put(b"one")]).unwrap();
    e.apply(&[put(b"two")]).unwrap();
    let c = e.writer.lock().unwrap();
    let (n, rid): (i64, i64) = c
        .query_row("SELECT count(*), max(rid) FROM t2", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((n, rid), (1, 1));
    drop(c);
    assert_eq!(e.get(T_MSG, b"k").unwrap().as_deref(), Some(&b"two"[..]));
    assert!(e
        .apply(&[BatchOp::Put {
            tree: 40,
            key: vec![1],
            value: vec![]
        }])
        .is_err());
}

/// New stores have no pointer map (D10); a store made with one keeps it, and
/// `compact` still gives its free pages back.
#[test]
fn new_stores_have_no_auto_vacuum_and_old_ones_keep_theirs() {
    let auto_vacuum = |dir: &Path| -> i64 {
        Connection::open(dir.join(DB_FILE))
            .unwrap()
            .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .unwrap()
    };
    let fresh = tempfile::tempdir().unwrap();
    drop(SqliteEngine::open(fresh.path()).unwrap());
    assert_eq!(auto_vacuum(fresh.path()), 0, "NONE");

    let old = tempfile::tempdir().unwrap();
    {
        let c = Connection::open(old.path().join(DB_FILE)).unwrap();
        c.pragma_update(None, "page_size", PAGE_SIZE).unwrap();
        c.pragma_update(None, "auto_vacuum", "INCREMENTAL").unwrap();
        c.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .unwrap();
        create_tables(&c).unwrap();
        c.pragma_update(None, "user_version", LAYOUT).unwrap();
    }
    let e = SqliteEngine::open(old.path()).unwrap();
    let puts: Vec<_> = (0..2_000u32)
        .map(|i| BatchOp::Put {
            tree: T_MSG,
            key: i.to_be_bytes().to_vec(),
            value: vec![1; 600],
        })
        .collect();
    e.apply(&puts).unwrap();
    e.compact().unwrap();
    let full = std::fs::metadata(old.path().join(DB_FILE)).unwrap().len();
    let dels: Vec<_> = (0..2_000u32)
        .map(|i| BatchOp::Delete {
            tree: T_MSG,
            key: i.to_be_bytes().to_vec(),
        })
        .collect();
    e.apply(&dels).unwrap();
    e.compact().unwrap();
    let drained = std::fs::metadata(old.path().join(DB_FILE)).unwrap().len();
    assert_eq!(auto_vacuum(old.path()), 2, "INCREMENTAL");
    assert!(
        drained * 4 < full,
        "{drained} of {full} bytes after a drain"
    );
}

#[test]
fn new_stores_get_small_pages_and_older_stores_keep_theirs() {
    let page_size = |dir: &Path| -> i64 {
        Connection::open(dir.join(DB_FILE))
            .unwrap()
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap()
    };
    let fresh = tempfile::tempdir().unwrap();
    drop(SqliteEngine::open(fresh.path()).unwrap());
    assert_eq!(page_size(fresh.path()), PAGE_SIZE as i64);

    // A layout-2 store made with 4 KiB pages, as older builds created them.
    let old = tempfile::tempdir().unwrap();
    {
        let c = Connection::open(old.path().join(DB_FILE)).unwrap();
        c.pragma_update(None, "page_size", 4096).unwrap();
        c.pragma_update(None, "auto_vacuum", "INCREMENTAL").unwrap();
        c.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .unwrap();
        create_tables(&c).unwrap();
        c.pragma_update(None, "user_version", LAYOUT).unwrap();
    }
    let big = vec![7u8; 3000]; // fits a 4 KiB page's leaf, not a 2 KiB one's
    {
        let e = SqliteEngine::open(old.path()).unwrap();
        e.apply(&[BatchOp::Put {
            tree: T_MSG,
            key: b"k".to_vec(),
            value: big.clone(),
        }])
        .unwrap();
    }
    assert_eq!(page_size(old.path()), 4096, "the page size is not changed");
    let e = SqliteEngine::open(old.path()).unwrap();
    assert_eq!(e.get(T_MSG, b"k").unwrap(), Some(big));
    assert!(e.integrity_check().unwrap().is_empty());
}

/// `.cargo/config.toml` builds the bundled SQLite without the process-wide page
/// cache (whose mutex the writer and the readers fought over) and without memory
/// statistics; a build that lost those flags shows here.
#[test]
fn sqlite_is_built_with_our_flags() {
    let c = Connection::open_in_memory().unwrap();
    let mut st = c.prepare("PRAGMA compile_options").unwrap();
    let opts: Vec<String> = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        !opts.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
        "{opts:?}"
    );
    assert!(opts.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"), "{opts:?}");
}
