//! The default engine: SQLite in WAL mode, one table per tree.
//!
//! Why these settings: every commit is made durable by an fdatasync of the WAL before
//! anyone is told (see "Commit, then sync" below); WAL lets readers run while the writer
//! commits; `journal_size_limit` gives the WAL's space back after a burst; no
//! `auto_vacuum` (DECISIONS D10: free pages are reused, and its pointer map cost ~4% of
//! every commit's writes); a small `cache_size` keeps RSS low on a Pi.
//!
//! Layout (format 3): WAL writes every page a commit touches whole (and the checkpoint
//! writes it again), so bytes written per message are set by how many pages a commit
//! dirties. Each tree gets its own table so its pages stay dense, in one of two shapes:
//! - small values (indexes, counters, meta): `t<N>(k BLOB PRIMARY KEY, v) WITHOUT
//!   ROWID`, one B-tree holding key and value; meta and the recipient counters, which
//!   nearly every commit touches, live in the id tree's table `t3` after its ids, under
//!   `0xFF tree` prefixed keys, next to the newest ids (see [`shared`]);
//! - large values (messages, audit entries, results, dead letters, quarantine): `t<N>(rid
//!   INTEGER PRIMARY KEY, k BLOB UNIQUE, v)`. New rows get the next rowid, so records
//!   are appended to the end of the table B-tree — SQLite's cheap append path, with no
//!   sibling rebalancing — and a big record is stored in the leaf instead of spilling
//!   to overflow pages; the ordering lives in the small `k` index.
//!
//! Checkpoints run on their own thread and connection (`PASSIVE`, every
//! [`CHECKPOINT_EVERY`] commits) instead of inside whichever commit crosses SQLite's
//! auto-checkpoint threshold: that commit used to pay for copying ~1,000 pages and
//! fsyncing the database file, which set the tail latency of every write. SQLite only
//! restarts the WAL from its start when a write begins with *every* frame copied, which
//! a background checkpoint racing a busy writer rarely achieves; so once the background
//! pass is done, the writer finishes the job itself after its next group has been
//! answered (a `PASSIVE` pass over the few frames added meanwhile), and the WAL stays
//! bounded under sustained load.
//!
//! Commit, then sync: the writer's connection runs with `synchronous=NORMAL`, so a COMMIT
//! appends its frames to the WAL without waiting for the disk, and [`Engine::sync`]
//! fdatasyncs the WAL file itself — exactly the sync `synchronous=FULL` would do inside
//! the COMMIT, but callable from another thread while the writer already builds and
//! commits the next group (the store's writer answers a group only after a sync that
//! started after its commit). WAL mode with `NORMAL` stays consistent across power loss
//! (frames are checksummed and salted, so a torn tail is discarded whole), and its
//! checkpoints still sync the WAL before copying and the database after, so a frame is
//! never dropped from the WAL before it is durable in the database.
//!
//! Format 1 kept every tree in one `kv(tree, key, value)` table with 1 KiB pages; such
//! a store is migrated on open in one transaction (its page size stays what it was).
//! New stores use 2 KiB pages ([`PAGE_SIZE`]); stores created before that keep 4 KiB
//! (a page size only changes with a full rewrite of the file, not worth a field
//! upgrade for ~15% fewer bytes written).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};

use rusqlite::{params, CachedStatement, Connection, ErrorCode, OpenFlags, TransactionBehavior};

use super::{readahead, BatchOp, Engine, EngineError, GroupBuilder, Reader, Tree};
use crate::store::trees::{u64_val, META_SCHEMA, T_BYID, T_META};

/// File name of the database inside the store directory.
pub const DB_FILE: &str = "store.sqlite3";
/// How many idle read connections are kept (more are opened on demand and dropped).
const READ_POOL: usize = 4;
/// Page size of a new store (see [`SqliteEngine::open`]).
pub const PAGE_SIZE: usize = 2048;
/// Commits between two background checkpoints (~ SQLite's 1,000-page default at a
/// handful of pages per commit).
const CHECKPOINT_EVERY: u64 = 128;
/// Tree ids are `0..TREES`; table `t<N>` is created for each when the store is (`t1` and
/// `t8`, meta's and the counters', stay empty: they share `t3`, see [`shared`]).
const TREES: usize = 32;

/// Trees whose values are large records (see module docs).
fn large_values(tree: Tree) -> bool {
    use crate::store::trees::{T_AUDIT, T_DEAD, T_MSG, T_QUAR, T_RESULT};
    matches!(tree, T_MSG | T_AUDIT | T_RESULT | T_DEAD | T_QUAR)
}

