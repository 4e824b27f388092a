//! The sync protocol as a pure state machine: `(event, now) → action`. No I/O, no clock,
//! no randomness (jitter comes in with the failure event), so every schedule is tested
//! with plain numbers.
//!
//! Order on every (re)connect (PROTOCOL §12.6):
//! 1. a pull with `wait_s = 0`: the gateway answers how many messages are pending and
//!    the first batch (the handshake);
//! 2. stored messages are flushed in batches of `pull_batch` with `wait_s = 0` until the
//!    pending count is drained;
//! 3. only then live traffic: the outbox is pushed, the audit log and revocations are
//!    synced when due, the node's state is reported (PROTOCOL §16.5: in full once per
//!    connection, then when local software wrote reported state, and every
//!    `inventory_every_ms` the worker looks whether the inventory moved), and otherwise
//!    the node sits in a long-poll.
//!
//! Any failure drops to `Offline` and retries on the PROTOCOL §14 schedule (5, 10, 20 … 300 s
//! ±10 %); a success resets it. One failure is different: the gateway refused the
//! node's timestamp and stated its own time, signed (`ClockSkew`). The machine asks for
//! a time correction (`CorrectTime`); if time moved back, every deadline it computed
//! from the wrong time is void and it reconnects at once; if not, it backs off as for
//! any failure (RELIABILITY F2).
//!
//! A slow link (a request sent whose answer did not come within the timeout: a weak
//! cellular link, an overloaded gateway) halves every batch the node asks for or sends
//! — pull `max`, outbox uploads, audit uploads, each on its own — down to one, and the
//! smaller request goes at once (halving is the back-off; once the batch is one, the
//! schedule applies); each full batch that gets through doubles its kind back up to
//! the configured size. Without it a batch too large for the link's speed would time
//! out on every retry, and nothing would ever get through.

use crate::store::backoff::delay_capped_ms;

mod config;
mod vocab;
pub use config::MachineConfig;
pub use vocab::{Action, Event, Phase};

#[derive(Debug, Clone)]
pub struct Machine {
    cfg: MachineConfig,
    phase: Phase,
    failures: u32,
    retry_at_ms: u64,
    remaining: u64,
    /// No pull before this (after a stalled one).
    pull_due_ms: u64,
    outbox_dirty: bool,
    outbox_due_ms: u64,
    audit_due_ms: u64,
    revocations_due_ms: u64,
    /// No report yet on this connection.
    report_fresh: bool,
    /// Local software wrote reported state since the last report.
    report_dirty: bool,
    inventory_due_ms: u64,
    last_ok_ms: Option<u64>,
    last_error: Option<String>,
    /// The first failure since the gateway last answered (or since start).
    failing_since_ms: Option<u64>,
    /// Per kind of batch ([`Kind`]): the configured size is divided by `2^shrink` (at
    /// least 1); raised by a slow answer to a request of that kind, lowered by a full
    /// batch of that kind that got through.
    shrink: [u32; 3],
    /// The kind of the request the last action sent, if it sends a batch.
    in_flight: Option<Kind>,
}

/// The batches the node sizes to the link, each on its own: a small pull that got
/// through says nothing about a large upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pull = 0,
    Push = 1,
    Audit = 2,
}

/// A bound on the halvings (a shift of 32 or more would overflow); [`Machine::can_shrink`]
/// stops sooner, once the batch is 1.
const MAX_SHRINK: u32 = 16;

