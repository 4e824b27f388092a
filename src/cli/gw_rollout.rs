//! `outpost rollout create|list|show|cancel|resume` (PROTOCOL §17) on the gateway host,
//! through its client API like `outpost nodes`; `show --watch` redraws a progress bar
//! per phase every second until the rollout ends.

use std::time::Duration;

use clap::Subcommand;
use serde_json::{json, Value};

use super::fleet::query_escape;
use super::{json_arg, Client};
use crate::cli::common::parse_duration_ms;
use crate::cli::Exit;

const WAIT: Duration = Duration::from_secs(30);

// Parsed once per run; boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum RolloutCmd {
    /// Start one: exactly one of --command, --tool, --desired; prints its id.
    Create {
        /// The nodes, e.g. `site=north,role in (pump,fan)`.
        #[arg(long)]
        selector: String,
        /// A command of this type to each node (with --body).
        #[arg(long, conflicts_with_all = ["tool", "desired"])]
        command: Option<String>,
        /// The command's body, JSON (default {}).
        #[arg(long, requires = "command")]
        body: Option<String>,
        /// A tool to call on each node (with --args).
        #[arg(long, conflicts_with = "desired")]
        tool: Option<String>,
        /// The tool's arguments, JSON (default {}).
        #[arg(long, requires = "tool")]
        args: Option<String>,
        /// A merge patch of each node's desired state, JSON.
        #[arg(long)]
        desired: Option<String>,
        /// Phase sizes, counts or shares of all targets, e.g. 1,10%,100%.
        #[arg(long)]
        phases: Option<String>,
        /// Halt when this share of the started phases' nodes failed, e.g. 10%.
        #[arg(long)]
        error_threshold: Option<String>,
        /// Start the next phase when this share of the current one succeeded (default 100%).
        #[arg(long)]
        success_threshold: Option<String>,
        /// Nodes that come to match later take part too.
        #[arg(long)]
        dynamic: bool,
        /// How long it may run, e.g. 7d, 12h (default 7d).
        #[arg(long)]
        deadline: Option<String>,
        /// Start the next phase after this long whatever the successes, e.g. 1h.
        #[arg(long)]
        phase_wait: Option<String>,
        /// Idempotency key: a retry with the same key starts nothing twice.
        #[arg(long)]
        key: Option<String>,
    },
    /// Every rollout, newest first.
    List {
        /// `GET /v1/rollouts` as JSON, one line.
        #[arg(long)]
        json: bool,
    },
    /// One rollout: state, phases with their counts, failed nodes.
    Show {
        /// The rollout's id (`rollout create` printed it; `rollout list`).
        id: String,
        /// Redraw every second until it ends.
        #[arg(long)]
        watch: bool,
        /// `GET /v1/rollouts/{id}` as JSON, one line.
        #[arg(long)]
        json: bool,
    },
    /// Cancel: nothing more is sent, what is queued is withdrawn.
    Cancel {
        /// The rollout's id.
        id: String,
    },
    /// Resume a halted rollout.
    Resume {
        /// The rollout's id.
        id: String,
    },
}

pub(super) fn run(c: &Client, cmd: RolloutCmd) -> anyhow::Result<()> {
    match cmd {
        RolloutCmd::Create { .. } => create(c, cmd),
        RolloutCmd::List { json } => {
            let (_, v) = c.call("GET", "/v1/rollouts", None, &[], WAIT)?;
            if json {
                println!("{}", serde_json::to_string(&v)?);
            } else {
                print!("{}", list_text(&v));
            }
            Ok(())
        }
        RolloutCmd::Show { id, watch, json } => show(c, &id, watch, json),
        RolloutCmd::Cancel { id } => act(c, &id, "cancel"),
        RolloutCmd::Resume { id } => act(c, &id, "resume"),
    }
}

/// A share like `10%` (or `10`) as a number 1-100.
fn pct(flag: &str, s: &str) -> anyhow::Result<u64> {
    s.trim_end_matches('%')
        .parse::<u64>()
        .ok()
        .filter(|p| (1..=100).contains(p))
        .ok_or_else(|| Exit::usage(format!("{flag} is a share like 10%, not {s:?}")).into())
}

