//! Corruption: damaged record bytes, an undecodable record, a damaged and a missing
//! blob, and damaged database pages. `doctor` reports them, `open` succeeds with the
//! damage quarantined, nothing panics, and intact messages are still delivered.

use super::*;
use codec::*;
use engine::BatchOp;

fn damaged_records_and_blobs_are_reported_and_quarantined(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let big_a = vec![1u8; 100_000];
    let big_b = vec![2u8; 100_000];
    {
        let s = open(kind, d.path(), &c);
        for id in ["ok1", "flip", "ok2"] {
            s.enqueue(msg("gw", id, 0, id.as_bytes())).wait().unwrap();
        }
        s.enqueue(msg("gw", "blob_bad", 0, &big_a)).wait().unwrap();
        s.enqueue(msg("gw", "blob_gone", 0, &big_b)).wait().unwrap();
        let e = &s.inner.engine;
        // A flipped bit inside a stored record.
        let k = e.get(T_BYID, b"flip").unwrap().unwrap();
        let mut v = e.get(T_MSG, &k).unwrap().unwrap();
        let n = v.len();
        v[n - 2] ^= 0x40;
        // A record that is not ours at all, under a valid queue key.
        let junk_key = msg_key("outbox", "gw", 0, 999);
        e.apply(&[
            BatchOp::Put {
                tree: T_MSG,
                key: k,
                value: v,
            },
            BatchOp::Put {
                tree: T_MSG,
                key: junk_key,
                value: b"\x01garbage".to_vec(),
            },
        ])
        .unwrap();
        // One blob altered, one deleted.
        let pa = s.inner.blobs.path(&blobs::sha256(&big_a));
        let mut data = std::fs::read(&pa).unwrap();
        data[10] ^= 0xFF;
        std::fs::write(&pa, data).unwrap();
        std::fs::remove_file(s.inner.blobs.path(&blobs::sha256(&big_b))).unwrap();

        let r = s.doctor().unwrap();
        assert!(!r.healthy());
        assert_eq!(r.undecodable.len(), 2, "{r:?}");
        assert!(r.undecodable.iter().any(|l| l.contains("checksum")));
        assert_eq!(r.missing_blobs.len(), 1);
        assert_eq!(r.corrupt_blobs.len(), 1);
        assert!(r.quarantined.is_empty());
    }
    let s = open(kind, d.path(), &c);
    assert_eq!(s.open_report().len(), 4, "{:?}", s.open_report());
    let r = s.doctor().unwrap();
    assert!(r.healthy(), "{r:?}");
    assert_eq!(r.quarantined.len(), 4);
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["ok1", "ok2"]
    );
    assert_eq!(s.pending("outbox", "gw").unwrap(), 2);
}

/// A store opened without the verify-on-open scan, so damage is found while reading.
fn open_unverified(kind: EngineKind, dir: &Path) -> Store {
    let opts = StoreOptions {
        verify_on_open: false,
        ..opts(kind)
    };
    Store::open(dir, opts, Arc::new(ManualClock::new(T0))).unwrap()
}

/// Of the queued "a" and "b" for `gw`, damages "a"'s record; a read then returns only
/// "b", and the quarantine it starts lands with the next commit (made here).
fn damage_a_then_read_b(s: &Store) {
    let e = &s.inner.engine;
    let k = e.get(T_BYID, b"a").unwrap().unwrap();
    e.apply(&[BatchOp::Put {
        tree: T_MSG,
        key: k,
        value: vec![1, 2, 3, 4, 5, 6],
    }])
    .unwrap();
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["b"]
    );
    s.touch_time().wait().unwrap();
}

fn damage_found_while_reading_is_quarantined_not_delivered(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let s = open_unverified(kind, d.path());
    s.enqueue(msg("gw", "a", 0, b"a")).wait().unwrap();
    s.enqueue(msg("gw", "b", 0, b"b")).wait().unwrap();
    damage_a_then_read_b(&s);
    let r = s.doctor().unwrap();
    assert_eq!(r.quarantined.len(), 1, "{r:?}");
    assert!(r.healthy(), "{r:?}");
}

