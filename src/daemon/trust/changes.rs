//! The pure part of the trust rows: a change-log entry and its bytes, what a reader that
//! holds a copy applies to it, and how far the log is cut back. No I/O.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::envelope::{Peer, TrustStore};

/// One peer changed: as it is now, or `None` when it is no longer trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub id: String,
    pub peer: Option<Peer>,
}

impl Change {
    pub fn put(peer: Peer) -> Self {
        Self {
            id: peer.address(),
            peer: Some(peer),
        }
    }

    pub fn remove(id: &str) -> Self {
        Self {
            id: id.to_string(),
            peer: None,
        }
    }

    /// Peer `id` as `t` holds it (a removal when it holds none).
    pub fn of(t: &TrustStore, id: &str) -> Self {
        Self {
            id: id.to_string(),
            peer: t.get(id).cloned(),
        }
    }
}

/// What a trust source answers a holder whose copy is out of date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Every peer (nothing held yet, the holder fell behind the change log, or the
    /// source keeps no log).
    Full(TrustStore),
    /// Only the peers changed since the holder's version, each as it is now.
    Changed(Vec<Change>),
}

impl Update {
    /// The copy after this update, from the copy held before it.
    pub fn apply_to(self, held: &mut TrustStore) {
        match self {
            Update::Full(t) => *held = t,
            Update::Changed(changes) => apply(held, changes),
        }
    }
}

/// Apply `changes` in order: each peer put whole (its rotation history included), each
/// removal gone.
pub fn apply(t: &mut TrustStore, changes: Vec<Change>) {
    for c in changes {
        match c.peer {
            Some(p) => t.insert(p),
            None => {
                t.remove(&c.id);
            }
        }
    }
}

/// One entry of the change log: which peer, put or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Put(String),
    Removed(String),
}

impl Entry {
    /// `+id` or `-id`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (sign, id) = match self {
            Entry::Put(id) => (b'+', id),
            Entry::Removed(id) => (b'-', id),
        };
        let mut out = Vec::with_capacity(id.len() + 1);
        out.push(sign);
        out.extend_from_slice(id.as_bytes());
        out
    }

    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let (sign, id) = b.split_first()?;
        let id = std::str::from_utf8(id).ok().filter(|s| !s.is_empty())?;
        match sign {
            b'+' => Some(Entry::Put(id.to_string())),
            b'-' => Some(Entry::Removed(id.to_string())),
            _ => None,
        }
    }
}

/// What entries, oldest first, leave to read: per id, `true` when its last entry put it
/// (its row is read as it is now), `false` when it removed it. An id entered many times
/// is read once.
pub fn last_per_id(entries: impl IntoIterator<Item = Entry>) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    for e in entries {
        match e {
            Entry::Put(id) => out.insert(id, true),
            Entry::Removed(id) => out.insert(id, false),
        };
    }
    out
}

/// Entries the log keeps at least: a reader that fell further behind reads every peer.
/// At the rate of an enrollment burst (tens a second) this is over a minute of changes,
/// and a running role reads them at least once a second.
pub const LOG_KEEP: u64 = 2_048;
/// Entries cut at once, so a writer cuts once every this many writes.
pub const LOG_CUT: u64 = 256;

/// How a writer bounds the log whose oldest entry is `oldest`: when the entry at
/// `probe` exists (the log holds more than [`LOG_KEEP`] + [`LOG_CUT`]; its numbers have
/// no gaps), the entries in `cut` go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub probe: u64,
    pub cut: Range<u64>,
}

pub fn bound(oldest: u64) -> Bound {
    Bound {
        probe: oldest.saturating_add(LOG_KEEP + LOG_CUT),
        cut: oldest..oldest.saturating_add(LOG_CUT),
    }
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;
