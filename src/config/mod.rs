//! Configuration in stages: TOML files (main file + `outpost.d/*.toml` drop-ins, merged
//! in name order) → [`raw::RawConfig`] (unknown keys are errors) → [`check`] (semantic
//! rules, defaults) → [`Config`], the only form the rest of the daemon sees.
//!
//! `outpost config check` runs exactly this path offline.

pub mod fleet;
pub mod http;
pub mod identity;
mod postgres;
mod queue;
pub mod raw;
mod upstream;

pub use fleet::FleetConfig;
pub use postgres::{redact_url, PostgresConfig};
pub use queue::{QueueConfig, TtlError};
pub use upstream::{enrollment_path, EnrolledWith, Upstream};

use crate::store::EngineKind;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::tools::ExternalToolConfig;
pub use http::HttpLimits;
use raw::RawConfig;

pub const DEFAULT_CONFIG_PATH: &str = "/etc/outpost/outpost.toml";
pub const DEFAULT_DATA_DIR: &str = "/var/lib/outpost";
pub const NODE_DEFAULT_LISTEN: &str = "127.0.0.1:8000";
pub const GATEWAY_DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// PROTOCOL §14: no message may live longer than 7 days.
pub const HARD_MAX_TTL_S: u64 = 7 * 24 * 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Node,
    Gateway,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Gateway => "gateway",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a build without the cargo feature `gateway` (the device build) refuses the
/// gateway role.
pub const NO_GATEWAY: &str =
    "this build has no gateway (a device build, without the cargo feature `gateway`); \
     run the gateway from a build with default features";

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "node" => Ok(Role::Node),
            "gateway" if cfg!(feature = "gateway") => Ok(Role::Gateway),
            "gateway" => Err(format!("role \"gateway\": {NO_GATEWAY}")),
            other => Err(format!(
                "role must be \"node\" or \"gateway\", not {other:?}"
            )),
        }
    }
}

/// The resolved, checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_id: String,
    /// `identity.create_keys`: a node without keys creates them at start.
    pub create_keys: bool,
    pub role: Role,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub max_body_bytes: u64,
    /// `(cert_file, key_file)` when the API serves HTTPS (gateway role).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `api.allow_plaintext`: a gateway beyond loopback without TLS, on purpose.
    pub allow_plaintext: bool,
    /// Timeouts and the connection cap of the API listener.
    pub http: HttpLimits,
    pub upstream: Option<Upstream>,
    pub queue: QueueConfig,
    pub max_clock_skew_s: u64,
    pub store_engine: crate::store::EngineKind,
    /// The gateway's state in PostgreSQL (`store.engine = "postgres"`): shared by
    /// every replica. `None` = the embedded store in `data_dir`.
    pub gateway_db: Option<PostgresConfig>,
    pub tools: Vec<ExternalToolConfig>,
    pub drain_timeout_ms: u64,
    /// How often the daemon signs a checkpoint while the audit log grows.
    pub audit_checkpoint_every_ms: u64,
    /// `[inventory]` facts (PROTOCOL §16.3).
    pub fleet: FleetConfig,
    /// Where this config came from (for messages), main file first.
    pub sources: Vec<PathBuf>,
}

/// For a config that does not exist: how to get one.
fn missing_hint(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::NotFound {
        "; create one with `outpost init --node-id <kind:name> --config <path>` (or try \
         everything in ./outpost-dev with `--dev`), or point --config / $OUTPOST_CONFIG at yours"
    } else {
        ""
    }
}

/// Everything wrong with a config, all at once, so an operator fixes it in one pass.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}{}", missing_hint(source))]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

/// Where to look for the config: `--config`, then `$OUTPOST_CONFIG`, then the default.
impl Config {
    /// The store as logs and `/v1/status` name it: the engine, and for a gateway on
    /// PostgreSQL the database (password masked).
    pub fn store_description(&self) -> String {
        match &self.gateway_db {
            Some(db) => format!("postgres {}", redact_url(&db.url)),
            None => format!(
                "{} in {}",
                self.store_engine.name(),
                self.data_dir.display()
            ),
        }
    }
}

pub fn resolve_path(cli: Option<&Path>) -> PathBuf {
    if let Some(p) = cli {
        return p.to_path_buf();
    }
    match std::env::var_os("OUTPOST_CONFIG") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_CONFIG_PATH),
    }
}

