//! The gateway suites again, with every gateway's state in a real PostgreSQL (one suite,
//! two engines: the `it` binary runs the same files on the embedded store), plus what
//! only a database-backed gateway does: replicas sharing one database.
//!
//! Where PostgreSQL's server binaries are missing the gateways fall back to the embedded
//! store and `pg` prints `SKIPPED:` (CI sets `OUTPOST_TEST_PG_REQUIRE=1`, which fails
//! instead).

#![allow(clippy::disallowed_methods)]

/// Gateways made by `Home::init` in this binary keep their state in PostgreSQL.
pub const GATEWAY_ENGINE: &str = "postgres";

#[path = "../it/enroll.rs"]
mod enroll;
#[path = "../it/failover.rs"]
mod failover;
#[path = "../it/gateway.rs"]
mod gateway;
#[path = "../it/gateway_audit.rs"]
mod gateway_audit;
#[path = "../it/gateway_caps.rs"]
mod gateway_caps;
#[path = "../it/gateway_forward.rs"]
mod gateway_forward;
#[path = "../it/gateway_tls.rs"]
mod gateway_tls;
#[path = "../it/harness.rs"]
mod harness;
#[path = "../it/migrate_pg.rs"]
mod migrate_pg;
#[path = "../it/netns.rs"]
mod netns;
#[path = "../it/openapi.rs"]
mod openapi;
#[path = "../it/pg.rs"]
mod pg;
#[path = "../it/replicas.rs"]
mod replicas;
#[path = "../it/replicas_faults.rs"]
mod replicas_faults;
#[path = "../it/sim.rs"]
mod sim;
#[path = "../it/sync_batches.rs"]
mod sync_batches;
#[path = "../it/sync_wire.rs"]
mod sync_wire;