/// `1,10%,100%` as the API's phases.
fn phases(s: &str) -> anyhow::Result<Value> {
    let mut out = Vec::new();
    for p in s.split(',').map(str::trim) {
        out.push(match p.strip_suffix('%') {
            Some(_) => json!(format!("{}%", pct("--phases", p)?)),
            None => json!(p.parse::<u64>().map_err(|_| Exit::usage(format!(
                "--phases: {p:?} is neither a count nor a share like 10%"
            )))?),
        });
    }
    Ok(Value::Array(out))
}

/// The request body `create` sends.
fn body(cmd: &RolloutCmd) -> anyhow::Result<Value> {
    let RolloutCmd::Create {
        selector,
        command,
        body,
        tool,
        args,
        desired,
        phases: ph,
        error_threshold,
        success_threshold,
        dynamic,
        deadline,
        phase_wait,
        ..
    } = cmd
    else {
        return Err(Exit::usage("not a create").into());
    };
    let object = |flag: &str, s: &Option<String>| -> anyhow::Result<Value> {
        s.as_deref().map_or(Ok(json!({})), |t| json_arg(flag, t))
    };
    let action = match (command, tool, desired) {
        (Some(t), None, None) => json!({"command": {"type": t, "body": object("--body", body)?}}),
        (None, Some(t), None) => {
            json!({"tool_call": {"tool_name": t, "tool_args": object("--args", args)?}})
        }
        (None, None, Some(d)) => json!({"desired": json_arg("--desired", d)?}),
        _ => return Err(Exit::usage("give exactly one of --command, --tool, --desired").into()),
    };
    let mut b = json!({"selector": selector, "action": action, "dynamic": dynamic});
    if let Some(p) = ph {
        b["phases"] = phases(p)?;
    }
    if let Some(e) = error_threshold {
        b["error_threshold_pct"] = json!(pct("--error-threshold", e)?);
    }
    if let Some(s) = success_threshold {
        b["success_threshold_pct"] = json!(pct("--success-threshold", s)?);
    }
    if let Some(d) = deadline {
        b["deadline_s"] = json!(parse_duration_ms("--deadline", d)? / 1000);
    }
    if let Some(w) = phase_wait {
        b["phase_wait_s"] = json!(parse_duration_ms("--phase-wait", w)? / 1000);
    }
    Ok(b)
}

fn create(c: &Client, cmd: RolloutCmd) -> anyhow::Result<()> {
    let b = body(&cmd)?;
    let key = match &cmd {
        RolloutCmd::Create { key, .. } => key.clone(),
        _ => None,
    };
    let headers: Vec<(&str, &str)> = key
        .iter()
        .map(|k| ("Idempotency-Key", k.as_str()))
        .collect();
    let (code, v) = c.call("POST", "/v1/rollouts", Some(&b), &headers, WAIT)?;
    eprintln!(
        "{} rollout {} to {} nodes in {} phases (outpost rollout show {} --watch)",
        if code == 200 {
            "already started:"
        } else {
            "started"
        },
        v["rollout_id"].as_str().unwrap_or("?"),
        v["counts"]["total"],
        v["phases"].as_array().map_or(0, Vec::len),
        v["rollout_id"].as_str().unwrap_or("?"),
    );
    println!("{}", v["rollout_id"].as_str().unwrap_or(""));
    Ok(())
}

fn act(c: &Client, id: &str, what: &str) -> anyhow::Result<()> {
    let path = format!("/v1/rollouts/{}/{what}", query_escape(id));
    let (_, v) = c.call("POST", &path, None, &[], WAIT)?;
    println!("{id}: {}", v["state"].as_str().unwrap_or("?"));
    Ok(())
}

