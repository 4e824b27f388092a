//! Gateway events (`GET /v1/events`): each event gets an id, increasing in the order
//! events happened, so a dashboard that reconnects — to this gateway or, with replicas
//! on a database, to another — sends `Last-Event-ID` and is replayed what it missed.
//! Also the in-process signal that a result arrived, so a `POST /v1/tool_call` that
//! waits needs no polling.
//!
//! Two modes:
//! - **local** (the embedded store): ids are assigned here; the last [`REPLAY`] events
//!   are kept in memory for resuming subscribers.
//! - **shared** (PostgreSQL): [`EventLog::publish`] hands the event to a writer that
//!   commits it to the database's `events` table (ids assigned there, in commit
//!   order); subscribers of every replica are fed from that table as it grows
//!   ([`EventLog::deliver`]), so each sees every replica's events, once, in one order.
//!
//! A slow subscriber that falls more than the channel capacity behind loses events
//! (it gets a `lagged` event saying how many, and may reconnect with its last id);
//! the gateway itself never blocks on one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc};

use super::storage::SharedState;

/// Capacity of the broadcast ring; see the module docs for what happens past it.
pub const CAPACITY: usize = 1024;
/// Events kept in memory for subscribers that resume with `Last-Event-ID`.
pub const REPLAY: usize = 4096;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GatewayEvent {
    Queued {
        message_id: String,
        node_id: String,
        payload_type: String,
        expires_at_ms: u64,
    },
    Delivered {
        message_id: String,
        node_id: String,
        was_stored: bool,
    },
    Expired {
        message_id: String,
        node_id: String,
        reason: String,
    },
    Rejected {
        message_id: String,
        node_id: String,
        code: String,
    },
    Dead {
        message_id: String,
        node_id: String,
    },
    Result {
        message_id: String,
        job_id: String,
        node_id: String,
        ok: bool,
    },
    /// A token id was added to the revocation list (by `POST /v1/revocations` or the
    /// console), by the token subject `by`.
    Revoked {
        jti: String,
        version: u64,
        by: String,
    },
    NodeOnline {
        node_id: String,
    },
    NodeOffline {
        node_id: String,
    },
    /// An enrollment arrived or was decided: `outcome` is `enrolled`, `pending`,
    /// `approved`, `rejected` or `refused`; `detail` the kind (`new`, `rekey`) or the
    /// refusal's code.
    Enrollment {
        node_id: String,
        outcome: String,
        detail: String,
    },
    /// An operator retired the node; `messages` queued for it were refused.
    NodeRevoked {
        node_id: String,
        messages: u64,
    },
    /// The node replaced its key pair (PROTOCOL §15.7); `sign_pk` is the new key.
    NodeRotated {
        node_id: String,
        sign_pk: String,
    },
    /// An audit upload of the node was refused (`audit_gap`, `audit_mismatch`): its log
    /// and the gateway's copy disagree — an alarm until the copy grows past
    /// `confirmed_size` (an upload extended it again).
    AuditRefused {
        node_id: String,
        code: String,
        confirmed_size: u64,
    },
    /// An admin changed the node's labels (PROTOCOL §16.1); `labels` as they are now.
    LabelsChanged {
        node_id: String,
        labels: crate::fleet::Labels,
        by: String,
    },
    /// An admin wrote desired version `version` of the node (PROTOCOL §16.4).
    DesiredSet {
        node_id: String,
        version: u64,
        by: String,
    },
    /// The node reported state version `version`; `in_sync` with its desired state.
    StateReported {
        node_id: String,
        version: u64,
        in_sync: bool,
    },
    /// The node's inventory moved (PROTOCOL §16.3).
    InventoryChanged {
        node_id: String,
        agent_version: String,
    },
    /// A rollout's counts moved (at most one a second per rollout; PROTOCOL §17).
    RolloutProgress {
        rollout_id: String,
        state: super::storage::rollouts::State,
        phase: usize,
        counts: super::storage::rollouts::Counts,
    },
    /// Failures reached the rollout's error threshold: nothing more is sent.
    RolloutHalted {
        rollout_id: String,
        failed: u64,
        of: u64,
    },
    /// The rollout ended: `completed` or `cancelled`.
    RolloutCompleted {
        rollout_id: String,
        state: super::storage::rollouts::State,
    },
}

