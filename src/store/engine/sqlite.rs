//! The default engine: one SQLite table in WAL mode.
//!
//! Why these settings: `synchronous=FULL` makes every commit fsync the WAL, so a returned
//! `apply` is durable; WAL lets readers run while the writer commits; `auto_vacuum =
//! INCREMENTAL` and `journal_size_limit` give space back after a long offline period
//! drains; a small `cache_size` keeps RSS low on a Pi. All trees share one `WITHOUT
//! ROWID` table keyed by `(tree, key)`, so a batch across trees is one transaction.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{params, Connection, ErrorCode, OpenFlags};

use super::{BatchOp, Engine, EngineError, Tree};

/// File name of the database inside the store directory.
pub const DB_FILE: &str = "store.sqlite3";
/// How many idle read connections are kept (more are opened on demand and dropped).
const READ_POOL: usize = 4;

pub struct SqliteEngine {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
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

fn configure(conn: &Connection) -> Result<(), EngineError> {
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(err)?;
    // ~1 MiB page cache per connection: the store streams, it does not cache.
    conn.pragma_update(None, "cache_size", -1024).map_err(err)?;
    conn.pragma_update(None, "mmap_size", 0).map_err(err)?;
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(err)?;
    Ok(())
}

impl SqliteEngine {
    pub fn open(dir: &Path) -> Result<Self, EngineError> {
        std::fs::create_dir_all(dir).map_err(|e| EngineError::from_io(&e))?;
        let path = dir.join(DB_FILE);
        let conn = Connection::open(&path).map_err(err)?;
        configure(&conn)?;
        // auto_vacuum must be set before the first table exists to take effect.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
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
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv (
                tree INTEGER NOT NULL,
                key BLOB NOT NULL,
                value BLOB NOT NULL,
                PRIMARY KEY (tree, key)
            ) WITHOUT ROWID;",
        )
        .map_err(err)?;
        Ok(Self {
            path,
            writer: Mutex::new(conn),
            readers: Mutex::new(Vec::new()),
        })
    }

    /// Runs `f` on a pooled read-only connection (WAL: never blocks the writer).
    fn with_reader<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let pooled = self.readers.lock().ok().and_then(|mut p| p.pop());
        let conn = match pooled {
            Some(c) => c,
            None => {
                let c = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(err)?;
                configure(&c)?;
                c
            }
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

impl Engine for SqliteEngine {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.with_reader(|c| {
            let mut st = c
                .prepare_cached("SELECT value FROM kv WHERE tree = ?1 AND key = ?2")
                .map_err(err)?;
            let mut rows = st.query(params![tree, key]).map_err(err)?;
            match rows.next().map_err(err)? {
                Some(r) => Ok(Some(r.get::<_, Vec<u8>>(0).map_err(err)?)),
                None => Ok(None),
            }
        })
    }

    fn scan(
        &self,
        tree: Tree,
        start: &[u8],
        end: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), EngineError> {
        self.with_reader(|c| {
            let mut st;
            let mut rows = match end {
                Some(end) => {
                    st = c
                        .prepare_cached(
                            "SELECT key, value FROM kv WHERE tree = ?1 AND key >= ?2 AND key < ?3 ORDER BY key",
                        )
                        .map_err(err)?;
                    st.query(params![tree, start, end]).map_err(err)?
                }
                None => {
                    st = c
                        .prepare_cached(
                            "SELECT key, value FROM kv WHERE tree = ?1 AND key >= ?2 ORDER BY key",
                        )
                        .map_err(err)?;
                    st.query(params![tree, start]).map_err(err)?
                }
            };
            while let Some(r) = rows.next().map_err(err)? {
                let k = r.get_ref(0).map_err(err)?.as_blob().map_err(|e| {
                    EngineError::Corrupt(format!("key is not a blob: {e}"))
                })?;
                let v = r.get_ref(1).map_err(err)?.as_blob().map_err(|e| {
                    EngineError::Corrupt(format!("value is not a blob: {e}"))
                })?;
                if !f(k, v) {
                    break;
                }
            }
            Ok(())
        })
    }

    fn apply(&self, batch: &[BatchOp]) -> Result<(), EngineError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut conn = self
            .writer
            .lock()
            .map_err(|_| EngineError::Other("writer connection poisoned".into()))?;
        let tx = conn.transaction().map_err(err)?;
        {
            let mut put = tx
                .prepare_cached("INSERT OR REPLACE INTO kv (tree, key, value) VALUES (?1, ?2, ?3)")
                .map_err(err)?;
            let mut del = tx
                .prepare_cached("DELETE FROM kv WHERE tree = ?1 AND key = ?2")
                .map_err(err)?;
            for op in batch {
                match op {
                    BatchOp::Put { tree, key, value } => {
                        put.execute(params![tree, key, value]).map_err(err)?;
                    }
                    BatchOp::Delete { tree, key } => {
                        del.execute(params![tree, key]).map_err(err)?;
                    }
                }
            }
        }
        // With synchronous=FULL the commit fsyncs the WAL before returning.
        tx.commit().map_err(err)
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

    fn compact(&self) -> Result<(), EngineError> {
        let conn = self
            .writer
            .lock()
            .map_err(|_| EngineError::Other("writer connection poisoned".into()))?;
        conn.execute_batch("PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(err)
    }
}
