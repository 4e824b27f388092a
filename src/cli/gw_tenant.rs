//! `outpost tenant create|list|set|delete` on the gateway host (PROTOCOL §18): they act
//! on the gateway's state directly, like `enroll-token`: the store in the data dir, or
//! the replicas' database. The flows are `gateway::tenants`.

use clap::Subcommand;

use crate::cli::common::load_existing_config;
use crate::cli::enroll_cmd::Opened;
use crate::cli::{ConfigArg, Exit};
use crate::config::Role;
use crate::fleet::tenant::Quotas;
use crate::gateway::tenants::{self, QuotaChange, TenantError, TenantView};

#[derive(Debug, Subcommand)]
pub enum TenantCmd {
    /// Make a tenant: a fleet of its own on this gateway.
    Create {
        /// `[a-z0-9][a-z0-9-]{0,31}`, e.g. acme.
        name: String,
        #[command(flatten)]
        quotas: QuotaArgs,
    },
    /// Every tenant with its nodes and queued messages against its quotas.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Change a tenant's quotas (`none` lifts one); the others stay.
    Set {
        /// The tenant (`default` too).
        name: String,
        #[command(flatten)]
        quotas: QuotaArgs,
    },
    /// Delete a tenant (refused while it has nodes).
    Delete {
        /// The tenant.
        name: String,
    },
}

/// The quota flags: a number (bytes may end in KiB, MiB or GiB), or `none`.
#[derive(Debug, clap::Args)]
pub struct QuotaArgs {
    /// Most nodes the tenant may have enrolled.
    #[arg(long, value_name = "N|none")]
    max_nodes: Option<String>,
    /// Most messages queued for the tenant's nodes at once.
    #[arg(long, value_name = "N|none")]
    max_queued_messages: Option<String>,
    /// Most bytes queued for the tenant's nodes at once, e.g. 256MiB.
    #[arg(long, value_name = "B|none")]
    max_queued_bytes: Option<String>,
    /// Most commands and tool calls a second for the tenant's nodes (each gateway
    /// process; a burst of this many, then this many a second).
    #[arg(long, value_name = "N|none")]
    max_commands_per_s: Option<String>,
}

impl QuotaArgs {
    fn change(&self) -> Result<QuotaChange, Exit> {
        let one = |flag: &str, v: &Option<String>| v.as_deref().map(|s| limit(flag, s)).transpose();
        Ok(QuotaChange {
            max_nodes: one("--max-nodes", &self.max_nodes)?,
            max_queued_messages: one("--max-queued-messages", &self.max_queued_messages)?,
            max_queued_bytes: one("--max-queued-bytes", &self.max_queued_bytes)?,
            max_commands_per_s: one("--max-commands-per-s", &self.max_commands_per_s)?,
        })
    }
}

/// `none` (no limit), or a number with an optional binary unit (KiB, MiB, GiB).
fn limit(flag: &str, s: &str) -> Result<Option<u64>, Exit> {
    if s == "none" {
        return Ok(None);
    }
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let scale: u64 = match unit {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => 0,
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|_| scale > 0)
        .and_then(|n| n.checked_mul(scale))
        .map(Some)
        .ok_or_else(|| {
            Exit::usage(format!(
                "{flag} {s:?}: expected a number (bytes may end in KiB, MiB, GiB) or none"
            ))
        })
}

pub fn tenant(arg: &ConfigArg, cmd: TenantCmd) -> anyhow::Result<()> {
    let cfg = load_existing_config(arg)?;
    if cfg.role != Role::Gateway {
        return Err(Exit::usage(format!(
            "tenants are kept by a gateway: run this on the gateway host with its config (this one is a {})",
            cfg.role
        ))
        .into());
    }
    let st = Opened::open(&cfg)?;
    let out = run(&st, cmd);
    st.close();
    out
}

fn run(st: &Opened, cmd: TenantCmd) -> anyhow::Result<()> {
    let actor = crate::cli::actor::local_actor();
    let state = &*st.state;
    match cmd {
        TenantCmd::Create { name, quotas } => {
            let q = quotas.change()?.apply(Quotas::default());
            let r = st
                .rt
                .block_on(tenants::create(state, &name, q, &actor))
                .map_err(refusal)?;
            println!("created tenant {} ({})", r.name, quota_text(&r.quotas));
        }
        TenantCmd::Set { name, quotas } => {
            let r = st
                .rt
                .block_on(tenants::set(state, &name, quotas.change()?, &actor))
                .map_err(refusal)?;
            println!("tenant {}: {}", r.name, quota_text(&r.quotas));
        }
        TenantCmd::Delete { name } => {
            st.rt
                .block_on(tenants::delete(state, &name, &actor))
                .map_err(refusal)?;
            println!("deleted tenant {name}");
        }
        TenantCmd::List { json } => {
            let all = st.rt.block_on(tenants::list(state))?;
            print_list(&all, json);
        }
    }
    Ok(())
}

/// A refusal as the command's exit: bad input 64, the rest 1.
fn refusal(e: TenantError) -> anyhow::Error {
    match e {
        TenantError::Invalid(_) | TenantError::Default => Exit::usage(e.to_string()).into(),
        TenantError::State(s) => anyhow::Error::from(s),
        other => Exit::failed(other.to_string()).into(),
    }
}

fn quota_text(q: &Quotas) -> String {
    let v = |x: Option<u64>| x.map_or_else(|| "none".to_string(), |n| n.to_string());
    format!(
        "max nodes {}, max queued messages {}, max queued bytes {}, max commands/s {}",
        v(q.max_nodes),
        v(q.max_queued_messages),
        v(q.max_queued_bytes),
        v(q.max_commands_per_s)
    )
}

fn print_list(all: &[TenantView], json: bool) {
    if json {
        for t in all {
            println!(
                "{}",
                serde_json::json!({
                    "tenant": t.record.name,
                    "quotas": t.record.quotas,
                    "usage": t.usage,
                    "created_ms": t.record.created_ms,
                    "created_by": t.record.created_by,
                })
            );
        }
        return;
    }
    let used = |n: u64, limit: Option<u64>| match limit {
        Some(l) => format!("{n}/{l}"),
        None => n.to_string(),
    };
    println!(
        "TENANT                            NODES          QUEUED         QUEUED BYTES         COMMANDS/S"
    );
    for t in all {
        let (u, q) = (&t.usage, &t.record.quotas);
        println!(
            "{:<33} {:<14} {:<14} {:<20} {}",
            t.record.name,
            used(u.nodes, q.max_nodes),
            used(u.queued_messages, q.max_queued_messages),
            used(u.queued_bytes, q.max_queued_bytes),
            q.max_commands_per_s
                .map_or_else(|| "-".to_string(), |r| r.to_string()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::limit;

    #[test]
    fn limits_take_numbers_units_and_none() {
        assert_eq!(limit("--x", "none").unwrap(), None);
        assert_eq!(limit("--x", "0").unwrap(), Some(0));
        assert_eq!(limit("--x", "500").unwrap(), Some(500));
        assert_eq!(limit("--x", "2KiB").unwrap(), Some(2048));
        assert_eq!(limit("--x", "256MiB").unwrap(), Some(256 << 20));
        for bad in [
            "",
            "-1",
            "1.5",
            "1MB",
            "lots",
            "99999999999999999999GiB",
            "GiB",
        ] {
            assert!(limit("--x", bad).is_err(), "{bad}");
        }
    }
}
