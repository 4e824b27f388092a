//! The one integration test binary: real `outpost` processes on temp dirs and port 0.

// Tests measure elapsed wall time (timeouts, watchdog rates); the clock seam is for
// the daemon's logic, not for a test harness.
#![allow(clippy::disallowed_methods)]

/// The engine gateways in this binary run on; the `gateway_pg` test binary runs the
/// gateway suites again with "postgres" (one suite, two engines).
pub const GATEWAY_ENGINE: &str = "embedded";

mod answer_caps;
mod approvals;
mod audit;
mod audit_actors;
mod browser;
mod console;
mod console_day;
mod console_fleet_state;
mod console_limits;
mod console_pages;
mod console_rollouts;
mod demo;
mod device_build;
mod diskfull;
mod docs;
mod enroll;
mod enroll_flood;
mod failover;
mod fleet_e2e;
mod fleet_history;
mod fleet_state;
mod gateway;
mod gateway_audit;
mod gateway_caps;
mod gateway_cli;
mod gateway_forward;
mod gateway_keys;
mod gateway_pin;
mod gateway_tls;
mod gone_node;
mod harness;
mod idle;
mod key_compromise;
mod key_rotation;
mod layers;
mod malformed;
mod netns;
mod newcomer;
mod node;
mod node_id_from;
mod node_state;
mod openapi;
mod operator_day;
mod pg;
mod pipeline;
mod powercut;
/// The power-cut shim's Rust side, shared with the store's own power-cut test (which
/// uses parts of it these tests do not).
#[allow(dead_code)]
#[path = "../../src/store/tests/powercut_shim.rs"]
mod powercut_shim;
mod readme_first_hour;
mod rollouts;
mod self_enroll;
mod sim;
mod slow_clients;
mod slow_clients_flood;
mod slow_link;
mod startup;
#[cfg(feature = "gateway")]
mod state_conformance;
mod storage_truth_pg;
mod store_cli;
mod sync_batches;
mod sync_wire;
mod systemd;
mod tasks;
mod tenant_console;
mod tenant_rate;
mod tenant_rollouts;
mod tenant_rotation;
mod tenant_upgrade;
mod tenants;
#[cfg(feature = "gateway")]
mod trust_rows;
mod two_hosts;
