//! Node authentication's own state: the window of request signatures already seen
//! (only `node_auth` reads or writes it; the gateway builds it once, for its engine).

use std::sync::{Arc, Mutex};

use crate::envelope::{SeenSignatures, VerifiedRequest};
use crate::gateway::storage::{SharedState, StateError};

/// Node authentication's own state: the signatures of requests already seen, kept as
/// long as their timestamps can pass the check. One body per engine, chosen when the
/// gateway is assembled: one process keeps its window in memory; replicas keep it in
/// the state they share (every replica must refuse a replay another one saw).
pub(in crate::gateway) enum ReplayWindow {
    Local(Mutex<SeenSignatures>),
    Shared(Arc<dyn SharedState>),
}

impl ReplayWindow {
    pub(in crate::gateway) fn new(shared: Option<Arc<dyn SharedState>>, skew_ms: u64) -> Self {
        match shared {
            Some(s) => Self::Shared(s),
            None => Self::Local(Mutex::new(SeenSignatures::new(skew_ms, 1_000_000))),
        }
    }

    /// Record `v`'s signature; `false` if it was seen before.
    pub(super) async fn first_use(
        &self,
        v: &VerifiedRequest,
        now_ms: u64,
        keep_until_ms: u64,
    ) -> Result<bool, StateError> {
        match self {
            Self::Local(seen) => Ok(seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(v, now_ms)
                .is_ok()),
            Self::Shared(s) => s.first_use(&v.signature, keep_until_ms).await,
        }
    }

    pub(super) fn prune(&self, now_ms: u64) {
        if let Self::Local(seen) = self {
            seen.lock().unwrap_or_else(|p| p.into_inner()).prune(now_ms);
        }
    }
}