/// Small trees that nearly every commit touches (meta: time floor, sequence, byte total;
/// the recipient counters) live in the id tree's table, under keys `0xFF tree key`.
/// Those sort after every id-tree key — an id is UTF-8 text or `0xFE` + a packed UUID
/// (`codec::id_key`), and UTF-8 has neither byte — so the newest ids, time-ordered
/// UUIDs appended at the right end of the id range, share a leaf with the meta rows: a
/// commit that enqueues a message dirties one page for its id entry and the sequence
/// and byte total instead of two (layout 3: one WAL frame fewer per commit, ~1/5 of a
/// one-message commit; layout 2 kept meta and counters in a table `t1` of their own).
/// Every other tree has a table of its own.
fn shared(tree: Tree) -> bool {
    use crate::store::trees::T_COUNT;
    matches!(tree, T_META | T_COUNT)
}
/// The table the shared trees live in: the id tree's.
const SHARED_TABLE: usize = T_BYID as usize;
/// First byte of a shared tree's keys; no key of the id tree itself starts with it.
const SHARED_MARK: u8 = 0xFF;

/// The key as stored: `0xFF tree key` for a shared tree.
fn stored_key(tree: Tree, key: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if shared(tree) {
        let mut k = Vec::with_capacity(key.len() + 2);
        k.push(SHARED_MARK);
        k.push(tree);
        k.extend_from_slice(key);
        std::borrow::Cow::Owned(k)
    } else {
        std::borrow::Cow::Borrowed(key)
    }
}

/// The SQL of each tree, built once.
struct TreeSql {
    get: String,
    scan_to: String,
    scan_all: String,
    put: String,
    del: String,
}

fn tree_sql() -> Vec<TreeSql> {
    (0..TREES)
        .map(|tree| {
            let t = if shared(tree as Tree) { SHARED_TABLE } else { tree };
            let put = if large_values(t as Tree) {
                // Upsert keeps the row (and its place) when a record is rewritten.
                format!("INSERT INTO t{t} (k, v) VALUES (?1, ?2) ON CONFLICT (k) DO UPDATE SET v = excluded.v")
            } else {
                format!("INSERT OR REPLACE INTO t{t} (k, v) VALUES (?1, ?2)")
            };
            TreeSql {
                get: format!("SELECT v FROM t{t} WHERE k = ?1"),
                scan_to: format!("SELECT k, v FROM t{t} WHERE k >= ?1 AND k < ?2 ORDER BY k"),
                scan_all: format!("SELECT k, v FROM t{t} WHERE k >= ?1 ORDER BY k"),
                put,
                del: format!("DELETE FROM t{t} WHERE k = ?1"),
            }
        })
        .collect()
}

fn sql_for(sql: &[TreeSql], tree: Tree) -> Result<&TreeSql, EngineError> {
    sql.get(tree as usize)
        .ok_or_else(|| EngineError::Other(format!("tree {tree} is out of range")))
}

fn create_tables(conn: &Connection) -> Result<(), EngineError> {
    let mut ddl = String::new();
    for t in 0..TREES {
        if large_values(t as Tree) {
            ddl.push_str(&format!(
                "CREATE TABLE IF NOT EXISTS t{t} (rid INTEGER PRIMARY KEY, k BLOB NOT NULL UNIQUE, v BLOB NOT NULL);"
            ));
        } else {
            ddl.push_str(&format!(
                "CREATE TABLE IF NOT EXISTS t{t} (k BLOB NOT NULL PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;"
            ));
        }
    }
    conn.execute_batch(&ddl).map_err(err)
}

/// `PRAGMA user_version` of the current file layout (layout 1 never set it: 0). Layout
/// 2: one table per tree, meta and counters in `t1`; layout 3: meta and counters in the
/// id tree's table (see [`shared`]).
const LAYOUT: i64 = 3;
/// What a layout-1 binary (outpost 0.1) reads as the schema version from the `kv` table
/// a layout-2 store keeps for it: higher than the 2 it supports, so a downgraded binary
/// refuses the store ("store is newer", see OPERATIONS.md) instead of starting on an
/// empty `kv` with the data hidden in tables it does not know.
const OLD_BINARY_FENCE: u64 = 3;

