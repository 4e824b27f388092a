//! A small Prometheus registry: counters and gauges with labels, one histogram type.
//!
//! Hand-written rather than a crate because the set is fixed and small, and the text
//! exposition format (checked by `promtool check metrics` in CI) is simple to get right.
//! Gauges that mirror store state (queue depth, oldest age, store bytes) are set just
//! before rendering, from one store query, so they are never stale.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A family of values keyed by label values (in the order of `labels`).
#[derive(Debug)]
pub struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    labels: &'static [&'static str],
    values: Mutex<BTreeMap<Vec<String>, f64>>,
}

impl Family {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        kind: &'static str,
        labels: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            help,
            kind,
            labels,
            values: Mutex::new(BTreeMap::new()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<Vec<String>, f64>) -> R) -> R {
        // A poisoned lock only means another thread panicked mid-update of a number;
        // the map is still usable, and metrics must never take the daemon down.
        let mut g = self.values.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    pub fn inc(&self, label_values: &[&str]) {
        self.add(label_values, 1.0);
    }

    pub fn add(&self, label_values: &[&str], by: f64) {
        let key = label_values.iter().map(|s| s.to_string()).collect();
        self.with(|m| *m.entry(key).or_insert(0.0) += by);
    }

    pub fn set(&self, label_values: &[&str], v: f64) {
        let key = label_values.iter().map(|s| s.to_string()).collect();
        self.with(|m| {
            m.insert(key, v);
        });
    }

    /// Replace every series at once (for gauges mirrored from the store, so that a
    /// queue that disappeared stops being reported).
    pub fn replace_all(&self, series: Vec<(Vec<String>, f64)>) {
        self.with(|m| {
            m.clear();
            m.extend(series);
        });
    }

    pub fn get(&self, label_values: &[&str]) -> f64 {
        let key: Vec<String> = label_values.iter().map(|s| s.to_string()).collect();
        self.with(|m| m.get(&key).copied().unwrap_or(0.0))
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        self.with(|m| {
            if m.is_empty() && self.labels.is_empty() {
                let _ = writeln!(out, "{} 0", self.name);
            }
            for (k, v) in m.iter() {
                out.push_str(self.name);
                write_labels(out, self.labels, k, None);
                let _ = writeln!(out, " {}", fmt_f64(*v));
            }
        });
    }
}