impl GatewayEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Queued { .. } => "queued",
            Self::Delivered { .. } => "delivered",
            Self::Expired { .. } => "expired",
            Self::Rejected { .. } => "rejected",
            Self::Dead { .. } => "dead",
            Self::Result { .. } => "result",
            Self::Revoked { .. } => "revoked",
            Self::NodeOnline { .. } => "node_online",
            Self::NodeOffline { .. } => "node_offline",
            Self::Enrollment { .. } => "enrollment",
            Self::NodeRevoked { .. } => "node_revoked",
            Self::NodeRotated { .. } => "node_rotated",
            Self::AuditRefused { .. } => "audit_refused",
            Self::LabelsChanged { .. } => "labels_changed",
            Self::DesiredSet { .. } => "desired_set",
            Self::StateReported { .. } => "state_reported",
            Self::InventoryChanged { .. } => "inventory_changed",
            Self::RolloutProgress { .. } => "rollout_progress",
            Self::RolloutHalted { .. } => "rollout_halted",
            Self::RolloutCompleted { .. } => "rollout_completed",
        }
    }

    /// One SSE frame: `event: <name>` and the JSON (with `type` and `ts_ms`) as data.
    /// The event as one SSE frame (`id`, `event`, `data` with `ts_ms` added).
    pub fn sse_frame(&self, id: u64, ts_ms: u64) -> String {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("ts_ms".into(), ts_ms.into());
        }
        format!("id: {id}\nevent: {}\ndata: {}\n\n", self.name(), v)
    }
}

/// An event with its id and time.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: u64,
    pub ts_ms: u64,
    pub event: GatewayEvent,
}

impl Event {
    pub fn sse_frame(&self) -> String {
        self.event.sse_frame(self.id, self.ts_ms)
    }
}

/// The gateway's events: ids, the in-memory replay ring, the fan-out to subscribers,
/// and (shared mode) the hand-off to the database writer.
pub struct EventLog {
    tx: broadcast::Sender<Arc<Event>>,
    ring: Mutex<VecDeque<Arc<Event>>>,
    /// Shared mode: events go to the database writer, not straight to subscribers.
    writer: Option<mpsc::UnboundedSender<ToWriter>>,
    /// Shared mode: the replicas' state, where a resuming subscriber finds what memory
    /// no longer holds.
    replicas: Option<Arc<dyn SharedState>>,
}

/// The events of one write ([`EventLog::stage`]).
#[derive(Debug)]
pub struct Staged {
    ts_ms: u64,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// Published from memory after the write.
    Local(Vec<(String, GatewayEvent)>),
    /// Each event's JSON under its key, committed with the write (taken by it).
    Shared(Vec<(String, String)>),
}

impl Staged {
    /// What the write commits with itself: `(ts_ms, [(key, event as JSON)])` in shared
    /// mode; `None` where events live in memory (the embedded engine keeps none).
    pub fn take_rows(&mut self) -> Option<(u64, Vec<(String, String)>)> {
        match &mut self.kind {
            Kind::Shared(rows) => Some((self.ts_ms, std::mem::take(rows))),
            Kind::Local(_) => None,
        }
    }

    /// [`Self::take_rows`] of a write that causes one event.
    pub fn take_row(&mut self) -> Option<(u64, String)> {
        let (ts, rows) = self.take_rows()?;
        rows.into_iter().next().map(|(_, json)| (ts, json))
    }
}

/// What the shared-mode writer receives.
#[derive(Debug)]
pub enum ToWriter {
    Event(u64, GatewayEvent),
    /// Answer once everything sent before it is committed.
    Flush(tokio::sync::oneshot::Sender<()>),
    /// Events were committed with a write: give them their ids soon.
    Sequence,
}