/// Brings the file to the current layout in one transaction: creates the per-tree
/// tables, moves a layout-1 store's `kv` rows into them or a layout-2 store's meta and
/// counters into the id tree's table, and leaves the fence row for old binaries. A
/// power cut before the commit leaves the old layout, which the next open migrates.
fn prepare_layout(conn: &mut Connection) -> Result<(), EngineError> {
    let layout: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err)?;
    if layout > LAYOUT {
        return Err(EngineError::Other(format!(
            "store file layout {layout} is newer than this outpost supports ({LAYOUT}); \
             install the newer version or restore a backup"
        )));
    }
    if layout == LAYOUT {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    create_tables(&tx)?;
    let has_kv: bool = tx
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'kv'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_err(err)?
        > 0;
    // A kv table holding only our fence is already layout 2 or 3 (its user_version was
    // lost, e.g. copied by a tool that does not keep it): never "migrate" the fence over
    // the real schema version.
    let fenced = has_kv
        && tx
            .query_row(
                "SELECT value FROM kv WHERE tree = ?1 AND key = ?2",
                params![T_META, META_SCHEMA],
                |r| r.get::<_, Vec<u8>>(0),
            )
            .ok()
            .is_some_and(|v| v == u64_val(OLD_BINARY_FENCE));
    // Layout 2 (or, fenced, 2 or 3): only the shared rows move.
    if fenced || layout == 2 {
        let moved = move_shared_rows(&tx)?;
        tracing::info!(
            moved,
            "SQLite store layout {layout} -> {LAYOUT}: meta and counters moved"
        );
        tx.pragma_update(None, "user_version", LAYOUT)
            .map_err(err)?;
        return tx.commit().map_err(err);
    }
    if has_kv {
        tracing::info!("migrating SQLite store layout 1 -> 2 (one table per tree)");
        let left: i64 = tx
            .query_row(
                "SELECT count(*) FROM kv WHERE tree >= ?1",
                params![TREES as i64],
                |r| r.get(0),
            )
            .map_err(err)?;
        if left > 0 {
            // Not ours to drop: refuse rather than lose rows of an unknown tree.
            return Err(EngineError::Corrupt(format!(
                "{left} rows of unknown trees in the layout-1 table; not migrating"
            )));
        }
        let sql = tree_sql();
        for t in 0..TREES {
            if shared(t as Tree) {
                // Few rows (meta keys, one counter per recipient): prefix them here.
                let rows: Vec<(Vec<u8>, Vec<u8>)> = {
                    let mut st = tx
                        .prepare("SELECT key, value FROM kv WHERE tree = ?1")
                        .map_err(err)?;
                    let it = st
                        .query_map(params![t as i64], |r| Ok((r.get(0)?, r.get(1)?)))
                        .map_err(err)?;
                    it.collect::<Result<_, _>>().map_err(err)?
                };
                let batch: Vec<BatchOp> = rows
                    .into_iter()
                    .map(|(key, value)| BatchOp::Put {
                        tree: t as Tree,
                        key,
                        value,
                    })
                    .collect();
                GroupStatements::new(&tx, &sql).write(&batch)?;
            } else {
                tx.execute(
                    &format!(
                        "INSERT INTO t{t} (k, v) SELECT key, value FROM kv WHERE tree = ?1 ORDER BY key"
                    ),
                    params![t as i64],
                )
                .map_err(err)?;
            }
        }
        tx.execute("DELETE FROM kv", []).map_err(err)?;
    } else {
        tx.execute_batch(
            "CREATE TABLE kv (tree INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL,
             PRIMARY KEY (tree, key)) WITHOUT ROWID;",
        )
        .map_err(err)?;
    }
    tx.execute(
        "INSERT INTO kv (tree, key, value) VALUES (?1, ?2, ?3)",
        params![T_META, META_SCHEMA, u64_val(OLD_BINARY_FENCE)],
    )
    .map_err(err)?;
    tx.pragma_update(None, "user_version", LAYOUT)
        .map_err(err)?;
    tx.commit().map_err(err)
}