/// A histogram without labels, fixed buckets (seconds).
#[derive(Debug)]
pub struct Histogram {
    name: &'static str,
    help: &'static str,
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn new(name: &'static str, help: &'static str, bounds: &'static [f64]) -> Self {
        Self {
            name,
            help,
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, seconds: f64) {
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if seconds <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{}_bucket{{le=\"{}\"}} {}",
                self.name,
                fmt_f64(*b),
                c.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{}_bucket{{le=\"+Inf\"}} {}", self.name, count);
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{}_sum {}", self.name, fmt_f64(sum));
        let _ = writeln!(out, "{}_count {}", self.name, count);
    }
}

fn write_labels(out: &mut String, names: &[&str], values: &[String], extra: Option<(&str, &str)>) {
    if names.is_empty() && extra.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (n, v) in names.iter().zip(values) {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{n}=\"{}\"", escape(v));
    }
    if let Some((n, v)) = extra {
        if !first {
            out.push(',');
        }
        let _ = write!(out, "{n}=\"{}\"", escape(v));
    }
    out.push('}');
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn fmt_f64(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

const DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Declares every metric family once: the struct field, its registration and its place
/// in the exposition all come from one line, so a metric cannot be added and then
/// silently never exported. `node` marks families a gateway does not export, `gateway`
/// those a node does not.
macro_rules! families {
    ($($field:ident: $kind:literal $name:literal [$($label:literal),*] $scope:ident $help:literal;)*) => {
        /// Every metric outpost exports (OPERATIONS). Names follow one rule:
        /// `outpost_<thing>_<unit or total>`, labels lowercase.
        #[derive(Debug)]
        pub struct Metrics {
            $(pub $field: Family,)*
            pub tool_call_duration_seconds: Histogram,
            /// A gateway's registry: the node-only families (upstream link, local audit
            /// log, tool calls) are not exported, since a gateway has none of them.
            gateway: bool,
        }

        impl Metrics {
            /// The node's registry.
            pub fn new() -> Self {
                Self {
                    $($field: Family::new($name, $help, $kind, &[$($label),*]),)*
                    tool_call_duration_seconds: Histogram::new(
                        "outpost_tool_call_duration_seconds",
                        "Wall time of tool executions.",
                        DURATION_BUCKETS,
                    ),
                    gateway: false,
                }
            }

            /// Each family with the role that exports it (`None`: both), in exposition
            /// order.
            fn families(&self) -> Vec<(&Family, Option<bool>)> {
                vec![$((&self.$field, families!(@only $scope)),)*]
            }
        }
    };
    (@only node) => { Some(false) };
    (@only gateway) => { Some(true) };
    (@only both) => { None };
}

families! {
    queue_depth: "gauge" "outpost_queue_depth" ["queue", "peer"] both
        "Messages waiting in a queue for a peer.";
    queue_oldest_age_seconds: "gauge" "outpost_queue_oldest_age_seconds" ["queue", "peer"] both
        "Age of the oldest message waiting in a queue for a peer.";
    messages_total: "counter" "outpost_messages_total" ["queue", "event"] both
        "Message lifecycle events by queue.";
    delivery_attempts_total: "counter" "outpost_delivery_attempts_total" ["result"] both
        "Delivery attempts by result.";
    envelopes_total: "counter" "outpost_envelopes_total" ["result"] both
        "Inbound envelopes by result code.";
    tool_calls_total: "counter" "outpost_tool_calls_total" ["tool", "outcome"] node
        "Tool calls by tool and outcome.";
    http_requests_total: "counter" "outpost_http_requests_total" ["status"] both
        "HTTP requests answered, by status class.";
    upstream_connected: "gauge" "outpost_upstream_connected" [] node
        "1 while the node reaches its gateway, else 0.";
    time_corrections_total: "counter" "outpost_time_corrections_total" [] node
        "Times the node's time was moved back to its gateway's signed time.";
    audit_size: "gauge" "outpost_audit_size" [] node
        "Entries in the local audit log.";
    audit_append_failures_total: "counter" "outpost_audit_append_failures_total" [] both
        "Audit entries that could not be stored (disk full or failing) for work answered without them: a node's refusals, expiries, failed calls; a gateway's enrollment decisions.";
    audit_unsynced_entries: "gauge" "outpost_audit_unsynced_entries" [] node
        "Audit entries not yet confirmed by the gateway.";
    store_bytes: "gauge" "outpost_store_bytes" [] both
        "Bytes the store holds: a node's store files on disk (engine and blobs, everything it keeps); a gateway's queued messages.";
    store_result_bytes: "gauge" "outpost_store_result_bytes" [] node
        "Bytes of stored tool results, against queue.max_result_store_bytes.";
    store_quarantined_records: "gauge" "outpost_store_quarantined_records" [] both
        "Corrupt records moved to quarantine since the store was created.";
    tenant_queue_depth: "gauge" "outpost_tenant_queue_depth" ["tenant"] gateway
        "Messages waiting for the nodes of a tenant (PROTOCOL §18).";
    tenant_queued_bytes: "gauge" "outpost_tenant_queued_bytes" ["tenant"] gateway
        "Bytes of the messages waiting for the nodes of a tenant.";
    tenant_nodes: "gauge" "outpost_tenant_nodes" ["tenant", "liveness"] gateway
        "Enrolled nodes of a tenant by liveness.";
    tenant_messages_total: "counter" "outpost_tenant_messages_total" ["tenant", "event"] gateway
        "Message events (queued, delivered, expired, rejected, dead, result) this gateway committed, by tenant.";
    throttled_total: "counter" "outpost_throttled_total" ["route", "reason"] gateway
        "Unauthenticated requests (enrollment, console sign-in) refused or held back before any work, by route and reason.";
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The gateway's registry (see [`Metrics::new`] for the node's).
    pub fn gateway() -> Self {
        Self {
            gateway: true,
            ..Self::new()
        }
    }

    /// Mirror the store's per-queue numbers into the queue gauges (queues that emptied
    /// disappear).
    pub fn set_queue_stats(&self, stats: &[crate::store::QueueStat]) {
        let series = |f: fn(&crate::store::QueueStat) -> f64| {
            stats
                .iter()
                .map(|s| (vec![s.queue.clone(), s.peer.clone()], f(s)))
                .collect()
        };
        self.queue_depth.replace_all(series(|s| s.depth as f64));
        self.queue_oldest_age_seconds
            .replace_all(series(|s| s.oldest_age_s as f64));
    }

    /// Prometheus text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        for (f, only) in self.families() {
            if only.is_none_or(|gateway| gateway == self.gateway) {
                f.render(&mut out);
            }
        }
        if !self.gateway {
            self.tool_call_duration_seconds.render(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_labels_escaped_and_counts() {
        let m = Metrics::new();
        m.messages_total.inc(&["outbox", "enqueued"]);
        m.messages_total.inc(&["outbox", "enqueued"]);
        m.queue_depth.set(&["outbox", "gate\"way\\x"], 3.0);
        m.tool_call_duration_seconds.observe(0.003);
        let text = m.render();
        assert!(text.contains("outpost_messages_total{queue=\"outbox\",event=\"enqueued\"} 2\n"));
        assert!(
            text.contains("outpost_queue_depth{queue=\"outbox\",peer=\"gate\\\"way\\\\x\"} 3\n")
        );
        assert!(text.contains("outpost_tool_call_duration_seconds_bucket{le=\"0.0025\"} 0\n"));
        assert!(text.contains("outpost_tool_call_duration_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("outpost_tool_call_duration_seconds_count 1\n"));
        assert!(text.contains("outpost_upstream_connected 0\n"));
    }

    #[test]
    fn a_gateway_exports_no_node_only_family() {
        let text = Metrics::gateway().render();
        for name in [
            "outpost_upstream_connected",
            "outpost_time_corrections_total",
            "outpost_audit_size",
            "outpost_tool_call",
        ] {
            assert!(!text.contains(name), "{name} in {text}");
        }
        assert!(text.contains("outpost_http_requests_total"));
    }

    #[test]
    fn replace_all_drops_vanished_series() {
        let m = Metrics::new();
        m.queue_depth.set(&["outbox", "a"], 1.0);
        m.queue_depth
            .replace_all(vec![(vec!["outbox".into(), "b".into()], 2.0)]);
        assert_eq!(m.queue_depth.get(&["outbox", "a"]), 0.0);
        assert_eq!(m.queue_depth.get(&["outbox", "b"]), 2.0);
    }
}
