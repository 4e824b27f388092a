//! The async loop: ask the [`Machine`] what to do, do it over [`Transport`], feed the
//! outcome back. All protocol decisions live in the machine; this file only moves bytes
//! between the gateway, the store and the node.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::machine::{Action, Event, Machine, MachineConfig};
use super::transport::{PinnedKey, SyncError, Transport};
use super::wire::PullAnswer;
use super::{NodeLink, Shared, SyncHandle};
use crate::config::Config;
use crate::envelope::KeyRing;
use crate::store::Store;
use crate::telemetry::{Metrics, TimeMovedBack};

pub struct SyncDeps {
    pub cfg: Arc<Config>,
    pub store: Store,
    pub keys: Arc<KeyRing>,
    pub metrics: Arc<Metrics>,
    pub node: Arc<dyn NodeLink>,
}

/// Start the sync loop on `tracker` if the config has an `[upstream]`; it ends promptly
/// when `shutdown` fires.
pub fn spawn(
    deps: SyncDeps,
    tracker: &TaskTracker,
    shutdown: CancellationToken,
) -> Result<Option<SyncHandle>, SyncError> {
    let Some(up) = deps.cfg.upstream.clone() else {
        return Ok(None);
    };
    let node = deps.node.clone();
    let pinned: PinnedKey = Arc::new(move |id: &str| node.pinned_key(id));
    let (node, gw) = (deps.node.clone(), up.gateway_id.clone());
    let tls_pin: crate::tls_pin::PinSource = Arc::new(move || node.pinned_tls(&gw));
    if up.urls.iter().any(|u| u.starts_with("https://"))
        && up.ca_file.is_none()
        && tls_pin().is_none()
    {
        // Said once at start (and again with each failure below), so that a node
        // that cannot verify its gateway does not fail in silence.
        tracing::warn!(
            event = "upstream_tls_unverifiable",
            gateway = %up.gateway_id,
            detail = crate::tls_pin::NO_ANCHOR
        );
    }
    let transport =
        Transport::with_tls_pin(&up, &deps.cfg.node_id, deps.keys.clone(), pinned, tls_pin)?;
    let shared = Arc::new(Shared::default());
    let handle = SyncHandle {
        shared: shared.clone(),
        url: up.url.clone(),
    };
    let mcfg = MachineConfig {
        poll_wait_s: up.poll_wait_s,
        flush_batch: deps.cfg.queue.flush_batch,
        retry_max_ms: up.retry_max_s * 1000,
        // Once a long-poll: a fact that changed reaches the gateway within a poll
        // (reading it writes nothing; a report goes only when it moved).
        inventory_every_ms: up.poll_wait_s.max(1) * 1000,
        ..MachineConfig::default()
    };
    let w = Worker {
        deps,
        t: Arc::new(transport),
        shared,
        shutdown,
        confirmed_audit: None,
        refused_time: None,
        prefetch: None,
        acking: None,
        failure: std::sync::Mutex::new(None),
        reporter: super::advice::Reporter::default(),
        rotation_checked: None,
        state_sent: super::state_report::Sent::default(),
    };
    tracker.spawn(w.run(Machine::new(mcfg)));
    Ok(Some(handle))
}