/// Load the main file and its drop-ins (`<dir>/outpost.d/*.toml`, name order), merge
/// tables key by key (later files win), then check.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let mut sources = vec![path.to_path_buf()];
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    // Every file is read and parsed even after one fails, and every key checked even
    // after one is wrong: the operator gets the whole list in one pass.
    let mut errs = Vec::new();
    let mut unparsed = false;
    let mut merged = parse_table(path, &text).unwrap_or_else(|e| {
        errs.push(e.to_string());
        unparsed = true;
        toml::Table::new()
    });
    let dropin_dir = path
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("outpost.d");
    if let Ok(rd) = std::fs::read_dir(&dropin_dir) {
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        for f in files {
            let parsed = std::fs::read_to_string(&f)
                .map_err(|source| ConfigError::Read {
                    path: f.clone(),
                    source,
                })
                .and_then(|text| parse_table(&f, &text));
            match parsed {
                Ok(table) => {
                    identity::later_name_wins(&mut merged, &table);
                    merge_tables(&mut merged, table)
                }
                Err(e) => {
                    errs.push(e.to_string());
                    unparsed = true;
                }
            }
            sources.push(f);
        }
    }
    errs.extend(raw::key_errors(&mut merged));
    let raw: Result<RawConfig, _> = toml::Value::Table(merged).try_into();
    let checked = match raw {
        // What a file we could not parse would have set is unknown: semantic checks
        // of the rest would only report its absence.
        _ if unparsed => None,
        Ok(raw) => Some(check(raw)),
        Err(e) => {
            errs.push(format!("{}: {e}", path.display()));
            None
        }
    };
    match checked {
        Some(Ok(mut cfg)) if errs.is_empty() => {
            cfg.sources = sources;
            let data_dir = cfg.data_dir.clone();
            if let Some(up) = cfg.upstream.as_mut() {
                up.resolve_gateway_id(&data_dir)
                    .map_err(|e| ConfigError::Invalid(vec![e]))?;
            }
            Ok(cfg)
        }
        Some(Err(ConfigError::Invalid(more))) => {
            errs.extend(more);
            Err(ConfigError::Invalid(errs))
        }
        Some(Err(e)) => {
            errs.push(e.to_string());
            Err(ConfigError::Invalid(errs))
        }
        _ => Err(ConfigError::Invalid(errs)),
    }
}

/// Parse a config from text (no drop-ins); used by tests and `--dev`.
pub fn from_str(text: &str) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: PathBuf::from("<inline>"),
        message: e.to_string(),
    })?;
    check(raw)
}

