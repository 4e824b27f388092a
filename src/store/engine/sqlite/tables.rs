//! Which table holds each tree, and how its rows look (file layout 3).
//!
//! WAL writes every page a commit touches whole (and the checkpoint writes it again), so
//! bytes written per message are set by how many pages a commit dirties. Each tree gets
//! its own table so its pages stay dense, in one of two shapes:
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
//! Creating the tables, and bringing an older file to this layout, is
//! [`super::layout`]'s job.

use crate::store::engine::Tree;
use crate::store::trees::{T_BYID, T_META};

/// Tree ids are `0..TREES`; table `t<N>` is created for each when the store is (`t1` and
/// `t8`, meta's and the counters', stay empty: they share `t3`, see [`shared`]).
pub(super) const TREES: usize = 32;

/// Trees whose values are large records (see the module docs).
pub(super) fn large_values(tree: Tree) -> bool {
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
pub(super) fn shared(tree: Tree) -> bool {
    use crate::store::trees::T_COUNT;
    matches!(tree, T_META | T_COUNT)
}
/// The table the shared trees live in: the id tree's.
pub(super) const SHARED_TABLE: usize = T_BYID as usize;
/// First byte of a shared tree's keys; no key of the id tree itself starts with it.
pub(super) const SHARED_MARK: u8 = 0xFF;

/// The key as stored: `0xFF tree key` for a shared tree.
pub(super) fn stored_key(tree: Tree, key: &[u8]) -> std::borrow::Cow<'_, [u8]> {
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
