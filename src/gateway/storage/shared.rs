//! The part of the gateway's state that replicas share (PROTOCOL §12, a database-backed
//! state): liveness every replica sees, notices of what other replicas committed, the
//! replay window of node requests, fresh peer rows. Only a state other processes share
//! implements it ([`super::GatewayState::replicas`]); a state one process writes (the
//! embedded store) has none of it, and the gateway keeps those things in its own memory
//! — so no caller can ask a one-process state a replicas' question, and no
//! implementation answers one with a made-up value. (Events every engine keeps:
//! [`super::EventTable`].)

use super::{Fut, NodeSeen, Notice};

/// What replicas sharing one state share: [`super::GatewayState::replicas`].
pub trait SharedState: Send + Sync {
    /// A lookup of `node_id` missed: this replica's copy of the trust store may lag the
    /// database other processes write; bring that peer's entry up to date.
    fn refresh_peer<'a>(&'a self, node_id: &'a str) -> Fut<'a, ()>;

    /// `node` was heard from at `now_ms`; true when it was not online
    /// before (exactly one replica gets true for one transition).
    fn node_heard<'a>(&'a self, node: &'a str, now_ms: u64) -> Fut<'a, bool>;

    /// This replica holds long-polls of `nodes` (so they are heard from
    /// at `now_ms`) until at least `until_ms`.
    fn nodes_polling(&self, nodes: Vec<String>, now_ms: u64, until_ms: u64) -> Fut<'_, ()>;

    /// The long-poll of `node` this replica claimed until `until_ms`
    /// ended because its connection closed: the claim ends at `now_ms`, unless a newer
    /// poll (any replica's) has claimed a later time since.
    fn poll_abandoned<'a>(&'a self, node: &'a str, until_ms: u64, now_ms: u64) -> Fut<'a, ()>;

    /// Mark offline the nodes online but not heard from since `silent_since_ms`
    /// and polled nowhere at `now_ms`; returns them (each transition to exactly one replica).
    fn sweep_offline(&self, silent_since_ms: u64, now_ms: u64) -> Fut<'_, Vec<String>>;

    /// What every replica knows of these nodes.
    fn nodes_seen<'a>(
        &'a self,
        nodes: &'a [String],
    ) -> Fut<'a, std::collections::HashMap<String, NodeSeen>>;

    /// What other replicas commit, as it happens.
    fn notices(&self) -> tokio::sync::broadcast::Receiver<Notice>;

    /// Record a node request's signature until `keep_until_ms`; false when it was seen
    /// before by any replica sharing this state.
    fn first_use<'a>(&'a self, signature: &'a [u8; 64], keep_until_ms: u64) -> Fut<'a, bool>;
}