/// Layout 2 → 3: meta and counter rows move from `t1` (key `tree key`) to the id tree's
/// table (key `0xFF tree key`). Id-tree keys never start with 0xFF, so nothing collides;
/// should something, the insert fails and the open with it, instead of overwriting.
fn move_shared_rows(tx: &Connection) -> Result<usize, EngineError> {
    // Few rows (meta keys, one counter per recipient); copied through Rust because SQL's
    // `||` would turn the blob keys into text.
    let rows: Vec<(Vec<u8>, Vec<u8>)> = {
        let mut st = tx
            .prepare(&format!("SELECT k, v FROM t{T_META}"))
            .map_err(err)?;
        let it = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(err)?;
        it.collect::<Result<_, _>>().map_err(err)?
    };
    let mut put = tx
        .prepare(&format!(
            "INSERT INTO t{SHARED_TABLE} (k, v) VALUES (?1, ?2)"
        ))
        .map_err(err)?;
    for (k, v) in &rows {
        let mut key = Vec::with_capacity(k.len() + 1);
        key.push(SHARED_MARK);
        key.extend_from_slice(k);
        put.execute(params![key, v]).map_err(err)?;
    }
    tx.execute(&format!("DELETE FROM t{T_META}"), [])
        .map_err(err)?;
    Ok(rows.len())
}

pub struct SqliteEngine {
    path: PathBuf,
    /// Our own handle on the WAL file, for [`Engine::sync`].
    wal: Mutex<Option<WalHandle>>,
    /// The first failed sync, sticky (see the engine contract).
    failed: Mutex<Option<EngineError>>,
    #[cfg(test)]
    fail_next_sync: std::sync::atomic::AtomicBool,
    sql: Vec<TreeSql>,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    commits: AtomicU64,
    checkpointer: Option<Checkpointer>,
}

/// The background checkpoint thread: woken (coalescing) by the writer, stopped and
/// joined when the engine is dropped.
struct Checkpointer {
    wake: mpsc::SyncSender<()>,
    /// Set by the thread after each pass; the writer then completes it (see module docs).
    passed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Option<Checkpointer> {
        let conn = match open_conn(path, OpenFlags::default()) {
            Ok(c) => c,
            Err(e) => {
                // Without it the WAL is still checkpointed when the store closes and by
                // `compact`; log and go on rather than refuse to open.
                tracing::warn!(error = %e, "no background checkpointer");
                return None;
            }
        };
        let (wake, rx) = mpsc::sync_channel::<()>(1);
        let passed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = passed.clone();
        let thread = std::thread::Builder::new()
            .name("outpost-store-ckpt".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    // PASSIVE: copies what it can without blocking the writer or readers.
                    match conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);") {
                        Ok(()) => flag.store(true, Ordering::Release),
                        Err(e) => tracing::warn!(error = %e, "background checkpoint failed"),
                    }
                }
            })
            .ok()?;
        Some(Checkpointer {
            wake,
            passed,
            thread: Some(thread),
        })
    }
}

impl Drop for SqliteEngine {
    fn drop(&mut self) {
        if let Some(mut c) = self.checkpointer.take() {
            drop(c.wake);
            if let Some(t) = c.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// How often [`sync_wal`] re-checks that its handle is still on the live WAL file.
const WAL_RECHECK_EVERY: u64 = 256;

/// Our handle on the WAL file, for [`Engine::sync`].
struct WalHandle {
    file: std::fs::File,
    syncs: u64,
}

/// fdatasyncs the WAL through `slot`, opening it first when there is no handle yet.
///
/// SQLite deletes the WAL only when the last connection to the database closes, and
/// the engine's own connections stay open as long as it does, so the handle stays on
/// the live file. As defence in depth it is re-checked every [`WAL_RECHECK_EVERY`]
/// syncs (a handle on an unlinked file — link count 0 — is reopened): not on every sync,
/// because that `statx` measured ~25 µs on the one-message commit path (a 12–20% slower
/// p50). After an open the directory is synced too, as SQLite does for a WAL it creates.
fn sync_wal(db: &Path, slot: &mut Option<WalHandle>) -> Result<(), EngineError> {
    use std::os::unix::fs::MetadataExt;
    let io = |e: std::io::Error| EngineError::from_io(&e);
    let stale = match slot.as_ref() {
        Some(h) if h.syncs % WAL_RECHECK_EVERY == 0 => {
            h.file.metadata().map(|m| m.nlink() == 0).map_err(io)?
        }
        Some(_) => false,
        None => true,
    };
    if stale {
        let mut p = db.as_os_str().to_owned();
        p.push("-wal");
        let file = std::fs::File::open(&p).map_err(io)?;
        let dir = match db.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        *slot = Some(WalHandle { file, syncs: 0 });
    }
    let Some(h) = slot.as_mut() else {
        return Err(EngineError::Other("no WAL handle".into()));
    };
    h.syncs += 1;
    h.file.sync_data().map_err(io)
}

fn err(e: rusqlite::Error) -> EngineError {
    match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            ErrorCode::DiskFull => EngineError::Full(e.to_string()),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                EngineError::Corrupt(e.to_string())
            }
            ErrorCode::SystemIoFailure | ErrorCode::CannotOpen => {
                // SQLITE_IOERR can hide ENOSPC (e.g. while growing the WAL); look at errno.
                let errno = std::io::Error::last_os_error();
                match errno.raw_os_error() {
                    Some(c) if c == libc::ENOSPC || c == libc::EDQUOT => {
                        EngineError::Full(e.to_string())
                    }
                    _ => EngineError::Other(e.to_string()),
                }
            }
            _ => EngineError::Other(e.to_string()),
        },
        _ => EngineError::Other(e.to_string()),
    }
}

