//! The events dashboards follow (`/v1/events`) as the gateway's state keeps them
//! ([`EventTable`]): committed with the write they describe (a queued message's
//! [`super::ForNode::event`], an ack's [`super::NodeAck::events`]) or on their own
//! ([`EventTable::append_events`]), given ids in commit order, read after an id, and
//! announced as they become readable. Every engine keeps them, so the gateway's event
//! log has one body whichever is underneath.

use super::Fut;

/// An event as the table keeps it: `(id, ts_ms, event as JSON)`.
pub type EventRow = (u64, u64, String);

/// The state's table of events ([`super::GatewayState::events`]).
///
/// Contract every engine keeps (the event log relies on it):
/// - Ids increase in commit order and follow each other (each is the previous one plus
///   one), so a reader that saw id `n` never later sees a smaller one appear, and one
///   that reads `n + 2` right after `n` knows `n + 1` is gone (older than the engine
///   keeps events).
/// - The rows a write carries are committed with it and only with what it wrote: none
///   for a duplicate enqueue, an ack's only for the ids it removed.
/// - How long events are kept is the engine's: PostgreSQL keeps a time window shared by
///   every replica; the embedded store keeps the newest few thousand in this process's
///   memory (a restart loses them, as it loses every subscriber).
pub trait EventTable: Send + Sync {
    /// Commit events (`(ts_ms, event as JSON)`, in this order) that no write carries.
    fn append_events(&self, events: Vec<(u64, String)>) -> Fut<'_, ()>;

    /// Give the committed events that have none their ids (whichever replica committed
    /// them), and announce them; returns how many got one now (an engine that gives ids
    /// at commit gives none here).
    fn sequence_events(&self) -> Fut<'_, u64>;

    /// Committed events after `after`, oldest first, at most `limit`.
    fn events_after(&self, after: u64, limit: usize) -> Fut<'_, Vec<EventRow>>;

    /// The newest id given so far (below the first id when none was).
    fn newest_event(&self) -> Fut<'_, u64>;

    /// The newest id announced readable, as this process heard: it changes when more
    /// events can be read (and, where announcements can be missed, when some may have
    /// been), so a reader waits on it instead of polling — and still looks about once a
    /// second, for an announcement lost on the way.
    fn events_announced(&self) -> tokio::sync::watch::Receiver<u64>;
}
