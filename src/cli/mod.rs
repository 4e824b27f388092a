//! The command line (`outpost --help`, docs/OPERATIONS.md): one file per subcommand family. `anyhow` lives here and
//! in `main`, nowhere below.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub mod actor;
pub mod audit;
pub mod common;
pub use common::error_line;
pub use identity::{IdentityCmd, TrustCmd};
pub mod config_cmd;
#[cfg(feature = "gateway")]
pub mod demo;
#[cfg(feature = "gateway")]
pub mod enroll_cmd;
pub mod envelope;
pub mod gateway_cmd;
#[cfg(feature = "gateway")]
pub mod gw;
pub mod identity;
pub mod init;
pub mod queue;
#[cfg(feature = "gateway")]
pub mod retired;
pub mod run;
pub mod status;
pub mod tls_gen;
pub mod token;

/// Exit code for bad usage or bad configuration (sysexits EX_USAGE).
pub const EXIT_USAGE: i32 = 64;
/// `outpost run` refuses to start on a damaged store (sysexits EX_DATAERR). Restarting
/// cannot help: the units list it in `RestartPreventExitStatus`.
pub const EXIT_STORE_DAMAGED: i32 = 65;
/// A key file is readable by group or others (sysexits EX_NOPERM); not restarted either.
pub const EXIT_KEY_PERMISSIONS: i32 = 77;

/// A failure the CLI reports with a specific exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    pub code: i32,
    pub message: String,
}

impl Exit {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "outpost",
    version,
    about = "Edge-node agent: durable mailbox, signed envelopes, offline tools, audit log"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone, Default)]
pub struct ConfigArg {
    /// Config file (default: $OUTPOST_CONFIG, then /etc/outpost/outpost.toml).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Use ./outpost-dev (config, keys and store), creating it on first use; no root needed.
    #[arg(long, global = true)]
    pub dev: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a config, keys and store for a new node or gateway.
    Init {
        /// `node` (a device) or `gateway` (the upstream hub).
        #[arg(long, default_value = "node")]
        role: String,
        /// This identity's id, `kind:name` (e.g. node:pump-17, gateway:main).
        #[arg(long)]
        node_id: String,
        /// Where keys and the store go (default /var/lib/outpost).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Config file to write (default: $OUTPOST_CONFIG, then /etc/outpost/outpost.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address the API listens on (default 127.0.0.1:8000, gateway 127.0.0.1:8787).
        /// A gateway beyond loopback (e.g. 0.0.0.0:8787) gets a TLS certificate and key
        /// in its data dir unless --tls-cert/--tls-key or --allow-plaintext is given.
        #[arg(long)]
        listen: Option<String>,
        /// Gateway: serve HTTPS with this PEM certificate (chain) instead of a generated one.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// Gateway: the PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Gateway: plain HTTP beyond loopback, behind a TLS-terminating proxy
        /// (writes api.allow_plaintext = true).
        #[arg(long, conflicts_with = "tls_cert")]
        allow_plaintext: bool,
        /// Gateway URL for a node (writes an [upstream] section).
        #[arg(long)]
        upstream_url: Option<String>,
        /// The gateway's node id, with --upstream-url.
        #[arg(long, default_value = "gateway:main")]
        gateway_id: String,
    },
    /// Run the daemon (node or gateway, per config).
    Run(ConfigArg),
    /// Gateway + node on loopback: an outage, recovery, and a summary.
    Demo {
        /// Keep the demo's directory instead of deleting it.
        #[arg(long)]
        keep: bool,
    },
    /// Print this identity document (or rotate its keys: `identity rotate`).
    Identity {
        #[command(flatten)]
        cfg: ConfigArg,
        /// One line of JSON (what `trust add` on a peer reads).
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        cmd: Option<IdentityCmd>,
    },
    /// Manage trusted peers.
    Trust {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: TrustCmd,
    },
    /// Issue or inspect capability tokens.
    Token {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: TokenCmd,
    },
    /// Seal or open envelopes by hand.
    Envelope {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: EnvelopeCmd,
    },
    /// Queue a message in the local outbox (payload JSON on stdin).
    Send {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Recipient node id (a trusted peer).
        #[arg(long)]
        to: String,
        /// Payload type, e.g. DATA, COMMAND (`[A-Z][A-Z0-9_]{0,31}`).
        #[arg(long = "type")]
        payload_type: String,
        /// Time to live: a number and a unit, e.g. 90s, 15m, 1h, 7d (default: per type).
        #[arg(long)]
        ttl: Option<String>,
    },
    #[cfg(feature = "gateway")]
    #[command(flatten)]
    Gw(gw::GwCommand),
    /// On the gateway host: tokens devices enroll themselves with.
    #[cfg(feature = "gateway")]
    EnrollToken {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: enroll_cmd::EnrollTokenCmd,
    },
    /// Show daemon status (from its API).
    Status {
        #[command(flatten)]
        cfg: ConfigArg,
        /// The daemon's `/v1/status` JSON, one line, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Wait until the daemon answers `/readyz` with 200 (exit 0), or fail with why.
    WaitReady {
        #[command(flatten)]
        cfg: ConfigArg,
        /// How long to wait, e.g. 30s, 2m.
        #[arg(long, default_value = "30s")]
        timeout: String,
        /// A node: also wait until it is connected to its gateway (else say why not and
        /// what to do).
        #[arg(long)]
        upstream: bool,
    },
    /// Inspect and repair queues.
    Queue {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: QueueCmd,
    },
    /// Audit log: verify, export, latest checkpoint.
    Audit {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: AuditCmd,
    },
    /// Configuration.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Consistent online snapshot of the store (and keys) into PATH.
    Backup {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Directory to create for the snapshot (must not exist).
        path: PathBuf,
    },
    /// Integrity check of the store; reports quarantined records.
    Doctor {
        #[command(flatten)]
        cfg: ConfigArg,
    },
    /// Gateway administration.
    Gateway {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(subcommand)]
        cmd: GatewayCmd,
    },
}