fn get_on(
    c: &Connection,
    sql: &[TreeSql],
    tree: Tree,
    key: &[u8],
) -> Result<Option<Vec<u8>>, EngineError> {
    let mut st = c.prepare_cached(&sql_for(sql, tree)?.get).map_err(err)?;
    get_with(&mut st, tree, key)
}

/// Runs a tree's prepared `get` statement for `key`.
fn get_with(
    st: &mut rusqlite::Statement<'_>,
    tree: Tree,
    key: &[u8],
) -> Result<Option<Vec<u8>>, EngineError> {
    if tree == T_BYID && key.first() == Some(&SHARED_MARK) {
        return Ok(None);
    }
    let mut rows = st.query(params![stored_key(tree, key)]).map_err(err)?;
    match rows.next().map_err(err)? {
        Some(r) => Ok(Some(r.get::<_, Vec<u8>>(0).map_err(err)?)),
        None => Ok(None),
    }
}

fn scan_on(
    c: &Connection,
    sql: &[TreeSql],
    tree: Tree,
    start: &[u8],
    end: Option<&[u8]>,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), EngineError> {
    let sql = sql_for(sql, tree)?;
    let strip = 2 * usize::from(shared(tree));
    // The id tree's own keys end where the shared trees' begin.
    let end = match end {
        Some(e) if tree == T_BYID && e > [SHARED_MARK].as_slice() => Some([SHARED_MARK].as_slice()),
        None if tree == T_BYID => Some([SHARED_MARK].as_slice()),
        e => e,
    };
    let mut st;
    let mut rows = match (end, shared(tree)) {
        (Some(end), _) => {
            st = c.prepare_cached(&sql.scan_to).map_err(err)?;
            st.query(params![stored_key(tree, start), stored_key(tree, end)])
                .map_err(err)?
        }
        // A shared tree ends where the next tree id's prefix begins.
        (None, true) => {
            st = c.prepare_cached(&sql.scan_to).map_err(err)?;
            st.query(params![
                stored_key(tree, start),
                [SHARED_MARK, tree.wrapping_add(1)]
            ])
            .map_err(err)?
        }
        (None, false) => {
            st = c.prepare_cached(&sql.scan_all).map_err(err)?;
            st.query(params![start]).map_err(err)?
        }
    };
    while let Some(r) = rows.next().map_err(err)? {
        let k = r
            .get_ref(0)
            .map_err(err)?
            .as_blob()
            .map_err(|e| EngineError::Corrupt(format!("key is not a blob: {e}")))?;
        let k = k.get(strip..).unwrap_or_default();
        let v = r
            .get_ref(1)
            .map_err(err)?
            .as_blob()
            .map_err(|e| EngineError::Corrupt(format!("value is not a blob: {e}")))?;
        if !f(k, v) {
            break;
        }
    }
    Ok(())
}

/// The writer's statements for one group, held for the whole transaction: one lookup
/// in rusqlite's statement cache per tree and kind per group, instead of one per
/// operation (that lookup hashes the SQL text; it was ~7% of the writer's CPU).
struct GroupStatements<'c> {
    conn: &'c Connection,
    sql: &'c [TreeSql],
    /// Indexed by `tree * 3 + kind` (get, put, delete).
    held: RefCell<Vec<Option<CachedStatement<'c>>>>,
}

const GET: usize = 0;
const PUT: usize = 1;
const DEL: usize = 2;

impl<'c> GroupStatements<'c> {
    fn new(conn: &'c Connection, sql: &'c [TreeSql]) -> Self {
        let mut held = Vec::new();
        held.resize_with(TREES * 3, || None);
        GroupStatements {
            conn,
            sql,
            held: RefCell::new(held),
        }
    }

