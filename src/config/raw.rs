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
    #[serde(default)]
    pub inventory: RawInventory,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdentity {
    pub node_id: Option<String>,
    pub role: Option<String>,
    pub data_dir: Option<PathBuf>,
    /// Instead of `node_id`: "machine-id", "serial", "hostname" or "file:<path>"
    /// (see `config::identity`).
    pub node_id_from: Option<String>,
    /// What the derived value is appended to (default "node:").
    pub node_id_prefix: Option<String>,
    /// Create the key pair at the first start (default: with `node_id_from`).
    pub create_keys: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    pub listen: Option<String>,
    pub max_body_bytes: Option<u64>,
    /// PEM certificate chain and key: the gateway then serves HTTPS (rustls).
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// A gateway may serve plain HTTP on an address beyond loopback only with this set
    /// (behind a TLS-terminating proxy); without TLS or it, the config is refused.
    pub allow_plaintext: Option<bool>,
    /// Slow-client limits of the HTTP listener (see `config::http`).
    pub header_timeout_ms: Option<u64>,
    pub body_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub max_connections: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// One gateway; or `urls`, replicas of one gateway (same identity and state).
    pub url: Option<String>,
    pub urls: Option<Vec<String>>,
    /// Optional with `enroll_token_file` (the token names its gateway).
    pub gateway_id: Option<String>,
    pub ca_file: Option<PathBuf>,
    /// Enroll at first start with this token (PROTOCOL §15).
    pub enroll_token_file: Option<PathBuf>,
    /// Delete the token file once enrolled.
    pub enroll_token_delete: Option<bool>,
    pub poll_wait_s: Option<u64>,
    pub request_timeout_s: Option<u64>,
    /// The longest wait between two attempts to reach an unreachable gateway.
    pub retry_max_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    pub max_messages_per_recipient: Option<u64>,
    pub max_store_bytes: Option<u64>,
    pub max_message_bytes: Option<u64>,
    pub max_result_bytes: Option<u64>,
    pub max_result_store_bytes: Option<u64>,
    pub reserve_free_bytes: Option<u64>,
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
    /// "sqlite" (default), "sled" (needs the `sled` cargo feature) or "postgres"
    /// (gateway role only, needs the `postgres` feature).
    pub engine: Option<String>,
    /// `postgres://user:password@host:port/db?sslmode=require` (engine "postgres").
    pub postgres_url: Option<String>,
    /// Connections each gateway replica keeps open (default 16).
    pub postgres_pool: Option<u32>,
    /// A PEM file of CA certificates the database's TLS certificate must chain to
    /// (engine "postgres" with `sslmode=require`); default: the system's roots.
    pub postgres_ca_file: Option<std::path::PathBuf>,
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInventory {
    /// Static facts the node reports in its inventory (`firmware = "2.4.1"`).
    pub facts: Option<BTreeMap<String, String>>,
}

/// Every key-level problem in a merged config table, each as `path: why`, with the
/// offending keys removed from `table` so the rest can still be checked.
///
/// serde stops at the first unknown key or wrong type; an operator fixing a config on
/// a device wants the whole list at once. Each key is deserialized on its own into its
/// section's struct (every field there is optional or reported missing, which is not
/// this key's fault), so one bad key never hides another.
pub fn key_errors(table: &mut toml::Table) -> Vec<String> {
    let mut errs = Vec::new();
    let sections: Vec<String> = table.keys().cloned().collect();
    for name in sections {
        let keep = match name.as_str() {
            "identity" => probe_section::<RawIdentity>(&name, table, &mut errs),
            "api" => probe_section::<RawApi>(&name, table, &mut errs),
            "upstream" => probe_section::<RawUpstream>(&name, table, &mut errs),
            "queue" => probe_section::<RawQueue>(&name, table, &mut errs),
            "security" => probe_section::<RawSecurity>(&name, table, &mut errs),
            "store" => probe_section::<RawStore>(&name, table, &mut errs),
            "shutdown" => probe_section::<RawShutdown>(&name, table, &mut errs),
            "audit" => probe_section::<RawAudit>(&name, table, &mut errs),
            "inventory" => probe_section::<RawInventory>(&name, table, &mut errs),
            "tools" => match table.get_mut("tools") {
                Some(toml::Value::Array(items)) => {
                    let mut bad = Vec::new();
                    for (i, item) in items.iter_mut().enumerate() {
                        match item {
                            toml::Value::Table(t) => {
                                let before = errs.len();
                                probe_keys::<crate::tools::ExternalToolConfig>(
                                    &format!("tools[{i}]"),
                                    t,
                                    &mut errs,
                                );
                                if errs.len() > before {
                                    bad.push(i);
                                }
                            }
                            _ => {
                                errs.push(format!("tools[{i}]: must be a table ([[tools]])"));
                                bad.push(i);
                            }
                        }
                    }
                    for i in bad.into_iter().rev() {
                        items.remove(i);
                    }
                    true
                }
                _ => {
                    errs.push("tools: must be an array of tables ([[tools]])".into());
                    false
                }
            },
            _ => {
                errs.push(format!(
                    "[{name}]: unknown section (known: identity, api, upstream, queue, \
                     security, store, shutdown, audit, inventory, tools)"
                ));
                false
            }
        };
        if !keep {
            table.remove(&name);
        }
    }
    errs
}

/// False when the section is not a table at all (then it is dropped).
fn probe_section<T: serde::de::DeserializeOwned>(
    name: &str,
    table: &mut toml::Table,
    errs: &mut Vec<String>,
) -> bool {
    match table.get_mut(name) {
        Some(toml::Value::Table(t)) => {
            probe_keys::<T>(name, t, errs);
            true
        }
        _ => {
            errs.push(format!("{name}: must be a table ([{name}])"));
            false
        }
    }
}

fn probe_keys<T: serde::de::DeserializeOwned>(
    path: &str,
    t: &mut toml::Table,
    errs: &mut Vec<String>,
) {
    let keys: Vec<String> = t.keys().cloned().collect();
    for k in keys {
        let mut one = toml::Table::new();
        one.insert(k.clone(), t[&k].clone());
        if let Err(e) = toml::Value::Table(one).try_into::<T>() {
            let msg = e.to_string();
            if !msg.contains("missing field") {
                errs.push(format!("{path}.{k}: {}", msg.trim()));
                t.remove(&k);
            }
        }
    }
}
