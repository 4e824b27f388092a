//! Liveness at the gateway (PROTOCOL §12): which nodes were heard from and when, which
//! hold a long-poll here, and — with replicas — what every replica sees, through the
//! shared state. `super::liveness` classifies; this keeps the facts.

pub(super) mod table;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::events::GatewayEvent;
use super::liveness::{classify, Liveness};
use super::state::Gateway;
use table::{lock, Mode, NodeWake};
pub use table::{NodeLive, NOT_SEEN};

/// Shared state: a replica writes a node's "heard from" at most this often.
const HEARD_EVERY_MS: u64 = 1_000;
/// Shared state: a replica's "I hold a long-poll of it" lasts the poll's wait and this
/// much more (written once, when the poll starts: refreshing every held poll each
/// second was 1,000 row updates a second per replica in the fleet simulation).
const POLLING_GRACE_MS: u64 = 3_000;

impl Gateway {
    /// A signed request from `node_id` arrived: update liveness, emit `node_online` on
    /// the transition.
    pub async fn seen(&self, node_id: &str) {
        let now = self.now_ms();
        let became_online = {
            let mut g = lock(&self.live.nodes);
            let e = g.entry(node_id.to_string()).or_default();
            e.last_seen_ms = Some(now);
            e.left = false;
            let was = e.online;
            e.online = true;
            !was
        };
        if let Mode::Shared {
            store: replicas,
            heard_at,
        } = &self.live.mode
        {
            // Every replica's view is the database's: written at most once a second per
            // node and replica; the transition is reported by the one replica that made it.
            let due = {
                let mut g = lock(heard_at);
                let due = g
                    .get(node_id)
                    .is_none_or(|t| now.saturating_sub(*t) >= HEARD_EVERY_MS);
                if due {
                    g.insert(node_id.to_string(), now);
                }
                due
            };
            if due {
                match replicas.node_heard(node_id, now).await {
                    Ok(true) => {
                        tracing::info!(event = "node_online", node_id);
                        self.publish(GatewayEvent::NodeOnline {
                            node_id: node_id.to_string(),
                        });
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(event = "liveness_not_written", error = %e),
                }
            }
            return;
        }
        if became_online {
            tracing::info!(event = "node_online", node_id);
            self.publish(GatewayEvent::NodeOnline {
                node_id: node_id.to_string(),
            });
        }
    }

    /// Shared state: tell the other replicas that this one holds a long-poll of `node`
    /// for up to `wait_ms` (at the pull's start). Returns the claim written, for
    /// [`Gateway::poll_abandoned`].
    pub(super) async fn share_polling(&self, node: &str, wait_ms: u64) -> Option<u64> {
        let Mode::Shared {
            store: replicas, ..
        } = &self.live.mode
        else {
            return None;
        };
        let now = self.now_ms();
        let until = now + wait_ms + POLLING_GRACE_MS;
        match replicas
            .nodes_polling(vec![node.to_string()], now, until)
            .await
        {
            Ok(()) => Some(until),
            Err(e) => {
                tracing::warn!(event = "liveness_not_written", error = %e);
                None
            }
        }
    }

    /// Liveness, last heard and "holding a long-poll" of each node, as every replica
    /// sees them (this one's memory, merged with the shared state's view).
    pub(super) async fn liveness_of(
        &self,
        nodes: &[String],
    ) -> HashMap<String, (Liveness, Option<u64>, bool)> {
        let now = self.now_ms();
        let shared = if let Mode::Shared {
            store: replicas, ..
        } = &self.live.mode
        {
            replicas.nodes_seen(nodes).await.unwrap_or_else(|e| {
                tracing::warn!(event = "liveness_unreadable", error = %e);
                HashMap::new()
            })
        } else {
            HashMap::new()
        };
        let g = lock(&self.live.nodes);
        nodes
            .iter()
            .map(|id| {
                let local = g.get(id);
                let db = shared.get(id).copied().unwrap_or_default();
                let last = local.and_then(|e| e.last_seen_ms).max(db.last_seen_ms);
                let polling = local.is_some_and(|e| e.polling > 0) || db.polling_until_ms > now;
                (id.clone(), (classify(last, polling, now), last, polling))
            })
            .collect()
    }

    /// Can `node` be handed a message this moment (polling at any replica, or between
    /// two polls)?
    pub(super) async fn reachable(&self, node_id: &str) -> bool {
        let now = self.now_ms();
        let ids = [node_id.to_string()];
        let (_, last, polling) = self
            .liveness_of(&ids)
            .await
            .get(node_id)
            .copied()
            .unwrap_or(NOT_SEEN);
        let left = lock(&self.live.nodes).get(node_id).is_some_and(|e| e.left);
        super::liveness::reachable_now(last, polling, left, now)
    }

    /// Is `node` online at any replica?
    pub(super) async fn online(&self, node_id: &str) -> bool {
        let ids = [node_id.to_string()];
        self.liveness_of(&ids)
            .await
            .get(node_id)
            .is_some_and(|l| l.0 == Liveness::Online)
    }

    pub(super) fn poll_started(&self, node_id: &str) {
        let mut g = lock(&self.live.nodes);
        let e = g.entry(node_id.to_string()).or_default();
        e.polling += 1;
        e.left = false;
    }

    /// A long-poll was answered: the node is between two polls.
    pub(super) fn poll_ended(&self, node_id: &str) {
        let now = self.now_ms();
        let mut g = lock(&self.live.nodes);
        let e = g.entry(node_id.to_string()).or_default();
        e.polling = e.polling.saturating_sub(1);
        e.last_seen_ms = Some(now);
    }

    /// A long-poll ended unanswered because its connection closed (the node went away,
    /// or gave up on it): not polling, and not between two polls either. A shared
    /// state's claim `claimed_until_ms` (from [`Gateway::share_polling`]) is withdrawn
    /// unless a newer poll replaced it.
    pub(super) fn poll_abandoned(self: &Arc<Self>, node_id: &str, claimed_until_ms: Option<u64>) {
        {
            let mut g = lock(&self.live.nodes);
            let e = g.entry(node_id.to_string()).or_default();
            e.polling = e.polling.saturating_sub(1);
            e.left = e.polling == 0;
        }
        let (Some(until), Ok(rt)) = (claimed_until_ms, tokio::runtime::Handle::try_current())
        else {
            return;
        };
        // Called from a drop, so the one small write runs on its own; it is bookkeeping
        // (a lost one leaves the claim to run out, as before).
        let (gw, node) = (self.clone(), node_id.to_string());
        rt.spawn(async move {
            let now = gw.now_ms();
            let Mode::Shared {
                store: replicas, ..
            } = &gw.live.mode
            else {
                return;
            };
            if let Err(e) = replicas.poll_abandoned(&node, until, now).await {
                tracing::warn!(event = "liveness_not_written", error = %e);
            }
        });
    }

    /// Holding a long-poll right now: a message queued now goes out at once.
    pub(super) fn polling(&self, node_id: &str) -> bool {
        lock(&self.live.nodes)
            .get(node_id)
            .is_some_and(|e| e.polling > 0)
    }

    /// Emit `node_offline` for nodes that stopped being online (called by the sweeper).
    pub(super) async fn check_offline(&self) {
        let now = self.now_ms();
        if let Mode::Shared {
            store: replicas, ..
        } = &self.live.mode
        {
            let silent_since = now.saturating_sub(super::liveness::ONLINE_MS);
            match replicas.sweep_offline(silent_since, now).await {
                Ok(gone) => {
                    for node_id in gone {
                        tracing::warn!(event = "node_offline", node_id = %node_id);
                        self.publish(GatewayEvent::NodeOffline { node_id });
                    }
                }
                Err(e) => tracing::warn!(event = "liveness_sweep_failed", error = %e),
            }
            return;
        }
        let gone: Vec<String> = {
            let mut g = lock(&self.live.nodes);
            g.iter_mut()
                .filter(|(_, e)| {
                    e.online && classify(e.last_seen_ms, e.polling > 0, now) != Liveness::Online
                })
                .map(|(id, e)| {
                    e.online = false;
                    id.clone()
                })
                .collect()
        };
        for node_id in gone {
            tracing::warn!(event = "node_offline", node_id = %node_id);
            self.publish(GatewayEvent::NodeOffline { node_id });
        }
    }

    pub(super) fn waker(&self, node_id: &str) -> Arc<NodeWake> {
        lock(&self.live.wake)
            .entry(node_id.to_string())
            .or_default()
            .clone()
    }

    /// Wake every long-poll (after notices may have been missed): each looks again.
    pub(super) fn wake_all(&self) {
        for w in lock(&self.live.wake).values() {
            w.queued.notify_waiters();
        }
    }

    /// Wake a node's long-polls: something was queued for it.
    pub(super) fn wake_node(&self, node_id: &str) {
        self.waker(node_id).queued.notify_waiters();
    }

    /// Pull number `pull` of `node_id` began (here or at another replica): the node's
    /// older long-polls held here answer empty without asking the store.
    pub(super) fn pull_begun(&self, node_id: &str, pull: u64) {
        let w = self.waker(node_id);
        if w.newest_pull.fetch_max(pull, Ordering::AcqRel) < pull {
            w.pulled.notify_waiters();
        }
    }

    pub(super) fn mark_live_sent(&self, message_id: &str) {
        let mut g = lock(&self.live.sent);
        if g.len() > 100_000 {
            g.clear();
        }
        g.insert(message_id.to_string());
    }

    /// `was_stored` for an acked message: false only if the node was holding a
    /// long-poll when it was enqueued (it went straight out); true if it waited.
    /// [`Gateway::take_was_stored`] without forgetting it (before the ack commits).
    pub(super) fn was_stored(&self, message_id: &str) -> bool {
        !lock(&self.live.sent).contains(message_id)
    }

    pub(super) fn take_was_stored(&self, message_id: &str) -> bool {
        !lock(&self.live.sent).remove(message_id)
    }
}
