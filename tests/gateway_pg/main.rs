//! The gateway suites again, with every gateway's state in a real PostgreSQL (one suite,
//! two engines: the `it` binary runs the same files on the embedded store), plus what
//! only a database-backed gateway does: replicas sharing one database.
//!
//! Where PostgreSQL's server binaries are missing the gateways fall back to the embedded
//! store and `pg` prints `SKIPPED:` (CI sets `OUTPOST_TEST_PG_REQUIRE=1`, which fails
//! instead).
//!
//! Only here: `readiness_pg`, `replicas`, `replicas_enroll`, `replicas_fleet`, `replicas_faults`, `migrate_pg` (replicas, faults of the
//! database, migrations) and `state_pg` (the PostgreSQL state with a clock the test
//! moves: the counterparts of the embedded state's unit tests). `state_conformance`, the
//! state's contract with a clock the test moves, runs in both binaries.
//!
//! On the embedded engine only (the `it` binary), and why:
//! - `powercut`: its gateway test rolls back the unsynced writes of the gateway's own
//!   store files. On PostgreSQL a 2xx follows the database's commit; stopping
//!   PostgreSQL itself mid-run is `replicas_faults`.
//! - `slow_clients`, `slow_clients_flood`: the HTTP edge (header and idle timeouts,
//!   the connection cap, unparseable requests) sits in front of either engine, and
//!   what they send never reaches the state.
//! - `newcomer`: the README's first hour, on the default engine (its gateway is only
//!   paired with, never run).
//! - `audit`, `demo`, `diskfull`, `malformed`, `node`, `startup`, `store_cli`,
//!   `systemd`: nodes only (`startup` also checks that a node's config naming
//!   PostgreSQL is refused).
//! - `gateway::gateway_metrics_need_read_off_loopback_and_count_requests`: the HTTP
//!   edge, from a network namespace of its own, where the test's database on loopback
//!   is out of reach.
//! - The embedded state's unit tests (`gateway::storage::embedded::tests`, in the
//!   library) test that engine's code.

#![allow(clippy::disallowed_methods)]

/// Gateways made by `Home::init` in this binary keep their state in PostgreSQL.
pub const GATEWAY_ENGINE: &str = "postgres";

#[path = "../it/approvals.rs"]
mod approvals;
#[path = "../it/audit_actors.rs"]
mod audit_actors;
#[path = "../it/browser.rs"]
mod browser;
#[path = "../it/console.rs"]
mod console;
#[path = "../it/console_day.rs"]
mod console_day;
#[path = "../it/console_fleet_state.rs"]
mod console_fleet_state;
#[path = "../it/console_rollouts.rs"]
mod console_rollouts;
#[path = "../it/enroll.rs"]
mod enroll;
#[path = "../it/enroll_burst_pg.rs"]
mod enroll_burst_pg;
#[path = "../it/failover.rs"]
mod failover;
#[path = "../it/fleet_e2e.rs"]
mod fleet_e2e;
#[path = "../it/fleet_history.rs"]
mod fleet_history;
#[path = "../it/fleet_state.rs"]
mod fleet_state;
#[path = "../it/gateway.rs"]
mod gateway;
#[path = "../it/gateway_audit.rs"]
mod gateway_audit;
#[path = "../it/gateway_caps.rs"]
mod gateway_caps;
#[path = "../it/gateway_cli.rs"]
mod gateway_cli;
#[path = "../it/gateway_forward.rs"]
mod gateway_forward;
#[path = "../it/gateway_keys.rs"]
mod gateway_keys;
#[path = "../it/gateway_tls.rs"]
mod gateway_tls;
#[path = "../it/gone_node.rs"]
mod gone_node;
#[path = "../it/harness.rs"]
mod harness;
#[path = "../it/key_compromise.rs"]
mod key_compromise;
#[path = "../it/key_rotation.rs"]
mod key_rotation;
#[path = "../it/migrate_pg.rs"]
mod migrate_pg;
#[path = "../it/netns.rs"]
mod netns;
#[path = "../it/openapi.rs"]
mod openapi;
#[path = "../it/operator_day.rs"]
mod operator_day;
#[path = "../it/pg.rs"]
mod pg;
#[path = "../it/pipeline.rs"]
mod pipeline;
#[path = "../it/readiness_pg.rs"]
mod readiness_pg;
#[path = "../it/replicas.rs"]
mod replicas;
#[path = "../it/replicas_enroll.rs"]
mod replicas_enroll;
#[path = "../it/replicas_faults.rs"]
mod replicas_faults;
#[path = "../it/replicas_fleet.rs"]
mod replicas_fleet;
#[path = "../it/rollouts.rs"]
mod rollouts;
#[path = "../it/self_enroll.rs"]
mod self_enroll;
#[path = "../it/sim.rs"]
mod sim;
#[path = "../it/state_conformance/mod.rs"]
mod state_conformance;
#[path = "../it/state_pg.rs"]
mod state_pg;
#[path = "../it/sync_batches.rs"]
mod sync_batches;
#[path = "../it/sync_wire.rs"]
mod sync_wire;
#[path = "../it/tenant_console.rs"]
mod tenant_console;
#[path = "../it/tenant_rate.rs"]
mod tenant_rate;
#[path = "../it/tenant_rollouts.rs"]
mod tenant_rollouts;
#[path = "../it/tenant_rotation.rs"]
mod tenant_rotation;
#[path = "../it/tenant_upgrade.rs"]
mod tenant_upgrade;
#[path = "../it/tenants.rs"]
mod tenants;