impl Machine {
    pub fn new(cfg: MachineConfig) -> Self {
        Self {
            cfg,
            phase: Phase::Offline,
            failures: 0,
            retry_at_ms: 0,
            remaining: 0,
            pull_due_ms: 0,
            outbox_dirty: true,
            outbox_due_ms: 0,
            audit_due_ms: 0,
            revocations_due_ms: 0,
            report_fresh: true,
            report_dirty: false,
            inventory_due_ms: 0,
            last_ok_ms: None,
            last_error: None,
            failing_since_ms: None,
            shrink: [0; 3],
            in_flight: None,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }
    pub fn connected(&self) -> bool {
        matches!(self.phase, Phase::Flushing | Phase::Live)
    }
    pub fn last_ok_ms(&self) -> Option<u64> {
        self.last_ok_ms
    }
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
    pub fn failures(&self) -> u32 {
        self.failures
    }
    pub fn retry_at_ms(&self) -> u64 {
        self.retry_at_ms
    }
    /// Since when the gateway has not answered: the first failure after the last
    /// success (or since start); `None` while it answers.
    pub fn failing_since_ms(&self) -> Option<u64> {
        self.failing_since_ms
    }
    /// When the next attempt goes out, while the node waits out its backoff.
    pub fn next_attempt_ms(&self) -> Option<u64> {
        (self.phase == Phase::Offline && self.failures > 0).then_some(self.retry_at_ms)
    }

    fn configured(&self, k: Kind) -> u32 {
        match k {
            Kind::Pull => self.cfg.pull_batch,
            Kind::Push => self.cfg.flush_batch,
            Kind::Audit => self.cfg.audit_batch,
        }
    }

    /// The batch size of kind `k` for the link as it is now: the configured one, halved
    /// once per unrecovered slow answer, at least 1.
    pub fn sized(&self, k: Kind) -> u32 {
        (self.configured(k) >> self.shrink[k as usize]).max(1)
    }

    /// Whether halving batches of kind `k` would make them smaller.
    pub fn can_shrink(&self, k: Kind) -> bool {
        self.shrink[k as usize] < MAX_SHRINK && self.sized(k) > 1
    }

    /// A full batch of kind `k` got through: double it again (up to the configured size).
    fn grow(&mut self, k: Kind) {
        self.shrink[k as usize] = self.shrink[k as usize].saturating_sub(1);
    }

    /// The kind of the request an action sends.
    pub fn kind_of(a: &Action) -> Option<Kind> {
        match a {
            Action::Pull { .. } => Some(Kind::Pull),
            Action::Push { .. } => Some(Kind::Push),
            Action::SyncAudit { .. } => Some(Kind::Audit),
            _ => None,
        }
    }

    /// The kind of the request in flight (the last action's).
    pub fn in_flight(&self) -> Option<Kind> {
        self.in_flight
    }

    fn handshake(&mut self) -> Action {
        self.phase = Phase::Handshake;
        // A new connection: the gateway hears everything again.
        self.report_fresh = true;
        Action::Pull {
            wait_s: 0,
            max: self.sized(Kind::Pull),
        }
    }

    /// A failed attempt: offline, next attempt on the backoff schedule.
    /// A failed request: back off on the schedule, or — an answer too slow for a batch
    /// that can still be halved — halve it and go again at once.
    fn failed(&mut self, now: u64, jitter: f64, slow: bool) -> Action {
        self.phase = Phase::Offline;
        self.failing_since_ms.get_or_insert(now);
        let shrinks = match self.in_flight {
            Some(k) if slow && self.can_shrink(k) => Some(k),
            _ => None,
        };
        if let Some(k) = shrinks {
            // The gateway was reached; the batch was too large for the link. Halving it
            // is the back-off: the smaller request goes at once.
            self.shrink[k as usize] += 1;
            self.retry_at_ms = now;
        } else {
            self.failures = self.failures.saturating_add(1);
            // Failure n is followed by attempt n+1 of the schedule (5 s first).
            self.retry_at_ms = now
                + delay_capped_ms(
                    self.failures.saturating_add(1),
                    jitter,
                    self.cfg.retry_max_ms,
                );
        }
        // Everything is due again once we are back.
        self.outbox_dirty = true;
        self.report_fresh = true;
        self.audit_due_ms = 0;
        self.revocations_due_ms = 0;
        Action::Wait {
            until_ms: self.retry_at_ms,
        }
    }

    /// The state report went (or nothing was due, so no answer to count as the
    /// gateway's): the next look at the inventory in `inventory_every_ms`.
    fn reported(&mut self, now: u64) {
        self.report_fresh = false;
        self.report_dirty = false;
        self.inventory_due_ms = now + self.cfg.inventory_every_ms;
    }

    fn ok(&mut self, now: u64) {
        self.failures = 0;
        self.last_ok_ms = Some(now);
        self.last_error = None;
        self.failing_since_ms = None;
    }

    /// Feed one event; get the one thing to do next.
    pub fn handle(&mut self, ev: Event, now: u64) -> Action {
        let a = self.step(ev, now);
        self.in_flight = Self::kind_of(&a);
        a
    }

    /// The state change one event makes: events that end the connection, or arrive
    /// while offline, answer at once; the others update the books and fall through to
    /// [`Machine::next`].
    fn step(&mut self, ev: Event, now: u64) -> Action {
        match ev {
            Event::Shutdown => return Action::Stop,
            Event::Start => {
                self.outbox_dirty = true;
                return self.handshake();
            }
            Event::Failed {
                error,
                jitter,
                slow,
            } => {
                self.last_error = Some(error);
                return self.failed(now, jitter, slow);
            }
            Event::ClockSkew { error, gateway_ms } => {
                self.phase = Phase::Offline;
                self.report_fresh = true;
                self.last_error = Some(error);
                return Action::CorrectTime { gateway_ms };
            }
            Event::TimeCorrected {
                moved: false,
                jitter,
            } => return self.failed(now, jitter, false),
            Event::TimeCorrected { moved: true, .. } => return self.time_moved_back(),
            Event::Timer | Event::Woken | Event::StateWritten if self.phase == Phase::Offline => {
                return self.offline(&ev, now);
            }
            Event::Timer => {}
            Event::Woken => self.outbox_dirty = true,
            Event::StateWritten => self.report_dirty = true,
            Event::StateReported => self.reported(now),
            Event::Pulled {
                pending_count,
                received,
                stalled,
            } => self.pulled(now, pending_count, received, stalled),
            Event::Pushed { more } => self.pushed(now, more),
            Event::AuditSynced => {
                self.ok(now);
                self.grow(Kind::Audit);
                self.audit_due_ms = now + self.cfg.audit_every_ms;
            }
            Event::RevocationsFetched => {
                self.ok(now);
                self.revocations_due_ms = now + self.cfg.revocations_every_ms;
            }
        }
        self.next(now)
    }

    /// The node's time moved back: every deadline was computed from a time that turned
    /// out a week (say) ahead, and waiting for any of them would wait that long, so all
    /// are due now and the node reconnects at once.
    fn time_moved_back(&mut self) -> Action {
        self.retry_at_ms = 0;
        self.pull_due_ms = 0;
        self.outbox_dirty = true;
        self.outbox_due_ms = 0;
        self.audit_due_ms = 0;
        self.revocations_due_ms = 0;
        self.handshake()
    }

    /// A timer, a wake-up or a state write while offline: noted, and the next attempt
    /// goes once the backoff is over.
    fn offline(&mut self, ev: &Event, now: u64) -> Action {
        match ev {
            Event::Woken => self.outbox_dirty = true,
            Event::StateWritten => self.report_dirty = true,
            _ => {}
        }
        if now >= self.retry_at_ms {
            return self.handshake();
        }
        Action::Wait {
            until_ms: self.retry_at_ms,
        }
    }

    /// A pull answered: a full batch grows the pull size back, a stalled one (the store
    /// full) holds the next pull off, and what the gateway still holds decides between
    /// flushing and live traffic.
    fn pulled(&mut self, now: u64, pending_count: u64, received: u64, stalled: bool) {
        self.ok(now);
        if received >= u64::from(self.sized(Kind::Pull)) {
            self.grow(Kind::Pull);
        }
        if stalled {
            self.pull_due_ms = now + self.cfg.stall_retry_ms;
        }
        self.remaining = pending_count.saturating_sub(received);
        if self.remaining > 0 {
            self.phase = Phase::Flushing;
        } else {
            self.phase = Phase::Live;
        }
    }

    /// An outbox upload went: a full batch (`more`) grows the upload size back and
    /// keeps the outbox due, a partial one empties it until the next look; either way
    /// the new audit entries are synced next.
    fn pushed(&mut self, now: u64, more: bool) {
        self.ok(now);
        if more {
            self.grow(Kind::Push);
        }
        if !more {
            self.outbox_dirty = false;
            self.outbox_due_ms = now + self.cfg.outbox_every_ms;
        }
        // Results pushed mean new audit entries: sync them next.
        self.audit_due_ms = now;
    }

    /// Connected: flush first, then the due chores, then the long-poll.
    fn next(&mut self, now: u64) -> Action {
        if self.phase == Phase::Handshake {
            // A chore event arrived before the handshake answered (cannot happen with a
            // sequential loop); ask again rather than go live unannounced.
            return self.handshake();
        }
        let max = self.sized(Kind::Pull);
        let push = Action::Push {
            max: self.sized(Kind::Push),
        };
        let audit = Action::SyncAudit {
            max_entries: self.sized(Kind::Audit),
        };
        if now < self.pull_due_ms {
            // Our store is full: do the chores that are due, otherwise wait.
            if self.outbox_dirty || now >= self.outbox_due_ms {
                return push;
            }
            if now >= self.audit_due_ms {
                return audit;
            }
            if now >= self.revocations_due_ms {
                return Action::FetchRevocations;
            }
            let until_ms = [
                self.pull_due_ms,
                self.outbox_due_ms,
                self.audit_due_ms,
                self.revocations_due_ms,
            ]
            .into_iter()
            .min()
            .unwrap_or(self.pull_due_ms);
            return Action::Wait { until_ms };
        }
        if self.remaining > 0 {
            self.phase = Phase::Flushing;
            return Action::Pull { wait_s: 0, max };
        }
        self.phase = Phase::Live;
        if self.outbox_dirty || now >= self.outbox_due_ms {
            return push;
        }
        if now >= self.audit_due_ms {
            return audit;
        }
        if now >= self.revocations_due_ms {
            return Action::FetchRevocations;
        }
        if self.report_fresh || self.report_dirty || now >= self.inventory_due_ms {
            return Action::ReportState {
                fresh: self.report_fresh,
            };
        }
        Action::Pull {
            wait_s: self.cfg.poll_wait_s,
            max,
        }
    }
}

#[cfg(test)]
mod tests;
