//! Liveness's own state (only `live` reads or writes it; the gateway builds it once, for
//! its engine): each node's last signed request and long-polls here, the long-polls'
//! wake-ups, the messages that went straight out, and — with replicas — the shared
//! state that holds every replica's view and when this one last wrote it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::gateway::liveness::Liveness;
use crate::gateway::storage::SharedState;

/// Per-node runtime state (not persisted: after a restart every node is `offline` until
/// it calls in, which is the truth as far as this process knows).
#[derive(Debug, Default)]
pub struct NodeLive {
    pub last_seen_ms: Option<u64>,
    pub polling: u32,
    pub online: bool,
    /// Its last long-poll here ended with the connection closed (the node went away),
    /// and it has not called since: not between two polls.
    pub left: bool,
}

/// A node nobody has heard from: offline, never seen, not polling.
pub const NOT_SEEN: (Liveness, Option<u64>, bool) = (Liveness::Offline, None, false);

/// What a node's long-polls held here wait on.
#[derive(Default)]
pub struct NodeWake {
    /// Something was queued for the node (or notices were missed): look at the queue.
    pub queued: Notify,
    /// A newer pull of the node began: older ones compare with `newest_pull`.
    pub pulled: Notify,
    /// The newest pull number of the node this replica knows of.
    pub newest_pull: AtomicU64,
}

/// Liveness's state, one per gateway.
pub(in crate::gateway) struct LiveTable {
    pub(super) nodes: Mutex<HashMap<String, NodeLive>>,
    pub(super) wake: Mutex<HashMap<String, Arc<NodeWake>>>,
    /// Messages enqueued while their node was connected: acked as `was_stored: false`.
    pub(super) sent: Mutex<HashSet<String>>,
    pub(super) mode: Mode,
}

/// Where liveness is shared, chosen when the gateway is assembled.
pub(super) enum Mode {
    /// One process: this memory is the whole truth.
    Local,
    /// Replicas: every replica's view is the shared state's, written at most once a
    /// second per node by each (`heard_at`: when this replica last wrote each node).
    Shared {
        store: Arc<dyn SharedState>,
        heard_at: Mutex<HashMap<String, u64>>,
    },
}

impl LiveTable {
    pub(in crate::gateway) fn new(shared: Option<Arc<dyn SharedState>>) -> Self {
        Self {
            nodes: Mutex::new(HashMap::new()),
            wake: Mutex::new(HashMap::new()),
            sent: Mutex::new(HashSet::new()),
            mode: match shared {
                Some(store) => Mode::Shared {
                    store,
                    heard_at: Mutex::new(HashMap::new()),
                },
                None => Mode::Local,
            },
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
