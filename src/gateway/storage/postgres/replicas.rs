//! What replicas sharing the database share beyond the queues ([`SharedState`]):
//! liveness, notices, the replay window, fresh peer rows.

use tokio::sync::broadcast;

use super::{live, Postgres};
use crate::gateway::storage::{Fut, NodeSeen, Notice, SharedState};

impl SharedState for Postgres {
    fn refresh_peer<'a>(&'a self, node_id: &'a str) -> Fut<'a, ()> {
        Box::pin(async move { self.refresh_peer_now(node_id).await })
    }

    fn first_use<'a>(&'a self, signature: &'a [u8; 64], keep_until_ms: u64) -> Fut<'a, bool> {
        Box::pin(async move { self.first_use_now(signature, keep_until_ms).await })
    }

    fn node_heard<'a>(&'a self, node: &'a str, now_ms: u64) -> Fut<'a, bool> {
        Box::pin(async move { live::heard(self, node, now_ms).await })
    }

    fn nodes_polling(&self, nodes: Vec<String>, now_ms: u64, until_ms: u64) -> Fut<'_, ()> {
        Box::pin(async move { live::polling(self, nodes, now_ms, until_ms).await })
    }

    fn poll_abandoned<'a>(&'a self, node: &'a str, until_ms: u64, now_ms: u64) -> Fut<'a, ()> {
        Box::pin(async move { live::poll_abandoned(self, node, until_ms, now_ms).await })
    }

    fn sweep_offline(&self, silent_since_ms: u64, now_ms: u64) -> Fut<'_, Vec<String>> {
        Box::pin(async move { live::sweep_offline(self, silent_since_ms, now_ms).await })
    }

    fn nodes_seen<'a>(
        &'a self,
        nodes: &'a [String],
    ) -> Fut<'a, std::collections::HashMap<String, NodeSeen>> {
        Box::pin(async move { live::seen(self, nodes).await })
    }

    fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }
}