fn show(c: &Client, id: &str, watch: bool, as_json: bool) -> anyhow::Result<()> {
    let path = format!("/v1/rollouts/{}", query_escape(id));
    loop {
        let (_, v) = c.call("GET", &path, None, &[], WAIT)?;
        if as_json {
            println!("{}", serde_json::to_string(&v)?);
        } else {
            if watch {
                // Clear the screen and draw again, top left.
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", show_text(&v));
            if v["counts"]["failed"].as_u64().unwrap_or(0) > 0 && !watch {
                let (_, n) = c.call(
                    "GET",
                    &format!("{path}/nodes?state=failed"),
                    None,
                    &[],
                    WAIT,
                )?;
                for t in n["nodes"].as_array().into_iter().flatten() {
                    println!(
                        "  failed {}: {}",
                        t["node_id"].as_str().unwrap_or("?"),
                        t["detail"].as_str().unwrap_or("-")
                    );
                }
            }
        }
        let ended = matches!(v["state"].as_str(), Some("completed" | "cancelled"));
        if !watch || ended {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A bar of `width` cells: succeeded `#`, failed or expired `x`, in flight `>`,
/// pending or cancelled `.`.
pub(super) fn bar(c: &Value, width: usize) -> String {
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    let total = n("total").max(1);
    let cells = |x: u64| ((x * width as u64) / total) as usize;
    let done = cells(n("succeeded"));
    let bad = cells(n("failed") + n("expired"));
    let flight = cells(n("queued") + n("delivered"));
    let rest = width.saturating_sub(done + bad + flight);
    format!(
        "[{}{}{}{}]",
        "#".repeat(done),
        "x".repeat(bad),
        ">".repeat(flight),
        ".".repeat(rest)
    )
}

fn counts_text(c: &Value) -> String {
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    format!(
        "{}/{} succeeded, {} failed, {} expired, {} in flight, {} pending, {} cancelled",
        n("succeeded"),
        n("total"),
        n("failed"),
        n("expired"),
        n("queued") + n("delivered"),
        n("pending"),
        n("cancelled")
    )
}

pub(super) fn show_text(v: &Value) -> String {
    let mut out = format!(
        "rollout {}: {} {} to `{}`{}\n",
        v["rollout_id"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?"),
        v["action"].as_str().unwrap_or("?"),
        v["selector"].as_str().unwrap_or(""),
        v["detail"]
            .as_str()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default()
    );
    let current = v["phase"].as_u64().unwrap_or(0) as usize;
    for (i, p) in v["phases"].as_array().into_iter().flatten().enumerate() {
        out.push_str(&format!(
            "{} phase {}: {} {}\n",
            if i == current { ">" } else { " " },
            i + 1,
            bar(p, 30),
            counts_text(p)
        ));
    }
    out.push_str(&format!("  all:     {}\n", counts_text(&v["counts"])));
    out
}

fn list_text(v: &Value) -> String {
    let list = v["rollouts"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return "no rollouts (start one with `outpost rollout create --selector …`)\n".into();
    }
    list.iter()
        .map(|r| {
            format!(
                "{}  {:<9}  {:<9}  {} `{}`\n",
                r["rollout_id"].as_str().unwrap_or("?"),
                r["state"].as_str().unwrap_or("?"),
                r["action"].as_str().unwrap_or("?"),
                bar(&r["counts"], 20),
                r["selector"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_and_bars_read_as_an_operator_writes_them() {
        assert_eq!(phases("1, 10%,100%").unwrap(), json!([1, "10%", "100%"]));
        assert!(phases("1,ten").is_err());
        assert!(phases("0%").is_err());
        let c = json!({"total": 10, "succeeded": 5, "failed": 1, "queued": 2, "pending": 2});
        assert_eq!(bar(&c, 10), "[#####x>>..]");
        let v = json!({"rollout_id": "r1", "state": "halted", "action": "command",
            "selector": "site=north", "detail": "2 of 2 failed", "phase": 0,
            "phases": [c], "counts": c});
        let t = show_text(&v);
        assert!(
            t.contains("halted command to `site=north` (2 of 2 failed)"),
            "{t}"
        );
        assert!(
            t.contains("> phase 1: [###############xxx>>>>>>......] 5/10 succeeded"),
            "{t}"
        );
    }
}