pub(super) struct Worker {
    pub(super) deps: SyncDeps,
    pub(super) t: Arc<Transport>,
    pub(super) shared: Arc<Shared>,
    pub(super) shutdown: CancellationToken,
    /// The gateway's confirmed audit size, asked once per connection.
    pub(super) confirmed_audit: Option<u64>,
    /// The gateway's signed time the node could not take because its clock did not
    /// agree, and when it came. While the node waits for its next attempt, that time
    /// (advanced by the monotonic clock) is checked against the wall clock once a
    /// second, so a clock that NTP sets right is noticed at once rather than at the
    /// next attempt of the backoff schedule (meanwhile the node keeps sealing messages
    /// with the wrong time, which its gateway will refuse).
    refused_time: Option<(u64, tokio::time::Instant)>,
    /// The next batch of a backlog, asked for while the previous one is stored and
    /// acknowledged (PROTOCOL §12.1 `after`, §12.6 pipelining): the next flush pull takes
    /// its answer.
    pub(super) prefetch: Option<tokio::task::JoinHandle<Result<PullAnswer, SyncError>>>,
    /// The ack of a backlog batch (stored here already), travelling while the next
    /// batch is opened; settled before the next ack and before any other step.
    pub(super) acking: Option<tokio::task::JoinHandle<Result<(), SyncError>>>,
    /// What the last failure means ([`Worker::fail`]), for its log line.
    pub(super) failure: std::sync::Mutex<Option<super::advice::Advice>>,
    /// When a failure is worth a log line.
    pub(super) reporter: super::advice::Reporter,
    /// When the link last looked for a pending key rotation.
    pub(super) rotation_checked: Option<tokio::time::Instant>,
    /// What the gateway took of the node's state on this connection.
    pub(super) state_sent: super::state_report::Sent,
}

/// Aborts a prefetch nobody will take (a stall, a failure, another action).
pub(super) fn drop_prefetch(
    p: &mut Option<tokio::task::JoinHandle<Result<PullAnswer, SyncError>>>,
) {
    if let Some(h) = p.take() {
        h.abort();
    }
}

/// How long a refused gateway time is extrapolated with the monotonic clock.
const REFUSED_TIME_KEPT: Duration = Duration::from_secs(600);

pub(super) fn failed(e: &SyncError) -> Event {
    if let SyncError::ClockSkew { gateway_ms, .. } = e {
        return Event::ClockSkew {
            error: e.to_string(),
            gateway_ms: *gateway_ms,
        };
    }
    Event::Failed {
        error: e.to_string(),
        jitter: jitter(),
        slow: matches!(e, SyncError::Slow(_)),
    }
}

fn jitter() -> f64 {
    rand::thread_rng().gen_range(-1.0..=1.0)
}

impl Worker {
    pub(super) fn now(&self) -> u64 {
        self.deps.store.now_ms()
    }

    async fn run(mut self, mut m: Machine) {
        let mut ev = Event::Start;
        let mut was_connected = false;
        loop {
            if self.shutdown.is_cancelled() {
                ev = Event::Shutdown;
            }
            let now = self.now();
            let action = m.handle(ev, now);
            self.publish(&m, &mut was_connected);
            if m.connected() {
                self.set_refused_time(None);
                self.reporter.ok();
            }
            // First thing at start (before the first pull opens what is queued), then
            // while connected.
            if m.connected() || self.rotation_checked.is_none() {
                self.maybe_rotate().await;
            }
            tracing::trace!(event = "sync_action", ?action);
            // A prefetched batch is only the answer to the flush pull that follows; an
            // ack on its way is settled first, and its failure is the link's (at a
            // stop it is dropped below instead of waited for).
            if !matches!(action, Action::Pull { wait_s: 0, .. } | Action::Stop) {
                drop_prefetch(&mut self.prefetch);
                if let Err(e) = self.settle_ack().await {
                    ev = self.fail(&e);
                    self.report(&ev);
                    self.confirmed_audit = None;
                    continue;
                }
            }
            ev = match action {
                Action::Stop => {
                    drop_prefetch(&mut self.prefetch);
                    if let Some(h) = self.acking.take() {
                        // Stored here already: unacked, the gateway sends them again
                        // and the node answers duplicate.
                        h.abort();
                    }
                    return;
                }
                Action::Wait { until_ms } => self.wait(until_ms).await,
                Action::Pull { wait_s, max } => self.pull(wait_s, max).await,
                Action::Push { max } => self.push(max).await,
                Action::SyncAudit { max_entries } => self.sync_audit(max_entries as usize).await,
                Action::FetchRevocations => self.revocations().await,
                Action::ReportState { fresh } => self.report_state(fresh).await,
                Action::CorrectTime { gateway_ms } => self.correct_time(gateway_ms).await,
            };
            if matches!(ev, Event::Failed { .. } | Event::ClockSkew { .. }) {
                self.report(&ev);
                self.confirmed_audit = None;
            }
        }
    }

