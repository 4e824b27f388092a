//! The part of the gateway's state that replicas share (PROTOCOL §12, a database-backed
//! state): events in commit order, liveness every replica sees, notices of what other
//! replicas committed, the replay window of node requests. A state only one process
//! writes (the embedded store) answers each with what is true of one process; it says
//! so in its own implementation, none of it is a default here.

use super::{Fut, NodeSeen, Notice};

/// Shared state, which every [`super::GatewayState`] answers for.
pub trait SharedState: Send + Sync {
    /// A lookup of `node_id` missed: where this state's trust store is a copy that may
    /// lag (a database other processes write), bring that peer's entry up to date.
    fn refresh_peer<'a>(&'a self, node_id: &'a str) -> Fut<'a, ()>;
    /// True when other processes (replicas) share this state: events then live in it
    /// ([`Self::append_events`], [`Self::events_after`]).
    fn is_shared(&self) -> bool;

    /// Commit events (`(ts_ms, event as JSON)`) durably, still without ids
    /// ([`Self::sequence_events`] gives them theirs). With no events, returns the newest
    /// id given so far. Only called on a shared state.
    fn append_events(&self, events: Vec<(u64, String)>) -> Fut<'_, u64>;

    /// Give the committed events that have none their ids, in commit order across
    /// replicas (whichever replica committed them, including events committed with a
    /// message: [`super::ForNode::event`]), and announce them; returns how many. Only called on
    /// a shared state.
    fn sequence_events(&self) -> Fut<'_, u64>;

    /// Committed events after `after`, oldest first: `(id, ts_ms, event as JSON)`.
    fn events_after(&self, after: u64, limit: usize) -> Fut<'_, Vec<(u64, u64, String)>>;

    /// Shared state: `node` was heard from at `now_ms`; true when it was not online
    /// before (exactly one replica gets true for one transition).
    fn node_heard<'a>(&'a self, node: &'a str, now_ms: u64) -> Fut<'a, bool>;

    /// Shared state: this replica holds long-polls of `nodes` (so they are heard from
    /// at `now_ms`) until at least `until_ms`.
    fn nodes_polling(&self, nodes: Vec<String>, now_ms: u64, until_ms: u64) -> Fut<'_, ()>;

    /// Shared state: the long-poll of `node` this replica claimed until `until_ms`
    /// ended because its connection closed: the claim ends at `now_ms`, unless a newer
    /// poll (any replica's) has claimed a later time since.
    fn poll_abandoned<'a>(&'a self, node: &'a str, until_ms: u64, now_ms: u64) -> Fut<'a, ()>;

    /// Shared state: mark offline the nodes online but not heard from since `silent_since_ms`
    /// and polled nowhere at `now_ms`; returns them (each transition to exactly one replica).
    fn sweep_offline(&self, silent_since_ms: u64, now_ms: u64) -> Fut<'_, Vec<String>>;

    /// Shared state: what every replica knows of these nodes.
    fn nodes_seen<'a>(
        &'a self,
        nodes: &'a [String],
    ) -> Fut<'a, std::collections::HashMap<String, NodeSeen>>;

    /// What other replicas commit, as it happens; `None` for a state only this process
    /// writes.
    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<Notice>>;

    /// Record a node request's signature until `keep_until_ms`; false when it was seen
    /// before by any replica sharing this state. A state only this process writes
    /// answers true: the gateway's own in-memory window is then the whole truth.
    fn first_use<'a>(&'a self, signature: &'a [u8; 64], keep_until_ms: u64) -> Fut<'a, bool>;
}
