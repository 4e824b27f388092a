//! The config file as written: serde structs that refuse unknown keys.
//!
//! Every duration and size carries its unit in its name (`_s`, `_ms`, `_bytes`), so a
//! value can never be read in the wrong unit. Absent keys stay `None` here; defaults
//! are applied in [`super::check`], the one place that knows them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub identity: RawIdentity,
    #[serde(default)]
    pub api: RawApi,
    pub upstream: Option<RawUpstream>,
    #[serde(default)]
    pub queue: RawQueue,
    #[serde(default)]
    pub security: RawSecurity,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub tools: Vec<crate::tools::ExternalToolConfig>,
    #[serde(default)]
    pub shutdown: RawShutdown,
    #[serde(default)]
    pub audit: RawAudit,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdentity {
    pub node_id: Option<String>,
    pub role: Option<String>,
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    pub listen: Option<String>,
    pub max_body_bytes: Option<u64>,
    /// PEM certificate chain and key: the gateway then serves HTTPS (rustls).
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// Slow-client limits of the HTTP listener (see `config::http`).
    pub header_timeout_ms: Option<u64>,
    pub body_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub max_connections: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub url: String,
    pub gateway_id: String,
    pub ca_file: Option<PathBuf>,
    pub poll_wait_s: Option<u64>,
    pub request_timeout_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    pub max_messages_per_recipient: Option<u64>,
    pub max_store_bytes: Option<u64>,
    pub max_message_bytes: Option<u64>,
    pub default_ttl_s: Option<u64>,
    pub max_ttl_s: Option<u64>,
    pub max_attempts: Option<u32>,
    pub flush_batch: Option<u32>,
    pub not_queueable: Option<Vec<String>>,
    pub ttl_s: Option<BTreeMap<String, u64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecurity {
    pub max_clock_skew_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// "sqlite" (default) or "sled" (needs the `sled` cargo feature).
    pub engine: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShutdown {
    pub drain_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    /// How often a signed checkpoint is stored while the log grows (default 60 s).
    pub checkpoint_interval_s: Option<u64>,
}
