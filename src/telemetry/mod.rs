//! Telemetry as named events: each struct here is one thing that happens, and its
//! `emit()` writes the structured log line and bumps the metric together, so logs and
//! metrics can never disagree about what happened.
//!
//! Rule for names: metrics are `outpost_<thing>_<unit|total>`; log events carry
//! `event = "<snake_case>"` plus the same label values as fields.

pub mod metrics;
pub mod status;

pub use metrics::Metrics;

use std::time::Duration;

/// A message changed state in a queue (enqueued, delivered, expired, rejected, dead,
/// duplicate).
pub struct MessageEvent<'a> {
    pub queue: &'a str,
    pub event: &'a str,
    pub peer: &'a str,
    pub message_id: &'a str,
    pub reason: Option<&'a str>,
}

impl MessageEvent<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.messages_total.inc(&[self.queue, self.event]);
        match self.event {
            "duplicate" => tracing::warn!(
                event = "message_duplicate",
                queue = self.queue,
                peer = self.peer,
                message_id = self.message_id,
                "duplicate message id (possible replay); not processed again"
            ),
            "expired" | "dead" | "rejected" => tracing::warn!(
                event = "message_state",
                state = self.event,
                queue = self.queue,
                peer = self.peer,
                message_id = self.message_id,
                reason = self.reason.unwrap_or(""),
            ),
            _ => tracing::debug!(
                event = "message_state",
                state = self.event,
                queue = self.queue,
                peer = self.peer,
                message_id = self.message_id,
            ),
        }
    }
}

/// The node's time was moved back to its gateway's signed time (RELIABILITY F2): it
/// had run ahead (`from_ms`) after its clock jumped forward and was set right.
pub struct TimeMovedBack<'a> {
    pub from_ms: u64,
    pub to_ms: u64,
    pub source: &'a str,
}

impl TimeMovedBack<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.time_corrections_total.inc(&[]);
        tracing::warn!(
            event = "time_moved_back",
            from_ms = self.from_ms,
            to_ms = self.to_ms,
            by_ms = self.from_ms.saturating_sub(self.to_ms),
            source = self.source,
            detail = "the node's time was ahead of its gateway's signed time, and its clock agrees with the gateway"
        );
    }
}

/// A tool finished (or was refused) with an outcome.
pub struct ToolCallFinished<'a> {
    pub tool: &'a str,
    pub outcome: &'a str,
    pub job_id: &'a str,
    pub duration: Option<Duration>,
}

impl ToolCallFinished<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.tool_calls_total.inc(&[self.tool, self.outcome]);
        if let Some(d) = self.duration {
            m.tool_call_duration_seconds.observe(d.as_secs_f64());
        }
        tracing::info!(
            event = "tool_call",
            tool = self.tool,
            outcome = self.outcome,
            job_id = self.job_id,
            duration_ms = self.duration.map(|d| d.as_millis() as u64).unwrap_or(0),
        );
    }
}

/// An inbound envelope was accepted or refused.
pub struct EnvelopeReceived<'a> {
    pub result: &'a str,
    pub sender: &'a str,
    pub message_id: &'a str,
}

impl EnvelopeReceived<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.envelopes_total.inc(&[self.result]);
        if self.result == "accepted" {
            tracing::info!(
                event = "envelope",
                result = self.result,
                sender = self.sender,
                message_id = self.message_id
            );
        } else {
            tracing::warn!(
                event = "envelope",
                result = self.result,
                sender = self.sender,
                message_id = self.message_id
            );
        }
    }
}

/// One delivery attempt towards a peer finished.
pub struct DeliveryAttempt<'a> {
    pub result: &'a str,
    pub peer: &'a str,
    pub count: usize,
}

impl DeliveryAttempt<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.delivery_attempts_total
            .add(&[self.result], self.count as f64);
        tracing::debug!(
            event = "delivery_attempt",
            result = self.result,
            peer = self.peer,
            count = self.count
        );
    }
}

/// Upstream connectivity changed.
pub struct UpstreamState<'a> {
    pub connected: bool,
    pub url: &'a str,
    pub detail: &'a str,
}

impl UpstreamState<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.upstream_connected
            .set(&[], if self.connected { 1.0 } else { 0.0 });
        if self.connected {
            tracing::info!(event = "upstream_connected", url = self.url);
        } else {
            tracing::warn!(
                event = "upstream_disconnected",
                url = self.url,
                detail = self.detail
            );
        }
    }
}
