//! [`SharedState`] on the embedded store: one process writes it, so each answer is what
//! is true of one process — events live in the gateway's memory, liveness and the replay
//! window are the gateway's own, nothing is announced by anyone else. Plus the reads the
//! trait asks of every engine in bulk, and trust writes through the seam.

use std::collections::{HashMap, HashSet};

use super::Embedded;
use crate::envelope::TrustStore;
use crate::gateway::storage::{Fut, GatewayState, NodeSeen, Notice, SharedState, StateError};

impl SharedState for Embedded {
    fn refresh_peer<'a>(&'a self, _node_id: &'a str) -> Fut<'a, ()> {
        // The trust record is read whole on every change (its fingerprint moves).
        Box::pin(async { Ok(()) })
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn append_events(&self, _events: Vec<(u64, String)>) -> Fut<'_, u64> {
        Box::pin(async {
            Err(StateError::Unavailable(
                "the embedded gateway keeps its events in memory".into(),
            ))
        })
    }

    fn sequence_events(&self) -> Fut<'_, u64> {
        Box::pin(async { Ok(0) })
    }

    fn events_after(&self, _after: u64, _limit: usize) -> Fut<'_, Vec<(u64, u64, String)>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn node_heard<'a>(&'a self, _node: &'a str, _now_ms: u64) -> Fut<'a, bool> {
        // The gateway's own liveness map is the whole truth.
        Box::pin(async { Ok(false) })
    }

    fn nodes_polling(&self, _nodes: Vec<String>, _now_ms: u64, _until_ms: u64) -> Fut<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn poll_abandoned<'a>(&'a self, _node: &'a str, _until_ms: u64, _now_ms: u64) -> Fut<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn sweep_offline(&self, _silent_since_ms: u64, _now_ms: u64) -> Fut<'_, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn nodes_seen<'a>(&'a self, _nodes: &'a [String]) -> Fut<'a, HashMap<String, NodeSeen>> {
        Box::pin(async { Ok(HashMap::new()) })
    }

    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<Notice>> {
        None
    }

    fn first_use<'a>(&'a self, _signature: &'a [u8; 64], _keep_until_ms: u64) -> Fut<'a, bool> {
        // The gateway's in-memory window of signatures is the whole truth.
        Box::pin(async { Ok(true) })
    }
}

impl Embedded {
    pub(super) async fn uploads_seen_now(
        &self,
        message_ids: &[String],
    ) -> Result<HashSet<String>, StateError> {
        let mut seen = HashSet::new();
        for id in message_ids {
            if self.upload_seen(id).await? {
                seen.insert(id.clone());
            }
        }
        Ok(seen)
    }

    pub(super) async fn audit_sizes_now(
        &self,
        nodes: &[String],
    ) -> Result<HashMap<String, u64>, StateError> {
        let mut out = HashMap::new();
        for n in nodes {
            out.insert(n.clone(), self.audit_entries(n).await?.len() as u64);
        }
        Ok(out)
    }

    pub(super) async fn save_trust_now(&self, t: &TrustStore) -> Result<(), StateError> {
        let mut batch = crate::store::Batch::new();
        crate::daemon::trust::put(&mut batch, t);
        self.store.commit(batch).await?;
        Ok(())
    }
}
