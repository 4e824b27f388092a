//! The command line (SPEC §8): one file per subcommand family. `anyhow` lives here and
//! in `main`, nowhere below.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub mod audit;
pub mod common;
pub mod config_cmd;
pub mod demo;
pub mod envelope;
pub mod identity;
pub mod init;
pub mod queue;
pub mod run;
pub mod status;
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
        #[arg(long, default_value = "node")]
        role: String,
        #[arg(long)]
        node_id: String,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address the API listens on (default 127.0.0.1:8000, gateway 127.0.0.1:8787).
        #[arg(long)]
        listen: Option<String>,
        /// Gateway URL for a node (writes an [upstream] section).
        #[arg(long)]
        upstream_url: Option<String>,
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
    /// Print this identity document.
    Identity {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long)]
        json: bool,
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
        #[arg(long)]
        to: String,
        #[arg(long = "type")]
        payload_type: String,
        #[arg(long)]
        ttl: Option<String>,
    },
    /// Show daemon status (from its API).
    Status {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long)]
        json: bool,
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
        path: PathBuf,
    },
    /// Integrity check of the store; reports quarantined records.
    Doctor {
        #[command(flatten)]
        cfg: ConfigArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum TrustCmd {
    /// Add a peer from its identity document (FILE or - for stdin).
    Add {
        file: String,
        #[arg(long)]
        send: bool,
        #[arg(long)]
        issue: bool,
    },
    Ls,
    Rm {
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    Issue {
        #[arg(long)]
        aud: String,
        #[arg(long = "scope", num_args = 1.., required = true)]
        scope: Vec<String>,
        #[arg(long, default_value = "1h")]
        ttl: String,
        #[arg(long)]
        sub: Option<String>,
    },
    Inspect {
        token: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum EnvelopeCmd {
    Seal {
        #[arg(long)]
        to: String,
        #[arg(long = "type")]
        payload_type: String,
        #[arg(long, default_value = "1h")]
        ttl: String,
    },
    Open,
}

#[derive(Debug, Subcommand)]
pub enum QueueCmd {
    Ls,
    Show {
        id: String,
    },
    Requeue {
        id: String,
    },
    Purge {
        #[arg(long, required = true)]
        dead: bool,
    },
    Export {
        #[arg(long, required = true)]
        jsonl: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    Verify,
    Export {
        #[arg(long, required = true)]
        jsonl: bool,
        #[arg(long, default_value_t = 0)]
        since: u64,
    },
    Checkpoint,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    Check {
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
            upstream_url,
            gateway_id,
        } => init::init(init::InitArgs {
            role,
            node_id,
            data_dir,
            config,
            listen,
            upstream_url,
            gateway_id,
            quiet: false,
        }),
        Command::Run(cfg) => run::run(&cfg),
        Command::Demo { keep } => demo::run(keep),
        Command::Identity { cfg, json } => identity::identity(&cfg, json),
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
        Command::Queue { cfg, cmd } => queue::queue_cmd(&cfg, cmd),
        Command::Audit { cfg, cmd } => audit::audit_cmd(&cfg, cmd),
        Command::Config {
            cmd: ConfigCmd::Check { config },
        } => config_cmd::check(config.as_deref()),
        Command::Backup { cfg, path } => queue::backup(&cfg, &path),
        Command::Doctor { cfg } => queue::doctor(&cfg),
    }
}
