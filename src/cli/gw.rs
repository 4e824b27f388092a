//! The gateway's client commands, run on the gateway host with its config: `outpost
//! nodes`, `outpost command`, `outpost call`, `outpost message`. Each mints itself a
//! token with the gateway's own key (audience the gateway, scope `admin`, five minutes,
//! subject the user who runs it, [`super::actor`]: the gateway's audit log names them)
//! and speaks the gateway's client API (PROTOCOL §11) on its local address, pinned like
//! `outpost status` — no token to mint and no JSON to write by hand.

use std::time::Duration;

use serde_json::{json, Value};

use clap::Subcommand;

use super::common::{load_existing_config, load_keys};
use super::status::Local;
use super::{ConfigArg, Exit};
use crate::config::Role;
use crate::token::{self, Claims};

/// The gateway's client commands (flattened into the top level: `outpost nodes`, …).
#[derive(Debug, Subcommand)]
pub enum GwCommand {
    /// On the gateway host: every enrolled node with liveness, long-poll, last seen and
    /// queue depth.
    Nodes {
        #[command(flatten)]
        cfg: ConfigArg,
        /// `GET /v1/nodes` as JSON, one line, for scripts.
        #[arg(long)]
        json: bool,
        /// Only the nodes this selects, e.g. `site=north,role in (pump,fan)`.
        #[arg(long)]
        selector: Option<String>,
        #[command(subcommand)]
        cmd: Option<NodesCmd>,
    },
    /// On the gateway host: queue a command for a node; prints its message id.
    #[command(name = "command")]
    SendCommand {
        #[command(flatten)]
        cfg: ConfigArg,
        /// The node, e.g. node:pump-17.
        node: String,
        /// The command type, e.g. setpoint.
        command_type: String,
        /// The command's body, JSON (default {}).
        #[arg(long)]
        body: Option<String>,
        /// Time to live, e.g. 90s, 15m, 1h (default: the type's, queue.ttl_s).
        #[arg(long)]
        ttl: Option<String>,
        /// Idempotency key: a retry with the same key queues nothing.
        #[arg(long)]
        key: Option<String>,
    },
    /// On the gateway host: call a tool on a node and print its result (waits while the
    /// node is offline, up to --wait).
    Call {
        #[command(flatten)]
        cfg: ConfigArg,
        /// The node, e.g. node:pump-17.
        node: String,
        /// The tool, e.g. echo.
        tool: String,
        /// The tool's arguments, JSON (default {}).
        #[arg(long)]
        args: Option<String>,
        /// Job id: a repeat with the same id runs nothing again.
        #[arg(long)]
        job_id: Option<String>,
        /// How long to wait for the result, e.g. 30s, 10m.
        #[arg(long, default_value = "30s")]
        wait: String,
    },
    /// On the gateway host: where a command or tool call is, and its result.
    Message {
        #[command(flatten)]
        cfg: ConfigArg,
        /// The message id `command` or `call` printed.
        id: String,
    },
    /// On the gateway host: one action to every node a selector selects, in phases
    /// (create, list, show [--watch], cancel, resume).
    Rollout {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: rollout::RolloutCmd,
    },
    /// On the gateway host: tenants, each a fleet of its own (create, list, set, delete).
    Tenant {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: tenant::TenantCmd,
    },
}

/// Run one of the gateway's client commands.
pub fn run(c: GwCommand) -> anyhow::Result<()> {
    match c {
        GwCommand::Nodes {
            cfg,
            json,
            selector,
            cmd: None,
        } => nodes(&cfg, json, selector.as_deref()),
        GwCommand::Nodes {
            cfg,
            cmd: Some(cmd),
            ..
        } => nodes_cmd(&cfg, cmd),
        GwCommand::SendCommand {
            cfg,
            node,
            command_type,
            body,
            ttl,
            key,
        } => command(
            &cfg,
            &node,
            &command_type,
            body.as_deref(),
            ttl.as_deref(),
            key.as_deref(),
        ),
        GwCommand::Call {
            cfg,
            node,
            tool,
            args,
            job_id,
            wait,
        } => call(
            &cfg,
            &node,
            &tool,
            args.as_deref(),
            job_id.as_deref(),
            &wait,
        ),
        GwCommand::Message { cfg, id } => message(&cfg, &id),
        GwCommand::Rollout { cfg, cmd } => rollout::run(&Client::open(&cfg)?, cmd),
        GwCommand::Tenant { cfg, cmd } => tenant::tenant(&cfg, cmd),
    }
}

