//! Every open connection, its state, and the cap.
//!
//! At the cap a new connection does not wait and is not refused while some connection is
//! merely *holding a slot*: the one to go is the least recently active connection with
//! no request in flight, preferring connections that never completed a request (what a
//! slowloris holds) over idle keep-alive ones. A request in flight (a node's long-poll,
//! an SSE stream, a slow tool call) is never evicted; only when every slot has one is a
//! new connection refused. Hitting the cap is logged once per episode, and the episode's
//! counts when it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::framing::Phase;
use crate::config::HttpLimits;

/// What one connection is doing, written by its own task, read by the table.
#[derive(Debug)]
pub struct ConnState(Mutex<Inner>);

#[derive(Debug)]
struct Inner {
    in_flight: u32,
    phase: Phase,
    phase_since: Instant,
    idle_since: Instant,
    served: u64,
}

/// Which limit closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    Header,
    Body,
    Idle,
}

impl Timeout {
    pub fn as_str(self) -> &'static str {
        match self {
            Timeout::Header => "header",
            Timeout::Body => "body",
            Timeout::Idle => "idle",
        }
    }
}

impl ConnState {
    pub fn new(now: Instant) -> Self {
        ConnState(Mutex::new(Inner {
            in_flight: 0,
            phase: Phase::Idle,
            phase_since: now,
            idle_since: now,
            served: 0,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_phase(&self, phase: Phase, now: Instant) {
        let mut s = self.lock();
        if s.phase != phase {
            s.phase = phase;
            s.phase_since = now;
        }
    }

    pub fn request_started(&self) {
        self.lock().in_flight += 1;
    }

    pub fn request_finished(&self, now: Instant) {
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        s.served += 1;
        if s.in_flight == 0 {
            s.idle_since = now;
        }
    }

    pub fn in_flight(&self) -> bool {
        self.lock().in_flight > 0
    }

    /// When this connection must be closed if nothing changes, and why. `None` while a
    /// request is in flight: its body has its own deadline, and long-polls must live.
    pub fn deadline(&self, l: &HttpLimits) -> Option<(Instant, Timeout)> {
        let s = self.lock();
        if s.in_flight > 0 {
            return None;
        }
        let base = s.phase_since.max(s.idle_since);
        let (ms, why) = match s.phase {
            Phase::Idle if s.served == 0 => (l.header_timeout_ms, Timeout::Header),
            Phase::Idle | Phase::Opaque => (l.idle_timeout_ms, Timeout::Idle),
            Phase::Head => (l.header_timeout_ms, Timeout::Header),
            Phase::Body => (l.body_timeout_ms, Timeout::Body),
        };
        Some((base + std::time::Duration::from_millis(ms), why))
    }

    /// Lower goes first; `None` when it must not be evicted. A connection that never
    /// completed a request ranks by its age (`idle_since` is its accept time), not by
    /// when its bytes were read: under a flood, a just-accepted `/healthz` is read after
    /// older slow connections and must not look older than them.
    fn eviction_rank(&self) -> Option<(bool, Instant)> {
        let s = self.lock();
        let since = if s.served == 0 {
            s.idle_since
        } else {
            s.phase_since.max(s.idle_since)
        };
        (s.in_flight == 0).then_some((s.served > 0, since))
    }
}

struct Entry {
    state: Arc<ConnState>,
    evict: CancellationToken,
}

struct Episode {
    since: Instant,
    evicted: u64,
    refused: u64,
}

struct Conns {
    next_id: u64,
    open: HashMap<u64, Entry>,
    episode: Option<Episode>,
}

pub struct Table {
    cap: usize,
    conns: Mutex<Conns>,
}

/// A slot in the table; dropping it frees the slot.
pub struct Ticket {
    id: u64,
    table: Arc<Table>,
    pub state: Arc<ConnState>,
    /// Cancelled when the table evicts this connection.
    pub evicted: CancellationToken,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.table.remove(self.id, Instant::now());
    }
}

impl Table {
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Table {
            cap: cap.max(1),
            conns: Mutex::new(Conns {
                next_id: 0,
                open: HashMap::new(),
                episode: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().open.len()
    }

    /// A slot for a connection accepted at `now`, evicting if at the cap; `None` when
    /// every slot has a request in flight.
    pub fn admit(self: &Arc<Self>, now: Instant) -> Option<Ticket> {
        let mut c = self.lock();
        if c.open.len() >= self.cap {
            if c.episode.is_none() {
                tracing::warn!(
                    event = "connection_cap_reached",
                    max_connections = self.cap,
                    "connection cap reached: evicting idle connections to admit new ones"
                );
                c.episode = Some(Episode {
                    since: now,
                    evicted: 0,
                    refused: 0,
                });
            }
            let victim = c
                .open
                .iter()
                .filter_map(|(id, e)| e.state.eviction_rank().map(|r| (r, *id)))
                .min()
                .map(|(_, id)| id);
            let ep = c.episode.as_mut().expect("set above");
            match victim {
                Some(id) => {
                    ep.evicted += 1;
                    if let Some(e) = c.open.remove(&id) {
                        e.evict.cancel();
                    }
                }
                None => {
                    ep.refused += 1;
                    return None;
                }
            }
        }
        let id = c.next_id;
        c.next_id += 1;
        let state = Arc::new(ConnState::new(now));
        let evicted = CancellationToken::new();
        c.open.insert(
            id,
            Entry {
                state: state.clone(),
                evict: evicted.clone(),
            },
        );
        Some(Ticket {
            id,
            table: self.clone(),
            state,
            evicted,
        })
    }

    fn remove(&self, id: u64, now: Instant) {
        let mut c = self.lock();
        c.open.remove(&id);
        // Hysteresis: the episode ends when a tenth of the slots are free again.
        if c.open.len() <= self.cap - (self.cap / 10).max(1) {
            if let Some(ep) = c.episode.take() {
                tracing::info!(
                    event = "connection_cap_cleared",
                    max_connections = self.cap,
                    evicted = ep.evicted,
                    refused = ep.refused,
                    duration_ms = now.saturating_duration_since(ep.since).as_millis() as u64,
                    "below the connection cap again"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn at_the_cap_the_oldest_never_served_idle_connection_goes_first() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let table = Table::new(3);
        let keepalive = table.admit(ms(0)).unwrap();
        keepalive.state.request_started();
        keepalive.state.request_finished(ms(1));
        let slow_old = table.admit(ms(2)).unwrap();
        let slow_new = table.admit(ms(3)).unwrap();
        // Bytes read late do not make an older connection look newer.
        slow_old.state.set_phase(Phase::Head, ms(10));
        let a = table.admit(ms(4)).unwrap();
        assert!(slow_old.evicted.is_cancelled());
        assert!(!slow_new.evicted.is_cancelled() && !keepalive.evicted.is_cancelled());
        // Busy connections are never evicted; the keep-alive one goes before refusal.
        slow_new.state.request_started();
        a.state.request_started();
        let b = table.admit(ms(5)).unwrap();
        assert!(keepalive.evicted.is_cancelled());
        b.state.request_started();
        assert!(table.admit(ms(6)).is_none());
        assert_eq!(table.len(), 3);
        drop((slow_old, keepalive));
        assert_eq!(table.len(), 3, "evicted tickets were already removed");
        drop(b);
        assert!(table.admit(ms(7)).is_some());
    }

    #[test]
    fn deadlines_follow_the_phase_and_pause_while_a_request_is_in_flight() {
        let l = HttpLimits {
            header_timeout_ms: 10,
            body_timeout_ms: 20,
            idle_timeout_ms: 30,
            max_connections: 1,
        };
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let s = ConnState::new(t0);
        assert_eq!(s.deadline(&l), Some((ms(10), Timeout::Header)));
        s.set_phase(Phase::Head, ms(5));
        assert_eq!(s.deadline(&l), Some((ms(15), Timeout::Header)));
        s.request_started();
        s.set_phase(Phase::Idle, ms(6));
        assert_eq!(s.deadline(&l), None);
        s.request_finished(ms(100));
        assert_eq!(s.deadline(&l), Some((ms(130), Timeout::Idle)));
        s.set_phase(Phase::Body, ms(101));
        assert_eq!(s.deadline(&l), Some((ms(121), Timeout::Body)));
    }
}