    fn with<T>(
        &self,
        tree: Tree,
        kind: usize,
        f: impl FnOnce(&mut CachedStatement<'c>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let mut held = self
            .held
            .try_borrow_mut()
            .map_err(|_| EngineError::Other("statement already in use".into()))?;
        let slot = held
            .get_mut(usize::from(tree) * 3 + kind)
            .ok_or_else(|| EngineError::Other(format!("tree {tree} is out of range")))?;
        let st = match slot {
            Some(st) => st,
            None => {
                let sql = sql_for(self.sql, tree)?;
                let text = match kind {
                    GET => &sql.get,
                    PUT => &sql.put,
                    _ => &sql.del,
                };
                slot.insert(self.conn.prepare_cached(text).map_err(err)?)
            }
        };
        f(st)
    }

    fn write(&self, batch: &[BatchOp]) -> Result<(), EngineError> {
        for op in batch {
            match op {
                BatchOp::Put { tree, key, .. } | BatchOp::Delete { tree, key }
                    if *tree == T_BYID && key.first() == Some(&SHARED_MARK) =>
                {
                    return Err(EngineError::Other(
                        "id-tree keys may not start with 0xFF (reserved for meta)".into(),
                    ))
                }
                BatchOp::Put { tree, key, value } => self.with(*tree, PUT, |st| {
                    st.execute(params![stored_key(*tree, key), value])
                        .map(|_| ())
                        .map_err(err)
                })?,
                BatchOp::Delete { tree, key } => self.with(*tree, DEL, |st| {
                    st.execute(params![stored_key(*tree, key)])
                        .map(|_| ())
                        .map_err(err)
                })?,
            }
        }
        Ok(())
    }
}

/// The writer's view inside its open transaction.
struct ConnReader<'s, 'c>(&'s GroupStatements<'c>);

impl Reader for ConnReader<'_, '_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.0.with(tree, GET, |st| get_with(st, tree, key))
    }
    fn scan(
        &self,
        tree: Tree,
        start: &[u8],
        end: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), EngineError> {
        scan_on(self.0.conn, self.0.sql, tree, start, end, f)
    }
}

/// Opens a further connection (a reader, the checkpointer) configured like the writer's,
/// with readahead off on its descriptors ([`readahead`]): once right after the open,
/// for the database file, and once after a first read, which opens the WAL.
fn open_conn(path: &Path, flags: OpenFlags) -> Result<Connection, EngineError> {
    let files = readahead::store_files(path);
    let c = Connection::open_with_flags(path, flags).map_err(err)?;
    readahead::no_readahead(&files);
    configure(&c)?;
    c.query_row("PRAGMA schema_version", [], |_| Ok(()))
        .map_err(err)?;
    readahead::no_readahead(&files);
    Ok(c)
}

fn configure(conn: &Connection) -> Result<(), EngineError> {
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(err)?;
    // ~1 MiB page cache per connection: the store streams, it does not cache.
    conn.pragma_update(None, "cache_size", -1024).map_err(err)?;
    conn.pragma_update(None, "mmap_size", 0).map_err(err)?;
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(err)?;
    // Five statements per tree; keep them all prepared.
    conn.set_prepared_statement_cache_capacity(TREES * 5);
    Ok(())
}

