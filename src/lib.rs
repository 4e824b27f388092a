//! # outpost
//!
//! An edge-node agent for Raspberry Pi–class devices: a durable store-and-forward mailbox
//! on flash, signed and encrypted envelopes, local tools called over loopback HTTP with
//! offline-verifiable capability tokens, and a tamper-evident audit log synced upstream
//! when connectivity returns. The same binary runs the upstream gateway role.
//!
//! Data flows one way: API → (token check, envelope open) → store → worker (tools /
//! sync) → store → API. Nothing below `store` knows about HTTP; `envelope`, `token`,
//! `audit` and the sync state machine do no I/O and never read the clock.
//!
//! ## Layout
//!
//! - [`app`]: wires the components of a role; owns cancellation, task tracking and drain.
//! - [`daemon`]: what both roles' daemons share (addr file, trust cache, store options).
//! - [`clock`]: the only place that reads the wall clock.
//! - [`config`]: raw TOML structs → `check()` → resolved config; drop-ins.
//! - [`store`]: the durable mailbox (engine seam, queues, dedup, blobs, results, audit rows).
//! - [`envelope`]: identities, trust store logic, envelope v1 seal/open, request signatures.
//! - [`token`]: PASETO v4.public capability tokens; pure `check`.
//! - [`audit`]: RFC 6962 Merkle tree, canonical entries, signed checkpoints.
//! - [`tools`]: tool registry, built-ins, external-process runner.
//! - [`api`]: axum routers for node and gateway; one error → status mapping.
//! - [`http_server`]: the HTTP edge both roles serve on: timeouts, connection cap, JSON
//!   answers for unparseable requests, drain.
//! - [`sync`]: node↔gateway protocol.
//! - `gateway`: the upstream role (cargo feature `gateway`, on by default; the device
//!   build has none).
//! - [`keyed_lock`]: one async lock per key (job ids).
//! - [`service`]: systemd notify/watchdog, journald, signals.
//! - [`telemetry`]: metrics registry and named events.
//! - [`cli`]: one file per subcommand family.

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
#[cfg(feature = "gateway")]
pub mod gateway;
pub(crate) mod http_server;
pub(crate) mod keyed_lock;
pub(crate) mod roles;
pub(crate) mod service;
pub mod store;
pub mod sync;
pub(crate) mod telemetry;
pub(crate) mod tls_pin;
pub mod token;
pub(crate) mod tools;