    /// The gateway stated its time, signed, in answer to a request it refused as too
    /// far off: take it if the clock agrees (`Store::correct_time`).
    async fn correct_time(&mut self, gateway_ms: u64) -> Event {
        let moved = self.take_time(gateway_ms).await;
        if moved {
            self.set_refused_time(None);
        } else {
            tracing::warn!(
                event = "time_not_corrected",
                node_ms = self.now(),
                gateway_ms,
                detail = "the gateway refused our timestamp, but our clock does not agree with its time; fix the clock (NTP) or the gateway's"
            );
            self.set_refused_time(Some((gateway_ms, tokio::time::Instant::now())));
        }
        Event::TimeCorrected {
            moved,
            jitter: jitter(),
        }
    }

    /// Move the store's time back to `trusted_ms` if the clock agrees with it. The
    /// tolerance is half the skew, so the next request is well inside the gateway's
    /// window.
    async fn take_time(&self, trusted_ms: u64) -> bool {
        let store = &self.deps.store;
        let from_ms = store.now_ms();
        let tolerance_ms = self.deps.cfg.max_clock_skew_s * 1000 / 2;
        let Some((fix, durable)) = store.correct_time(trusted_ms, tolerance_ms) else {
            return false;
        };
        TimeMovedBack {
            from_ms,
            to_ms: fix.corrected_at_ms,
            source: self.t.gateway_id(),
        }
        .emit(&self.deps.metrics);
        if let Err(e) = durable.await {
            // Time did move (in memory); the floor follows with the next commit.
            tracing::warn!(event = "time_correction_not_persisted", error = %e);
        }
        true
    }

    /// Keep (or drop) a gateway time the node could not take; while one is kept the node
    /// knows its clock is ahead of its gateway's, and says so to the outbox
    /// ([`super::SyncHandle::clock_ahead`]): what it sealed now would be refused.
    fn set_refused_time(&mut self, t: Option<(u64, tokio::time::Instant)>) {
        self.refused_time = t;
        // Only ahead: what a node *behind* its gateway seals carries an earlier time,
        // which its gateway accepts once the link works again.
        let skew_ms = self.deps.cfg.max_clock_skew_s * 1000;
        let ahead =
            t.is_some_and(|(gateway_ms, _)| gateway_ms.saturating_add(skew_ms) < self.now());
        self.shared
            .clock_ahead
            .store(ahead, std::sync::atomic::Ordering::SeqCst);
    }

    /// A refused gateway time, as it is now: whether the clock agrees with it yet.
    async fn retry_refused_time(&mut self) -> Option<Event> {
        let (gateway_ms, at) = self.refused_time?;
        let elapsed = at.elapsed();
        if elapsed > REFUSED_TIME_KEPT {
            self.set_refused_time(None);
            return None;
        }
        if !self
            .take_time(gateway_ms + elapsed.as_millis() as u64)
            .await
        {
            return None;
        }
        self.set_refused_time(None);
        Some(Event::TimeCorrected {
            moved: true,
            jitter: jitter(),
        })
    }

    async fn wait(&mut self, until_ms: u64) -> Event {
        let d = Duration::from_millis(until_ms.saturating_sub(self.now()));
        let deadline = tokio::time::Instant::now() + d;
        loop {
            // On every entry too: outbox wake-ups may come more often than the tick.
            if let Some(ev) = self.retry_refused_time().await {
                return ev;
            }
            let tick = match self.refused_time {
                Some(_) => deadline.min(tokio::time::Instant::now() + Duration::from_secs(1)),
                None => deadline,
            };
            tokio::select! {
                _ = self.shutdown.cancelled() => return Event::Shutdown,
                _ = self.shared.wake.notified() => return Event::Woken,
                _ = self.shared.report_wake.notified() => return Event::StateWritten,
                _ = tokio::time::sleep_until(tick) => {}
            }
            if tick >= deadline {
                return Event::Timer;
            }
        }
    }
}

/// `s` as a query-string value: everything but RFC 3986's unreserved characters
/// percent-encoded (the signature covers the path and query exactly as sent).
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