impl SqliteEngine {
    pub fn open(dir: &Path) -> Result<Self, EngineError> {
        std::fs::create_dir_all(dir).map_err(|e| EngineError::from_io(&e))?;
        let path = dir.join(DB_FILE);
        // Before SQLite reads the WAL from end to end (recovery), bring it into the
        // page cache in small folios (see `readahead`).
        let files = readahead::store_files(&path);
        if let Some(wal) = files.get(1) {
            readahead::prewarm(wal);
        }
        let conn = Connection::open(&path).map_err(err)?;
        readahead::no_readahead(&files);
        configure(&conn)?;
        // Half the OS page: a commit writes every page it touches whole to the WAL,
        // and most of those are index leaves and interior pages holding a few new
        // entries, so halving the page nearly halves them, while three ~650-byte
        // records still fill a page and the rowid table keeps them out of overflow
        // pages. 1 KiB pages (one record per page) and 4 KiB pages both measured
        // worse (docs/BENCHMARKS-store.md, session 4). Like auto_vacuum, only
        // effective before the first table exists: older stores keep their size.
        conn.pragma_update(None, "page_size", PAGE_SIZE)
            .map_err(err)?;
        // No pointer map (DECISIONS D10): with `auto_vacuum=INCREMENTAL` every page a
        // commit allocates or moves also rewrites a pointer-map page, 1.7 WAL frames
        // per 64-producer commit (~4% of the bytes written per message) and 0.4 per
        // one-message commit, to be able to shrink the file after a backlog drains.
        // Free pages are reused instead; the file is bounded by `max_store_bytes` plus
        // B-tree slack, and `outpost backup` writes a compact copy. Like the page size,
        // only effective before the first table exists: older stores keep INCREMENTAL,
        // and `compact` still shrinks those.
        conn.pragma_update(None, "auto_vacuum", "NONE")
            .map_err(err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(EngineError::Other(format!(
                "journal_mode is {mode}, not wal"
            )));
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(err)?;
        conn.pragma_update(None, "journal_size_limit", 16 * 1024 * 1024)
            .map_err(err)?;
        // Checkpoints are the background thread's job (see module docs).
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(err)?;
        let mut conn = conn;
        prepare_layout(&mut conn)?;
        // The WAL is open by now.
        readahead::no_readahead(&files);
        // From here on commits are synced by `sync` (see module docs).
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        let mut wal = None;
        sync_wal(&path, &mut wal)?;
        let checkpointer = Checkpointer::start(&path);
        Ok(Self {
            path,
            wal: Mutex::new(wal),
            failed: Mutex::new(None),
            #[cfg(test)]
            fail_next_sync: std::sync::atomic::AtomicBool::new(false),
            sql: tree_sql(),
            writer: Mutex::new(conn),
            readers: Mutex::new(Vec::new()),
            commits: AtomicU64::new(0),
            checkpointer,
        })
    }

    /// After each commit: counts it and wakes the checkpointer every
    /// [`CHECKPOINT_EVERY`] commits.
    fn committed(&self) {
        let Some(c) = &self.checkpointer else {
            return;
        };
        let n = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        if n % CHECKPOINT_EVERY == 0 {
            // Full channel = a pass is already pending: coalesce.
            let _ = c.wake.try_send(());
        }
    }

    /// The sticky failure of an earlier sync, if any (see the engine contract).
    fn check_failed(&self) -> Result<(), EngineError> {
        match self.failed.lock() {
            Ok(f) => f.clone().map_or(Ok(()), Err),
            Err(_) => Err(EngineError::Other("sync state poisoned".into())),
        }
    }

    /// Runs `f` on a pooled read-only connection (WAL: never blocks the writer).
    fn with_reader<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let pooled = self.readers.lock().ok().and_then(|mut p| p.pop());
        let conn = match pooled {
            Some(c) => c,
            None => open_conn(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?,
        };
        let out = f(&conn);
        if let Ok(mut p) = self.readers.lock() {
            if p.len() < READ_POOL {
                p.push(conn);
            }
        }
        out
    }
}

impl Reader for SqliteEngine {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.with_reader(|c| get_on(c, &self.sql, tree, key))
    }

    fn scan(
        &self,
        tree: Tree,
        start: &[u8],
        end: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), EngineError> {
        self.with_reader(|c| scan_on(c, &self.sql, tree, start, end, f))
    }
}

impl Engine for SqliteEngine {
    fn with_write_lock(&self, f: &mut dyn FnMut(&dyn Reader)) -> Result<(), EngineError> {
        // A group that writes nothing: BEGIN IMMEDIATE, then no commit.
        self.commit_group(&mut |view| {
            f(view);
            Vec::new()
        })
    }
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn write_group(&self, build: &mut GroupBuilder<'_>) -> Result<(), EngineError> {
        self.commit_group(build)?;
        self.sync()
    }

    fn commit_group(&self, build: &mut GroupBuilder<'_>) -> Result<(), EngineError> {
        self.check_failed()?;
        let mut conn = self
            .writer
            .lock()
            .map_err(|_| EngineError::Other("writer connection poisoned".into()))?;
        // IMMEDIATE: take the write lock before reading, so the snapshot the builder
        // reads cannot be invalidated by another process (the CLI) before we write.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err)?;
        let written = {
            let statements = GroupStatements::new(&tx, &self.sql);
            let batch = build(&ConnReader(&statements));
            statements.write(&batch)?;
            !batch.is_empty()
        };
        if !written {
            // Nothing to write: end the transaction without a commit (no fsync).
            return tx.rollback().map_err(err);
        }
        // synchronous=NORMAL: the frames are written, not yet synced (see module docs).
        tx.commit().map_err(err)?;
        self.committed();
        Ok(())
    }

