//! # outpost
//!
//! An edge-node agent for Raspberry Pi–class devices: a durable store-and-forward mailbox
//! on flash, signed and encrypted envelopes, local tools called over loopback HTTP with
//! offline-verifiable capability tokens, and a tamper-evident audit log synced upstream
//! when connectivity returns. The same binary runs the upstream gateway role.
//!
//! Data flows one way: API → (token check, envelope open) → store → worker (tools /
//! sync) → store → API. Nothing below `store` knows about HTTP; `envelope`, `token`,
//! `audit`, `fleet` and the sync state machine do no I/O and never read the clock.
//!
//! ## Layout
//!
//! Public (the integration tests and benchmarks use them): `clock`, `config`, `store`,
//! `envelope`, `token`, `audit`, `enroll`, `fleet` (labels, selectors, desired and
//! reported state: pure), `sync`, `gateway` (cargo feature `gateway`,
//! on by default; the device build has none), and `cli`, which the binary runs. The rest
//! is the crate's own:
//!
//! - `roles`: the composition root: binds, wires a role's domain, HTTP edge and
//!   background tasks, runs until shutdown, drains.
//! - `app`: the node role's domain (`NodeCore` and its services over a shared `Base`).
//! - `api`: the HTTP edge of both roles; the only mappings from domain errors to HTTP.
//! - `http_server`: the HTTP/1.1 serve loop: timeouts, connection cap, TLS, drain.
//! - `daemon`: what both roles share: addr file, key and identity files, key rotation
//!   on disk, trust cache, store options.
//! - `tools`: tool registry, built-ins, external-process runner.
//! - `keyed_lock`, `service` (systemd notify/watchdog, journald, signals), `telemetry`
//!   (metrics registry, named events), `tls_pin`.
//!
//! `docs/ARCHITECTURE.md` draws the layers and walks a tool call, a pulled envelope and
//! a command through the files.

// Functions stay readable at a glance (STYLE): over 100 lines is a lint error in the
// library (its unit tests and the integration suites are separate).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub(crate) mod api;
pub(crate) mod app;
pub mod audit;
pub mod cli;
pub mod clock;
pub mod config;
pub(crate) mod daemon;
pub mod enroll;
pub mod envelope;
pub mod fleet;
#[cfg(feature = "gateway")]
pub mod gateway;
pub(crate) mod http_server;
pub(crate) mod idempotency;
pub(crate) mod keyed_lock;
pub(crate) mod roles;
pub(crate) mod service;
pub mod store;
pub mod sync;
pub(crate) mod telemetry;
pub(crate) mod tls_pin;
pub mod token;
pub(crate) mod tools;