/// How long the minted token lives: one command's worth.
const TOKEN_TTL_MS: u64 = 5 * 60 * 1000;

/// The gateway this config names, and a token for it.
pub(super) struct Client {
    cfg: crate::config::Config,
    local: Local,
    token: String,
}

impl Client {
    fn open(arg: &ConfigArg) -> anyhow::Result<Client> {
        let cfg = load_existing_config(arg)?;
        if cfg.role != Role::Gateway {
            return Err(Exit::usage(format!(
                "{} is a {} config: run this on the gateway host with the gateway's config (--config)",
                cfg.sources
                    .first()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                cfg.role
            ))
            .into());
        }
        let keys = load_keys(&cfg)?;
        let now = crate::clock::system().now_ms();
        let claims = Claims::new(
            &cfg.node_id,
            &super::actor::local_actor(),
            &cfg.node_id,
            vec!["admin".into()],
            now,
            TOKEN_TTL_MS,
            &uuid::Uuid::now_v7().to_string(),
        )
        .map_err(|e| Exit::usage(e.to_string()))?;
        Ok(Client {
            local: Local::of(&cfg)?,
            token: token::issue(&keys, &claims)?,
            cfg,
        })
    }

    /// Why `node` is unknown when the gateway retired it (the gateway's answer says only
    /// that it is not enrolled).
    fn retired(&self, node: &str) -> Option<String> {
        let records = super::retired::records(&self.cfg)?;
        super::retired::retired_node(&records, node)
            .map(|r| format!("{}; nothing was queued", super::retired::explain(r)))
    }

    /// The JSON answer to `method path`, or an error that says what the gateway said.
    pub(super) fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        extra: &[(&str, &str)],
        wait: Duration,
    ) -> anyhow::Result<(u16, Value)> {
        let bytes = body.map(serde_json::to_vec).transpose()?;
        let (code, text) = self
            .local
            .request(method, path, &self.token, bytes.as_deref(), extra, wait)
            .map_err(|e| {
                Exit::failed(format!(
                    "the gateway does not answer on {} ({e}); is `outpost run` active?",
                    self.local.url()
                ))
            })?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if code >= 400 {
            let target = body.and_then(|b| b["target"]["node_id"].as_str());
            if let (Some(node), Some("unknown_node")) = (target, v["error"]["code"].as_str()) {
                if let Some(why) = self.retired(node) {
                    return Err(Exit::failed(why).into());
                }
            }
            return Err(Exit::failed(format!(
                "the gateway answered {code} {}: {}",
                v["error"]["code"].as_str().unwrap_or("?"),
                v["error"]["message"].as_str().unwrap_or(text.trim())
            ))
            .into());
        }
        Ok((code, v))
    }
}

/// A JSON argument given on the command line.
fn json_arg(what: &str, text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| Exit::usage(format!("{what} is not JSON ({e}): {text}")).into())
}

