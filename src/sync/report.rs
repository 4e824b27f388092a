//! What the sync loop tells the world after each step: `/v1/status` and the
//! connectivity metric ([`Worker::publish`]), and one log line per reason it cannot
//! reach the gateway, with what to do ([`Worker::report`], [`super::advice`]).

use super::machine::{Event, Machine};
use super::transport::SyncError;
use super::worker::{failed, Worker};
use crate::telemetry::UpstreamState;

/// While the same failure lasts, its log line is repeated this often.
const REPORT_AGAIN_MS: u64 = 10 * 60 * 1000;

impl Worker {
    /// The event for failure `e`, remembering what it means for its log line.
    pub(super) fn fail(&self, e: &SyncError) -> Event {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(super::advice::advise(e));
        failed(e)
    }

    /// A failed step: one log line for the first failure and each change of reason
    /// (with what to do), a reminder every [`REPORT_AGAIN_MS`] while it lasts — not a
    /// line per retry. Also kept for `/v1/status`.
    pub(super) fn report(&mut self, ev: &Event) {
        let error = match ev {
            Event::Failed { error, .. } | Event::ClockSkew { error, .. } => error,
            _ => return,
        };
        let Some(advice) = self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        {
            let mut s = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
            s.hint = Some(advice.hint.to_string());
            s.reason = Some(advice.class);
        }
        if self
            .reporter
            .failed(advice.class, self.now(), REPORT_AGAIN_MS)
        {
            let url = self.t.current_url();
            tracing::warn!(
                event = "upstream_unreachable",
                url,
                reason = advice.class,
                error = %error,
                hint = advice.hint,
                "cannot reach the gateway at {url} ({}): {error}; {}",
                advice.class,
                advice.hint
            );
        }
    }

    pub(super) fn publish(&self, m: &Machine, was_connected: &mut bool) {
        let connected = m.connected();
        {
            let mut s = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
            s.state = m.phase().as_str().to_string();
            if s.url != self.t.current_url() {
                s.url = self.t.current_url().to_string();
            }
            s.connected = connected;
            s.last_ok_ms = m.last_ok_ms();
            s.last_error = m.last_error().map(str::to_string);
            s.failing_since_ms = m.failing_since_ms();
            s.next_attempt_at_ms = m.next_attempt_ms();
            if s.last_error.is_none() {
                s.hint = None;
                s.reason = None;
            }
            if let Some(c) = self.confirmed_audit {
                s.audit_synced_size = c;
            }
        }
        if connected != *was_connected {
            UpstreamState {
                connected,
                url: self.t.current_url(),
                detail: m.last_error().unwrap_or(""),
            }
            .emit(&self.deps.metrics);
            *was_connected = connected;
        }
    }
}