fn parse_table(path: &Path, text: &str) -> Result<toml::Table, ConfigError> {
    text.parse::<toml::Table>().map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Tables merge recursively; any other value (including arrays such as `[[tools]]`) is
/// replaced whole by the later file, so a drop-in can redefine the tool list.
fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_tables(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// `[api]`: listen address, body limit, TLS and plaintext (problems go to `errs`).
fn check_api(
    api: &raw::RawApi,
    role: Role,
    errs: &mut Vec<String>,
) -> (SocketAddr, u64, Option<(PathBuf, PathBuf)>, bool) {
    let raw_api = api;
    let default_listen = match role {
        Role::Node => NODE_DEFAULT_LISTEN,
        Role::Gateway => GATEWAY_DEFAULT_LISTEN,
    };
    let listen_text = raw_api.listen.as_deref().unwrap_or(default_listen);
    let listen = match listen_text.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => {
            errs.push(format!(
                "api.listen {listen_text:?} is not an address:port (e.g. \"127.0.0.1:8000\")"
            ));
            default_listen
                .parse()
                .unwrap_or(([127, 0, 0, 1], 8000).into())
        }
    };
    let max_body_bytes = raw_api.max_body_bytes.unwrap_or(2 * 1024 * 1024);
    if max_body_bytes < 1024 {
        errs.push("api.max_body_bytes must be at least 1024".into());
    }

    let tls = match (raw_api.tls_cert_file.clone(), raw_api.tls_key_file.clone()) {
        (None, None) => None,
        (Some(c), Some(k)) => {
            if role != Role::Gateway {
                errs.push(
                    "api.tls_cert_file/tls_key_file are supported for the gateway role only".into(),
                );
            }
            Some((c, k))
        }
        _ => {
            errs.push("api.tls_cert_file and api.tls_key_file go together".into());
            None
        }
    };

    let allow_plaintext = raw_api.allow_plaintext.unwrap_or(false);
    if role == Role::Gateway && tls.is_none() && !allow_plaintext && !listen.ip().is_loopback() {
        errs.push(format!(
            "api.listen {listen} is beyond loopback but the gateway has no TLS: set \
             api.tls_cert_file and api.tls_key_file (`outpost init --role gateway --listen …` \
             makes them), or api.allow_plaintext = true behind a TLS-terminating proxy"
        ));
    }

    (listen, max_body_bytes, tls, allow_plaintext)
}

/// `[store]`: the engine, and the gateway's database when it is PostgreSQL.
fn check_store(
    store: &raw::RawStore,
    role: Role,
    errs: &mut Vec<String>,
) -> (EngineKind, Option<PostgresConfig>) {
    // Parsed once, here: an engine this build cannot open is a config error.
    let mut gateway_db = None;
    let store_engine = match store.engine.as_deref().unwrap_or("sqlite") {
        "sqlite" => EngineKind::Sqlite,
        #[cfg(feature = "sled")]
        "sled" => EngineKind::Sled,
        #[cfg(not(feature = "sled"))]
        "sled" => {
            errs.push("store.engine = \"sled\" needs a build with the `sled` feature".into());
            EngineKind::Sqlite
        }
        "postgres" => {
            gateway_db = postgres::postgres_config(store, role, errs);
            EngineKind::Sqlite
        }
        other => {
            errs.push(format!(
                "store.engine {other:?} must be \"sqlite\", \"sled\" or \"postgres\""
            ));
            EngineKind::Sqlite
        }
    };
    if gateway_db.is_none()
        && (store.postgres_url.is_some()
            || store.postgres_pool.is_some()
            || store.postgres_ca_file.is_some())
    {
        errs.push("store.postgres_* keys need store.engine = \"postgres\"".into());
    }

    (store_engine, gateway_db)
}

/// `[[tools]]`: names, no shadowing of built-ins, absolute commands.
fn check_tools(tools: &[ExternalToolConfig], errs: &mut Vec<String>) {
    let mut names = std::collections::BTreeSet::new();
    for t in tools {
        if !valid_tool_name(&t.name) {
            errs.push(format!(
                "tools: name {:?} must match [a-z][a-z0-9_]{{0,63}}",
                t.name
            ));
        }
        if ["echo", "pii_redact", "sysinfo"].contains(&t.name.as_str()) {
            errs.push(format!("tools.{}: shadows a built-in tool", t.name));
        }
        if !names.insert(t.name.clone()) {
            errs.push(format!("tools.{}: defined twice", t.name));
        }
        match t.command.first() {
            None => errs.push(format!("tools.{}: command is empty", t.name)),
            Some(p) if !p.starts_with('/') => errs.push(format!(
                "tools.{}: command[0] must be an absolute path (no shell, no PATH lookup)",
                t.name
            )),
            _ => {}
        }
        if let Err(e) = t.check() {
            errs.push(format!("tools.{}: {e}", t.name));
        }
    }
}

/// Semantic checks and defaults. Collects every problem before failing.
pub fn check(raw: RawConfig) -> Result<Config, ConfigError> {
    let mut errs = Vec::new();

    let role = match raw
        .identity
        .role
        .as_deref()
        .unwrap_or("node")
        .parse::<Role>()
    {
        Ok(r) => r,
        Err(e) => {
            errs.push(format!("identity.role: {e}"));
            Role::Node
        }
    };
    let (node_id, create_keys) = identity::resolve(&raw.identity, role, &mut errs);
    let data_dir = raw
        .identity
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));

    let (listen, max_body_bytes, tls, allow_plaintext) = check_api(&raw.api, role, &mut errs);

    let http = http::check(&raw.api, role, &mut errs);

    let upstream = raw.upstream.map(|u| upstream::check(u, role, &mut errs));

    let queue = queue::resolve(raw.queue, &mut errs);

    let max_clock_skew_s = raw.security.max_clock_skew_s.unwrap_or(300);
    if max_clock_skew_s > 3600 {
        errs.push("security.max_clock_skew_s must be at most 3600".into());
    }

    let (store_engine, gateway_db) = check_store(&raw.store, role, &mut errs);

    check_tools(&raw.tools, &mut errs);
    let fleet = fleet::check(&raw.inventory, &mut errs);

    let checkpoint_s = raw.audit.checkpoint_interval_s.unwrap_or(60);
    if !(1..=86_400).contains(&checkpoint_s) {
        errs.push(format!(
            "audit.checkpoint_interval_s must be 1..=86400 (got {checkpoint_s})"
        ));
    }

    if !errs.is_empty() {
        return Err(ConfigError::Invalid(errs));
    }
    Ok(Config {
        node_id,
        create_keys,
        role,
        data_dir,
        listen,
        max_body_bytes,
        tls,
        allow_plaintext,
        http,
        upstream,
        queue,
        max_clock_skew_s,
        store_engine,
        gateway_db,
        tools: raw.tools,
        drain_timeout_ms: raw.shutdown.drain_timeout_ms.unwrap_or(10_000),
        audit_checkpoint_every_ms: checkpoint_s * 1000,
        fleet,
        sources: Vec::new(),
    })
}

/// `^[a-z][a-z0-9-]{0,31}:[A-Za-z0-9._-]{1,64}$` (PROTOCOL §2), by hand: no regex needed.
pub fn valid_node_id(s: &str) -> bool {
    let Some((kind, name)) = s.split_once(':') else {
        return false;
    };
    let mut kc = kind.chars();
    matches!(kc.next(), Some('a'..='z'))
        && kind.len() <= 32
        && kc.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

use crate::tools::valid_tool_name;

#[cfg(test)]
mod tests;