/// `outpost nodes [--selector S]`: every enrolled node (or those S selects) with
/// liveness, long-poll, last seen, queue, agent version, sync and labels.
pub fn nodes(arg: &ConfigArg, json: bool, selector: Option<&str>) -> anyhow::Result<()> {
    let c = Client::open(arg)?;
    let path = match selector {
        Some(s) => format!("/v1/nodes?selector={}", fleet::query_escape(s)),
        None => "/v1/nodes".to_string(),
    };
    let (_, v) = c.call("GET", &path, None, &[], Duration::from_secs(10))?;
    if json {
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    let (_, p) = c.call(
        "GET",
        "/v1/enrollments?state=pending",
        None,
        &[],
        Duration::from_secs(10),
    )?;
    let waiting = p["enrollments"].as_array().map_or(0, Vec::len);
    let empty = v["nodes"].as_array().is_none_or(Vec::is_empty);
    match (empty, waiting) {
        (true, n) if n > 0 && selector.is_none() => println!(
            "no node is enrolled yet; {n} device{} wait{} for approval (outpost nodes pending)",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" }
        ),
        (true, _) if selector.is_some() => println!("no node matches the selector"),
        _ => {
            print!("{}", nodes_table(&v, crate::clock::system().now_ms()));
            if waiting > 0 {
                println!("{waiting} more wait for approval (outpost nodes pending)");
            }
        }
    }
    Ok(())
}

/// `outpost command NODE TYPE [--body JSON] [--ttl] [--key]`: queue a command; prints its
/// message id.
pub fn command(
    arg: &ConfigArg,
    node: &str,
    command_type: &str,
    body: Option<&str>,
    ttl: Option<&str>,
    key: Option<&str>,
) -> anyhow::Result<()> {
    let c = Client::open(arg)?;
    let mut req = json!({"target": {"node_id": node}, "command_type": command_type});
    if let Some(b) = body {
        req["body"] = json_arg("--body", b)?;
    }
    if let Some(t) = ttl {
        req["ttl_s"] = json!(super::common::parse_ttl_ms(t)? / 1000);
    }
    // A repeat with the same key (a retry after a lost answer) queues nothing and gets
    // the first answer (PROTOCOL §11.2).
    let extra: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    let (_, v) = c.call(
        "POST",
        "/v1/commands",
        Some(&req),
        &extra,
        Duration::from_secs(20),
    )?;
    let id = v["message_id"].as_str().unwrap_or("?");
    eprintln!(
        "queued for {node} (expires {}); `outpost message {id}` shows where it is",
        v["expires_at_ms"]
            .as_u64()
            .and_then(crate::token::format_rfc3339_ms)
            .unwrap_or_else(|| "?".into())
    );
    println!("{id}");
    Ok(())
}

/// `outpost call NODE TOOL [--args JSON] [--job-id] [--wait]`: a tool call on a node,
/// waiting for its result (queued while the node is offline: then it waits on, polling
/// the message, until `--wait` is over). Prints the result JSON.
pub fn call(
    arg: &ConfigArg,
    node: &str,
    tool: &str,
    args: Option<&str>,
    job_id: Option<&str>,
    wait: &str,
) -> anyhow::Result<()> {
    let c = Client::open(arg)?;
    let wait_ms = super::common::parse_duration_ms("--wait", wait)?;
    let deadline = crate::clock::system().now_ms() + wait_ms;
    let mut req = json!({"target": {"node_id": node}, "tool_name": tool,
                         "wait_s": (wait_ms / 1000).min(60)});
    if let Some(a) = args {
        req["tool_args"] = json_arg("--args", a)?;
    }
    if let Some(j) = job_id {
        req["job_id"] = json!(j);
    }
    let hold = Duration::from_millis(wait_ms.min(60_000) + 10_000);
    let (code, v) = c.call("POST", "/v1/tool_call", Some(&req), &[], hold)?;
    if code == 200 {
        return print_result(&v);
    }
    let id = v["message_id"].as_str().unwrap_or("?").to_string();
    eprintln!("queued as {id} ({node} is not listening now); waiting for its result…");
    loop {
        let (_, m) = c.call(
            "GET",
            &format!("/v1/messages/{id}"),
            None,
            &[],
            Duration::from_secs(10),
        )?;
        if !m["result"].is_null() {
            return print_result(&m["result"]);
        }
        if matches!(m["state"].as_str(), Some("expired" | "dead" | "rejected")) {
            return Err(Exit::failed(format!(
                "the call did not run: {} ({})",
                m["state"].as_str().unwrap_or("?"),
                m["reason"].as_str().unwrap_or("-")
            ))
            .into());
        }
        if crate::clock::system().now_ms() >= deadline {
            return Err(Exit::failed(format!(
                "no result within {wait}: the call is queued as {id} (state {}); \
                 `outpost message {id}` shows it later",
                m["state"].as_str().unwrap_or("?")
            ))
            .into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A tool call's answer: the result on stdout (exit 0), or the node's error (exit 1).
fn print_result(v: &Value) -> anyhow::Result<()> {
    if v["ok"] == true {
        println!("{}", serde_json::to_string(&v["result"])?);
        return Ok(());
    }
    Err(Exit::failed(format!(
        "the node answered {}: {}",
        v["error"]["code"].as_str().unwrap_or("?"),
        v["error"]["message"].as_str().unwrap_or("-")
    ))
    .into())
}

/// `outpost message ID`: where a command or tool call is, and its result if any.
pub fn message(arg: &ConfigArg, id: &str) -> anyhow::Result<()> {
    let c = Client::open(arg)?;
    let (_, v) = c.call(
        "GET",
        &format!("/v1/messages/{id}"),
        None,
        &[],
        Duration::from_secs(10),
    )?;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

#[path = "gw_fleet.rs"]
mod fleet;
#[path = "gw_nodes.rs"]
mod nodes_cmds;
#[path = "gw_rollout.rs"]
mod rollout;
#[path = "gw_tenant.rs"]
mod tenant;
use nodes_cmds::nodes_cmd;
pub use nodes_cmds::NodesCmd;
#[path = "gw_table.rs"]
mod table;
pub use table::nodes_table;

#[cfg(test)]
#[path = "gw_tests.rs"]
mod tests;
