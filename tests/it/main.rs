//! The one integration test binary: real `outpost` processes on temp dirs and port 0.

// Tests measure elapsed wall time (timeouts, watchdog rates); the clock seam is for
// the daemon's logic, not for a test harness.
#![allow(clippy::disallowed_methods)]

mod audit;
mod demo;
mod gateway;
mod gateway_audit;
mod gateway_tls;
mod harness;
mod malformed;
mod node;
mod store_cli;
mod systemd;
