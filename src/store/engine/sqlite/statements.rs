//! The SQL text of each tree, and the statements that run it: point reads and
//! streaming scans on any connection, and the writer's statements held for a whole group.
//!
//! Every statement goes through the table map of [`super::tables`]: a shared tree's
//! keys are stored with their `0xFF tree` prefix, which a scan strips again.

use std::cell::RefCell;

use rusqlite::{params, CachedStatement, Connection};

use super::conn::err;
use super::tables::{large_values, shared, stored_key, SHARED_MARK, SHARED_TABLE, TREES};
use crate::store::engine::{BatchOp, EngineError, Reader, Tree};
use crate::store::trees::T_BYID;

/// The SQL of each tree, built once.
pub(super) struct TreeSql {
    get: String,
    scan_to: String,
    scan_all: String,
    put: String,
    del: String,
}

pub(super) fn tree_sql() -> Vec<TreeSql> {
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

pub(super) fn get_on(
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

pub(super) fn scan_on(
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
pub(super) struct GroupStatements<'c> {
    conn: &'c Connection,
    sql: &'c [TreeSql],
    /// Indexed by `tree * 3 + kind` (get, put, delete).
    held: RefCell<Vec<Option<CachedStatement<'c>>>>,
}

const GET: usize = 0;
const PUT: usize = 1;
const DEL: usize = 2;

impl<'c> GroupStatements<'c> {
    pub(super) fn new(conn: &'c Connection, sql: &'c [TreeSql]) -> Self {
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

    pub(super) fn write(&self, batch: &[BatchOp]) -> Result<(), EngineError> {
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
pub(super) struct ConnReader<'s, 'c>(pub(super) &'s GroupStatements<'c>);

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