/// A quarantined record may have been a member of its recipient's expiry-ordered lane
/// (it no longer says): the lane's member count must not keep it, or the lane stays in
/// the due tree after its last real member left.
fn a_quarantined_lane_member_leaves_its_lane(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let s = open_unverified(kind, d.path());
    s.enqueue(msg("gw", "a", 0, b"a")).wait().unwrap();
    s.enqueue(msg("gw", "b", 0, b"b")).wait().unwrap();
    let e = &s.inner.engine;
    let members = || {
        e.get(T_COUNT, &count_key("outbox", "gw"))
            .unwrap()
            .map(|v| counter::Counter::decode(&v).unwrap().lane.members)
    };
    assert_eq!(members(), Some(2));
    damage_a_then_read_b(&s);
    assert_eq!(members(), Some(1));
    s.ack("outbox", "gw", vec!["b".into()], T0).wait().unwrap();
    assert_eq!(members(), None, "the counter goes with the last message");
    let mut due = 0;
    e.scan(T_LANE_DUE, &[], None, &mut |_, _| {
        due += 1;
        true
    })
    .unwrap();
    assert_eq!(due, 0, "the lane is still in the due tree");
}

for_each_engine!(
    damaged_records_and_blobs_are_reported_and_quarantined,
    damage_found_while_reading_is_quarantined_not_delivered,
    a_quarantined_lane_member_leaves_its_lane,
);

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Writes 200 messages (one with a marker body) and checkpoints them into the file.
fn sqlite_with_marker(dir: &Path, c: &ManualClock, marker: &[u8]) -> std::path::PathBuf {
    let s = open(EngineKind::Sqlite, dir, c);
    for i in 0..200 {
        let body = if i == 100 {
            marker.to_vec()
        } else {
            vec![b'x'; 300]
        };
        s.enqueue(msg("gw", &format!("m{i:03}"), 0, &body))
            .wait()
            .unwrap();
    }
    s.compact().unwrap(); // checkpoint the WAL into the main file
    dir.join(engine::sqlite::DB_FILE)
}

/// SQLite only (sled is not asked to survive arbitrary file damage, see
/// docs/DECISIONS.md): bytes of one record damaged in the database file.
#[test]
fn sqlite_damaged_record_bytes_in_the_file_are_quarantined() {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let marker = [b'Q'; 300];
    let path = sqlite_with_marker(d.path(), &c, &marker);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = find(&bytes, &marker).unwrap();
    bytes[at + 10] = b'R';
    std::fs::write(&path, &bytes).unwrap();

    let s = open(EngineKind::Sqlite, d.path(), &c);
    assert_eq!(s.open_report().len(), 1, "{:?}", s.open_report());
    assert!(s.open_report()[0].contains("checksum"));
    let r = s.doctor().unwrap();
    assert!(r.healthy(), "{r:?}");
    assert_eq!(r.quarantined.len(), 1);
    let all = s.next_batch("outbox", "gw", 500, T0).unwrap();
    assert_eq!(all.len(), 199);
    assert!(!ids(&all).contains(&"m100".to_string()));
}

/// SQLite only: a damaged b-tree page. Open still succeeds (no crash loop), the damage
/// is reported by open and by doctor, reads fail cleanly instead of panicking.
#[test]
fn sqlite_damaged_page_is_reported_and_open_still_works() {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let marker = [b'Q'; 300];
    let path = sqlite_with_marker(d.path(), &c, &marker);
    let mut bytes = std::fs::read(&path).unwrap();
    // Smash the b-tree page header of the leaf that holds the marked message.
    // The page size from the database header (bytes 16..18, big-endian).
    let page = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    assert!(page >= 512, "page size {page}");
    let start = (find(&bytes, &marker).unwrap() / page) * page;
    for b in &mut bytes[start..start + 8] {
        *b = 0xEE;
    }
    std::fs::write(&path, &bytes).unwrap();

    let s = Store::open(d.path(), opts(EngineKind::Sqlite), Arc::new(c.clone())).unwrap();
    // Depending on what the page held (b-tree page or overflow data) SQLite reports it
    // as malformed or our record checksum catches it; either way it is seen.
    assert!(!s.open_report().is_empty());
    let r = s.doctor().unwrap();
    assert!(!r.healthy() || !r.quarantined.is_empty(), "{r:?}");
    let _ = s.next_batch("outbox", "gw", 500, T0);
}