    fn sync_failed(&self) -> bool {
        self.check_failed().is_err()
    }

    fn sync(&self) -> Result<(), EngineError> {
        self.check_failed()?;
        let mut wal = self
            .wal
            .lock()
            .map_err(|_| EngineError::Other("WAL handle poisoned".into()))?;
        #[cfg(test)]
        if self.fail_next_sync.swap(false, Ordering::Relaxed) {
            *wal = None;
            let e = EngineError::Other("injected fsync failure".into());
            if let Ok(mut f) = self.failed.lock() {
                *f = Some(e.clone());
            }
            return Err(e);
        }
        if let Err(e) = sync_wal(&self.path, &mut wal) {
            tracing::error!(error = %e, "fsync of the store's WAL failed; no write can be made durable until outpost is restarted");
            if let Ok(mut f) = self.failed.lock() {
                *f = Some(e.clone());
            }
            return Err(e);
        }
        Ok(())
    }

    fn apply(&self, batch: &[BatchOp]) -> Result<(), EngineError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut conn = self
            .writer
            .lock()
            .map_err(|_| EngineError::Other("writer connection poisoned".into()))?;
        self.check_failed()?;
        let tx = conn.transaction().map_err(err)?;
        GroupStatements::new(&tx, &self.sql).write(batch)?;
        tx.commit().map_err(err)?;
        self.committed();
        drop(conn);
        self.sync()
    }

    fn integrity_check(&self) -> Result<Vec<String>, EngineError> {
        let conn = self
            .writer
            .lock()
            .map_err(|_| EngineError::Other("writer connection poisoned".into()))?;
        let mut st = conn.prepare("PRAGMA integrity_check").map_err(err)?;
        let mut rows = st.query([]).map_err(err)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(err)? {
            let line: String = r.get(0).map_err(err)?;
            if line != "ok" {
                out.push(line);
            }
        }
        Ok(out)
    }

    fn backup_to(&self, dest: &Path) -> Result<(), EngineError> {
        std::fs::create_dir_all(dest).map_err(|e| EngineError::from_io(&e))?;
        let target = dest.join(DB_FILE);
        let target_str = target
            .to_str()
            .ok_or_else(|| EngineError::Other("backup path is not UTF-8".into()))?
            .to_owned();
        // VACUUM INTO reads one consistent snapshot and writes a compact copy.
        self.with_reader(|c| {
            c.execute("VACUUM INTO ?1", params![target_str])
                .map_err(err)
                .map(|_| ())
        })?;
        let f = std::fs::File::open(&target).map_err(|e| EngineError::from_io(&e))?;
        f.sync_all().map_err(|e| EngineError::from_io(&e))
    }

    fn disk_bytes(&self) -> u64 {
        let mut total = 0;
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            if let Ok(m) = std::fs::metadata(&p) {
                total += m.len();
            }
        }
        total
    }

    fn after_group(&self) {
        let Some(c) = &self.checkpointer else {
            return;
        };
        if c.passed.swap(false, Ordering::Acquire) {
            // Only the frames written since the background pass are left to copy; then
            // the next write can restart the WAL from its start (see module docs).
            if let Ok(conn) = self.writer.lock() {
                if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);") {
                    tracing::warn!(error = %e, "checkpoint failed");
                }
            }
        }
    }

    fn release_memory(&self) {
        // Idle readers are closed (they are reopened on demand); the writer keeps its
        // connection and frees its page cache.
        if let Ok(mut pool) = self.readers.lock() {
            pool.clear();
        }
        if let Ok(conn) = self.writer.lock() {
            let _ = conn.execute_batch("PRAGMA shrink_memory");
        }
    }

    fn compact(&self) -> Result<(), EngineError> {
        let conn = self
            .writer
            .lock()
            .map_err(|_| EngineError::Other("writer connection poisoned".into()))?;
        // `incremental_vacuum` frees one page per step of its statement (it yields a row
        // per page), so it is stepped to the end; `execute_batch` would stop after the
        // first. A no-op on a store without auto_vacuum (D10).
        {
            let mut stmt = conn.prepare("PRAGMA incremental_vacuum").map_err(err)?;
            let mut rows = stmt.query([]).map_err(err)?;
            while rows.next().map_err(err)?.is_some() {}
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::trees::{parse_u64, T_AUDIT, T_META, T_MSG};

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

        // A layout-2 store made with 4 KiB pages, as before session 4.
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
}
