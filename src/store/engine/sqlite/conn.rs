//! Connections: how each one is opened and configured, and what a SQLite error means
//! to the store (a full disk is [`EngineError::Full`], damage is
//! [`EngineError::Corrupt`]).

use std::path::Path;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::readahead;
use super::tables::TREES;
use crate::store::engine::EngineError;

pub(super) fn err(e: rusqlite::Error) -> EngineError {
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

/// Opens a further connection (a reader, the checkpointer) configured like the writer's,
/// with readahead off on its descriptors ([`readahead`]): once right after the open,
/// for the database file, and once after a first read, which opens the WAL.
pub(super) fn open_conn(path: &Path, flags: OpenFlags) -> Result<Connection, EngineError> {
    let files = readahead::store_files(path);
    let c = Connection::open_with_flags(path, flags).map_err(err)?;
    readahead::no_readahead(&files);
    configure(&c)?;
    c.query_row("PRAGMA schema_version", [], |_| Ok(()))
        .map_err(err)?;
    readahead::no_readahead(&files);
    Ok(c)
}

pub(super) fn configure(conn: &Connection) -> Result<(), EngineError> {
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
