//! The default engine: SQLite in WAL mode, one table per tree.
//!
//! Why these settings: every commit is made durable by an fdatasync of the WAL before
//! anyone is told ([`wal`]: commit, then sync); WAL lets readers run while the writer
//! commits; `journal_size_limit` gives the WAL's space back after a burst; no
//! `auto_vacuum` (DECISIONS D10: free pages are reused, and its pointer map cost ~4% of
//! every commit's writes); a small `cache_size` keeps RSS low on a Pi.
//!
//! Where things live:
//! - this file: [`SqliteEngine`] — opening the store, the writer's transactions
//!   (`commit_group`, `apply`), the pool of read connections, maintenance;
//! - [`tables`]: which table holds each tree and how its rows look (layout 3);
//! - [`layout`]: creating the tables, and migrations of older file layouts on open;
//! - [`statements`]: the SQL text per tree and statement caching (reads, scans, the
//!   writer's statements held for a group);
//! - [`conn`]: opening and configuring connections, SQLite errors → [`EngineError`];
//! - [`wal`]: the WAL handle and its fdatasync;
//! - [`checkpointer`]: the background checkpoint thread;
//! - [`readahead`]: readahead off on the store's files.

mod checkpointer;
mod conn;
mod layout;
mod readahead;
mod statements;
mod tables;
#[cfg(test)]
mod tests;
mod wal;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};

use super::{BatchOp, Engine, EngineError, GroupBuilder, Reader, Tree};
use checkpointer::Checkpointer;
use conn::{configure, err, open_conn};
use statements::{get_on, scan_on, tree_sql, ConnReader, GroupStatements, TreeSql};
use wal::{sync_wal, WalHandle};

/// File name of the database inside the store directory.
pub const DB_FILE: &str = "store.sqlite3";
/// How many idle read connections are kept (more are opened on demand and dropped).
const READ_POOL: usize = 4;
/// Page size of a new store (see [`SqliteEngine::open`]).
pub const PAGE_SIZE: usize = 2048;

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
    checkpointer: Option<Checkpointer>,
}

impl Drop for SqliteEngine {
    fn drop(&mut self) {
        if let Some(c) = self.checkpointer.take() {
            c.stop();
        }
    }
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
        // worse (DECISIONS D1, "Page size"). Like auto_vacuum, only
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
        // Checkpoints are the background thread's job (see [`checkpointer`]).
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(err)?;
        let mut conn = conn;
        layout::prepare_layout(&mut conn)?;
        // The WAL is open by now.
        readahead::no_readahead(&files);
        // From here on commits are synced by `sync` (see [`wal`]).
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
            checkpointer,
        })
    }

    /// After each commit: counts it for the checkpointer ([`checkpointer`]).
    fn committed(&self) {
        if let Some(c) = &self.checkpointer {
            c.committed();
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
        // synchronous=NORMAL: the frames are written, not yet synced (see [`wal`]).
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
        if self
            .fail_next_sync
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
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
        if c.take_passed() {
            // Only the frames written since the background pass are left to copy; then
            // the next write can restart the WAL from its start (see [`checkpointer`]).
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