impl EventLog {
    /// Local mode: ids assigned here, starting after `first_id - 1` (the start time in
    /// microseconds, so ids keep growing across restarts while the clock does).
    pub fn local(first_id: u64) -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        let mut ring = VecDeque::new();
        // A sentinel below every real id keeps "the newest id" in one place.
        ring.push_back(Arc::new(Event {
            id: first_id.saturating_sub(1),
            ts_ms: 0,
            event: GatewayEvent::NodeOffline {
                node_id: String::new(),
            },
        }));
        Self {
            tx,
            ring: Mutex::new(ring),
            writer: None,
            replicas: None,
        }
    }

    /// The events one write causes, each under the key of the row it describes (a
    /// message id), made before the write. The flow hands [`Staged::rows`] to the write
    /// and [`Self::committed`] the result after it, whichever mode this log is in.
    pub fn stage(
        &self,
        ts_ms: u64,
        events: impl IntoIterator<Item = (String, GatewayEvent)>,
    ) -> Result<Staged, serde_json::Error> {
        let events = events.into_iter();
        let kind = match &self.writer {
            Some(_) => Kind::Shared(
                events
                    .map(|(key, e)| serde_json::to_string(&e).map(|json| (key, json)))
                    .collect::<Result<_, _>>()?,
            ),
            None => Kind::Local(events.collect()),
        };
        Ok(Staged { ts_ms, kind })
    }

    /// After the write of `staged`: the events of the rows it wrote (`wrote(key)`) are
    /// published. Locally that is here, from memory; in shared mode the write committed
    /// them in its own transaction, and the writer gives them their ids.
    pub fn committed(&self, staged: Staged, wrote: impl Fn(&str) -> bool) {
        match staged.kind {
            Kind::Shared(_) => self.sequence_soon(),
            Kind::Local(events) => {
                for (key, event) in events {
                    if wrote(&key) {
                        self.publish(staged.ts_ms, event);
                    }
                }
            }
        }
    }

    /// Shared mode: `publish` sends to `writer`; [`Self::deliver`] feeds subscribers;
    /// a resuming subscriber reads what memory lacks from `replicas`. Returns the
    /// receiving end for the writer task.
    pub fn shared(replicas: Arc<dyn SharedState>) -> (Self, mpsc::UnboundedReceiver<ToWriter>) {
        let (tx, _) = broadcast::channel(CAPACITY);
        let (wtx, wrx) = mpsc::unbounded_channel();
        (
            Self {
                tx,
                ring: Mutex::new(VecDeque::new()),
                writer: Some(wtx),
                replicas: Some(replicas),
            },
            wrx,
        )
    }

    /// The events after `after` a resuming subscriber missed: from memory, and in
    /// shared mode from the replicas' state when memory does not reach back that far.
    pub async fn missed(&self, after: u64) -> Missed {
        let (mut kept, complete) = self.replay(after);
        let replicas = match &self.replicas {
            Some(r) if !complete => r,
            _ => {
                return Missed {
                    lagged: !complete,
                    events: kept,
                }
            }
        };
        match replicas.events_after(after, REPLAY).await {
            Ok(rows) => {
                let mut events = Vec::with_capacity(rows.len() + kept.len());
                let mut last = after;
                for (id, ts_ms, json) in rows {
                    match serde_json::from_str::<GatewayEvent>(&json) {
                        Ok(event) => events.push(Arc::new(Event { id, ts_ms, event })),
                        Err(e) => tracing::warn!(event = "stored_event_unreadable", id, error = %e),
                    }
                    last = last.max(id);
                }
                kept.retain(|e| e.id > last);
                events.extend(kept);
                Missed {
                    lagged: false,
                    events,
                }
            }
            Err(e) => {
                tracing::warn!(event = "events_replay_failed", error = %e);
                Missed {
                    lagged: true,
                    events: kept,
                }
            }
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Event>>> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn publish(&self, ts_ms: u64, ev: GatewayEvent) {
        tracing::debug!(event = "gateway_event", kind = ev.name());
        if let Some(w) = &self.writer {
            let _ = w.send(ToWriter::Event(ts_ms, ev));
            return;
        }
        let e = {
            let mut ring = self.ring();
            let id = ring.back().map_or(1, |l| l.id + 1);
            let e = Arc::new(Event {
                id,
                ts_ms,
                event: ev,
            });
            ring.push_back(e.clone());
            while ring.len() > REPLAY {
                ring.pop_front();
            }
            e
        };
        let _ = self.tx.send(e);
    }

    /// Shared mode: events read back from the database, in id order; those not yet
    /// delivered go to subscribers.
    pub fn deliver(&self, events: Vec<Event>) {
        for e in events {
            let e = Arc::new(e);
            {
                let mut ring = self.ring();
                if ring.back().is_some_and(|l| l.id >= e.id) {
                    continue;
                }
                ring.push_back(e.clone());
                while ring.len() > REPLAY {
                    ring.pop_front();
                }
            }
            let _ = self.tx.send(e);
        }
    }

    /// Shared mode: resolves once every event published before is committed (so an
    /// answer that follows it never outruns its events). `None` in local mode.
    pub fn flushed(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let w = self.writer.as_ref()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        w.send(ToWriter::Flush(tx)).ok()?;
        Some(rx)
    }

    /// Shared mode: events were committed with a write (without ids); have the writer
    /// sequence them.
    pub fn sequence_soon(&self) {
        if let Some(w) = &self.writer {
            let _ = w.send(ToWriter::Sequence);
        }
    }

    /// The newest id delivered to subscribers (0 = none yet).
    pub fn last_id(&self) -> u64 {
        self.ring().back().map_or(0, |e| e.id)
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Events after `after` still in memory, oldest first, and whether the memory
    /// reaches back that far (false: some were dropped from the ring).
    pub fn replay(&self, after: u64) -> (Vec<Arc<Event>>, bool) {
        let ring = self.ring();
        let complete = ring
            .front()
            .is_some_and(|f| f.id <= after.saturating_add(1))
            || ring.is_empty();
        (
            ring.iter()
                .filter(|e| e.id > after && !e.event.is_sentinel())
                .cloned()
                .collect(),
            complete,
        )
    }
}

impl GatewayEvent {
    fn is_sentinel(&self) -> bool {
        matches!(self, GatewayEvent::NodeOffline { node_id } if node_id.is_empty())
    }
}

/// What a subscriber resuming after an event id missed ([`EventLog::missed`]).
pub struct Missed {
    /// Some events are gone for good (memory does not reach back, and no shared state
    /// could be read): the subscriber must be told it lagged.
    pub lagged: bool,
    /// The events it can still get, oldest first.
    pub events: Vec<Arc<Event>>,
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
