//! Creating the tables, and layout migrations: bringing an older file to the current
//! table layout on open.
//!
//! Format 1 kept every tree in one `kv(tree, key, value)` table with 1 KiB pages; such
//! a store is migrated on open in one transaction (its page size stays what it was).
//! Layout 2 gave each tree a table of its own with meta and the counters in `t1`;
//! layout 3 moves those into the id tree's table (see [`super::tables`]). New stores use
//! 2 KiB pages ([`super::PAGE_SIZE`]); stores created before that keep 4 KiB (a page
//! size only changes with a full rewrite of the file, not worth a field upgrade for
//! ~15% fewer bytes written).

use rusqlite::{params, Connection, TransactionBehavior};

use super::conn::err;
use super::statements::{tree_sql, GroupStatements};
use super::tables::{large_values, shared, SHARED_MARK, SHARED_TABLE, TREES};
use crate::store::engine::{BatchOp, EngineError, Tree};
use crate::store::trees::{u64_val, META_SCHEMA, T_META};

/// Creates every tree's table that does not exist yet.
pub(super) fn create_tables(conn: &Connection) -> Result<(), EngineError> {
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
/// id tree's table (see [`super::tables::shared`]).
pub(super) const LAYOUT: i64 = 3;
/// What a layout-1 binary (outpost 0.1) reads as the schema version from the `kv` table
/// a layout-2 store keeps for it: higher than the 2 it supports, so a downgraded binary
/// refuses the store ("store is newer", see OPERATIONS.md) instead of starting on an
/// empty `kv` with the data hidden in tables it does not know.
pub(super) const OLD_BINARY_FENCE: u64 = 3;

/// Brings the file to the current layout in one transaction: creates the per-tree
/// tables, moves a layout-1 store's `kv` rows into them or a layout-2 store's meta and
/// counters into the id tree's table, and leaves the fence row for old binaries. A
/// power cut before the commit leaves the old layout, which the next open migrates.
pub(super) fn prepare_layout(conn: &mut Connection) -> Result<(), EngineError> {
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
        move_layout1_rows(&tx)?;
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

/// Layout 1 → 2: every tree's rows move from the one `kv` table into the tree's own
/// table (the shared ones, few rows, through the prefixing writer).
fn move_layout1_rows(tx: &Connection) -> Result<(), EngineError> {
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
            GroupStatements::new(tx, &sql).write(&batch)?;
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
    Ok(())
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
