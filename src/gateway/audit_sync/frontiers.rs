//! Audit sync's own state: the frontier of each node's audit copy (only `audit_sync`
//! reads or writes it; the gateway builds it once, for its engine).

use std::collections::HashMap;

use crate::audit::Frontier;

/// Audit sync's own state: each node's frontier, loaded lazily from the state; the lock
/// also serialises audit uploads per gateway so two cannot interleave. Whether other
/// replicas extend the same copies is fixed when the gateway is assembled: then a
/// cached frontier is checked against the state's size before it is trusted.
pub(in crate::gateway) struct Frontiers {
    cache: tokio::sync::Mutex<HashMap<String, Frontier>>,
    shared: bool,
}

impl Frontiers {
    pub(in crate::gateway) fn new(shared: bool) -> Self {
        Self {
            cache: tokio::sync::Mutex::new(HashMap::new()),
            shared,
        }
    }
}

impl Frontiers {
    pub(super) async fn lock(&self) -> tokio::sync::MutexGuard<'_, HashMap<String, Frontier>> {
        self.cache.lock().await
    }

    /// Other replicas extend the same copies.
    pub(super) fn shared(&self) -> bool {
        self.shared
    }
}