#[derive(Debug, Subcommand)]
pub enum GatewayCmd {
    /// Copy this (stopped) gateway's embedded state into an empty PostgreSQL database,
    /// then verify counts, queue order and audit roots. The gateway's own store is left
    /// as it was; point the config at the database afterwards (store.engine = "postgres").
    Migrate {
        /// The target database: postgres://user[:password]@host[:port]/db[?sslmode=require]
        #[arg(long)]
        to: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Issue a token signed by this identity (prints only the token on stdout).
    Issue {
        /// The node id the token is for, or `*` for any node that trusts this issuer.
        #[arg(long)]
        aud: String,
        /// One or more of: tool:<name>, tool:*, command:<type>, read, admin.
        #[arg(long = "scope", num_args = 1.., required = true)]
        scope: Vec<String>,
        /// Lifetime: a number and a unit, e.g. 90s, 15m, 1h, 7d (at most 31d without --force).
        #[arg(long, default_value = "1h")]
        ttl: String,
        /// Who holds the token (default: who runs this, `local:<user>`).
        #[arg(long)]
        sub: Option<String>,
        /// Issue even with a scope of unknown shape or a TTL above 31 days.
        #[arg(long)]
        force: bool,
        /// The tenant the holder acts in, on a gateway (PROTOCOL §18; nodes refuse it).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Decode a token without verifying it.
    Inspect {
        /// The token text (v4.public.…).
        token: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum EnvelopeCmd {
    /// Seal a JSON payload (stdin) to a trusted peer; prints the envelope.
    Seal {
        /// Recipient node id (a trusted peer).
        #[arg(long)]
        to: String,
        /// Payload type, e.g. TASK_REQUEST, COMMAND, DATA.
        #[arg(long = "type")]
        payload_type: String,
        /// Time to live: a number and a unit, e.g. 90s, 15m, 1h, 7d.
        #[arg(long, default_value = "1h")]
        ttl: String,
    },
    /// Verify and decrypt an envelope (stdin) addressed to this node.
    Open,
}

#[derive(Debug, Subcommand)]
pub enum QueueCmd {
    /// Depth and oldest message of every queue.
    Ls,
    /// One message's state, attempts and reason.
    Show {
        /// The message id.
        id: String,
    },
    /// Put a dead letter back in its queue.
    Requeue {
        /// The message id.
        id: String,
    },
    /// Delete every dead letter.
    Purge {
        /// Required: what to purge (dead letters).
        #[arg(long, required = true)]
        dead: bool,
    },
    /// Every stored message as JSON lines on stdout.
    Export {
        /// Required: the format (JSON lines).
        #[arg(long, required = true)]
        jsonl: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// Recompute the tree and check every signed checkpoint; say what they cover.
    Verify {
        /// Fail when any entry is not yet covered by a verified checkpoint.
        #[arg(long)]
        require_checkpoint: bool,
    },
    /// Entries as canonical JSON lines on stdout.
    Export {
        /// Required: the format (JSON lines).
        #[arg(long, required = true)]
        jsonl: bool,
        /// First entry index to export.
        #[arg(long, default_value_t = 0)]
        since: u64,
    },
    /// Print the latest signed checkpoint (C2SP signed note).
    Checkpoint {
        /// Sign a new checkpoint over every entry first (stop the daemon, or it races).
        #[arg(long)]
        now: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Check a config (and that it matches the stored identity) offline; exit 64 if wrong.
    Check {
        /// Config file (default: $OUTPOST_CONFIG, then /etc/outpost/outpost.toml).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Init {
            role,
            node_id,
            data_dir,
            config,
            listen,
            tls_cert,
            tls_key,
            allow_plaintext,
            upstream_url,
            gateway_id,
        } => init::init(init::InitArgs {
            role,
            node_id,
            data_dir,
            config,
            listen,
            tls_cert,
            tls_key,
            allow_plaintext,
            upstream_url,
            gateway_id,
            quiet: false,
        }),
        Command::Run(cfg) => run::run(&cfg),
        #[cfg(feature = "gateway")]
        Command::Demo { keep } => demo::run(keep),
        #[cfg(not(feature = "gateway"))]
        Command::Demo { .. } => Err(Exit::usage(format!(
            "`outpost demo` runs a gateway and a node: {}",
            crate::config::NO_GATEWAY
        ))
        .into()),
        Command::Identity {
            cfg,
            cmd:
                Some(IdentityCmd::Rotate {
                    wait,
                    prepare,
                    compromised,
                }),
            ..
        } => identity::rotate(&cfg, wait, prepare, compromised),
        Command::Identity {
            cfg,
            json,
            cmd: None,
        } => identity::identity(&cfg, json),
        Command::Trust { cfg, cmd } => identity::trust_cmd(&cfg, cmd),
        Command::Token { cfg, cmd } => token::token_cmd(&cfg, cmd),
        Command::Envelope { cfg, cmd } => envelope::envelope_cmd(&cfg, cmd),
        Command::Send {
            cfg,
            to,
            payload_type,
            ttl,
        } => envelope::send(&cfg, &to, &payload_type, ttl.as_deref()),
        Command::Status { cfg, json } => status::status(&cfg, json),
        #[cfg(feature = "gateway")]
        Command::Gw(c) => gw::run(c),
        #[cfg(feature = "gateway")]
        Command::EnrollToken { cfg, cmd } => enroll_cmd::enroll_token(&cfg, cmd),
        Command::WaitReady {
            cfg,
            timeout,
            upstream,
        } => status::wait_ready(&cfg, &timeout, upstream),
        Command::Queue { cfg, cmd } => queue::queue_cmd(&cfg, cmd),
        Command::Audit { cfg, cmd } => audit::audit_cmd(&cfg, cmd),
        Command::Config {
            cmd: ConfigCmd::Check { config },
        } => config_cmd::check(config.as_deref()),
        Command::Backup { cfg, path } => queue::backup(&cfg, &path),
        Command::Doctor { cfg } => queue::doctor(&cfg),
        Command::Gateway { cfg, cmd } => gateway_cmd::gateway_cmd(&cfg, cmd),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// On a device `--help` is the manual: every subcommand and every option says what
    /// it is for.
    #[test]
    fn every_subcommand_and_option_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands() {
                let p = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(format!("`{p}` has no description"));
                }
                for a in sub.get_arguments() {
                    if a.is_hide_set() || a.get_help().is_some() {
                        continue;
                    }
                    missing.push(format!("`{p}` argument `{}` has no help", a.get_id()));
                }
                walk(sub, &p, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "outpost", &mut missing);
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
