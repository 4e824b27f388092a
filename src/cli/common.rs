//! What most subcommands share: finding the config (incl. `--dev`), opening the store,
//! loading keys, identity and the trust store.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{ConfigArg, Exit};
use crate::app;
use crate::config::{self, Config};
use crate::envelope::{IdentityDocument, Keys, TrustStore};
use crate::store::Store;

pub const DEV_DIR: &str = "outpost-dev";

/// Load the config named by `--config`/`$OUTPOST_CONFIG`/default, or with `--dev` the
/// one in `./outpost-dev`, creating a dev node there on first use.
pub fn load_config(arg: &ConfigArg) -> anyhow::Result<Config> {
    let path = if arg.dev && arg.config.is_none() {
        let cfg = dev_config_path()?;
        let dir = app::keyfile::parent_dir(&cfg).to_path_buf();
        if !cfg.exists() {
            super::init::init(super::init::InitArgs {
                role: "node".into(),
                node_id: "node:dev".into(),
                data_dir: Some(dir.join("data")),
                config: Some(cfg.clone()),
                listen: None,
                tls_cert: None,
                tls_key: None,
                allow_plaintext: false,
                upstream_url: None,
                gateway_id: "gateway:main".into(),
                quiet: false,
            })?;
        }
        cfg
    } else {
        config::resolve_path(arg.config.as_deref())
    };
    config::load(&path).map_err(|e| Exit::usage(e.to_string()).into())
}

/// [`load_config`] for commands that only look at a daemon (`status`, `wait-ready`):
/// with `--dev` they never create the dev node, they say there is none yet.
pub fn load_existing_config(arg: &ConfigArg) -> anyhow::Result<Config> {
    if arg.dev && arg.config.is_none() && !dev_config_path()?.exists() {
        return Err(Exit::usage(format!(
            "no dev node in ./{DEV_DIR} yet: start one with `outpost run --dev`"
        ))
        .into());
    }
    load_config(arg)
}

/// `./outpost-dev/outpost.toml`, the `--dev` config.
pub fn dev_config_path() -> anyhow::Result<PathBuf> {
    Ok(std::env::current_dir()?.join(DEV_DIR).join("outpost.toml"))
}

pub fn open_store(cfg: &Config) -> anyhow::Result<Store> {
    app::open_store(cfg, crate::clock::system())
        .with_context(|| format!("opening the store in {}", cfg.data_dir.display()))
}

/// Take the data directory's lock for a command that must not run beside a daemon
/// (`run`, `gateway migrate`); held until the returned guard is dropped.
pub fn own_data_dir(cfg: &Config) -> Result<crate::daemon::lock::DataDirLock, Exit> {
    crate::daemon::lock::DataDirLock::acquire(&cfg.data_dir)
        .map_err(|e| Exit::failed(e.to_string()))
}

pub fn load_keys(cfg: &Config) -> anyhow::Result<Keys> {
    let p = app::keyfile::keys_path(&cfg.data_dir);
    Keys::load(&p).with_context(|| format!("loading keys from {}", p.display()))
}

pub fn load_identity(cfg: &Config) -> anyhow::Result<IdentityDocument> {
    app::keyfile::read_identity(&cfg.data_dir)
}

/// The config's `identity.node_id` and `role` against the identity `outpost init` stored
/// in the data dir. A config edited to another name passed every check, then `run`
/// failed with exit 1 and systemd restarted it for ever; now `config check`, `doctor`
/// and `run` all say so with exit 64. `Ok(None)` when there is no identity yet.
pub fn check_identity_matches(cfg: &Config) -> Result<Option<IdentityDocument>, Exit> {
    let path = app::keyfile::identity_path(&cfg.data_dir);
    if !path.exists() {
        return Ok(None);
    }
    let doc = load_identity(cfg).map_err(|e| Exit::usage(format!("{e:#}")))?;
    if doc.node_id != cfg.node_id || doc.role != cfg.role.as_str() {
        return Err(Exit::usage(format!(
            "the config says {} ({}) but the identity in {} is {} ({}): set identity.node_id \
             and identity.role to match it, or point identity.data_dir at {}'s data directory",
            cfg.node_id,
            cfg.role,
            cfg.data_dir.display(),
            doc.node_id,
            doc.role,
            cfg.node_id
        )));
    }
    Ok(Some(doc))
}

/// An `https://` upstream needs something to verify the gateway's TLS against: the
/// pin in the gateway's trusted identity document (`tls_spki_sha256`), or
/// `upstream.ca_file`. Without either every connection fails its handshake; `config
/// check` says so (exit 64) instead of passing.
pub fn check_upstream_tls(cfg: &Config) -> Result<(), Exit> {
    let Some(up) = &cfg.upstream else {
        return Ok(());
    };
    // A node that enrolls itself learns its gateway (and its TLS pin) from the token:
    // until it has enrolled there is nothing to trust yet.
    if up.enroll_token_file.is_some() && !crate::config::enrollment_path(&cfg.data_dir).exists() {
        return Ok(());
    }
    // With an identity (after `init`), the gateway the config names must be trusted:
    // a node that does not know its gateway's key can take nothing from it.
    let trust = if app::keyfile::identity_path(&cfg.data_dir).exists() {
        let store = open_store(cfg).map_err(|e| Exit::failed(format!("{e:#}")))?;
        let t = load_trust(&store);
        store.close();
        Some(t.map_err(|e| Exit::failed(format!("{e:#}")))?)
    } else {
        None
    };
    if let Some(t) = &trust {
        let config = cfg
            .sources
            .first()
            .map(|p| format!(" --config {}", p.display()))
            .unwrap_or_default();
        match t.get(&up.gateway_id) {
            None => {
                return Err(Exit::usage(format!(
                    "upstream.gateway_id {} names no trusted gateway: add the gateway's \
                     identity document (`outpost identity --json` there) with `outpost trust \
                     add gw.json --send --issue{config}`",
                    up.gateway_id
                )))
            }
            Some(p) if p.doc.role != "gateway" => {
                return Err(Exit::usage(format!(
                    "upstream.gateway_id {} is a trusted {}, not a gateway: name the gateway's \
                     id (`outpost trust ls{config}`)",
                    up.gateway_id, p.doc.role
                )))
            }
            Some(_) => {}
        }
    }
    if up.ca_file.is_some() || !up.urls.iter().any(|u| u.starts_with("https://")) {
        return Ok(());
    }
    let pinned = trust
        .as_ref()
        .and_then(|t| t.get(&up.gateway_id))
        .and_then(|p| p.doc.tls_pin())
        .is_some();
    if pinned {
        return Ok(());
    }
    Err(Exit::usage(format!(
        "upstream {} (gateway {}): {}",
        up.url,
        up.gateway_id,
        crate::tls_pin::NO_ANCHOR
    )))
}

pub fn load_trust(store: &Store) -> anyhow::Result<TrustStore> {
    crate::daemon::trust::load(store)
}

pub fn read_input(file: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(Path::new(file)).with_context(|| format!("reading {file}"))
    }
}

/// `1h`, `30m`, `90s`, `2d` → milliseconds.
pub fn parse_ttl_ms(s: &str) -> anyhow::Result<u64> {
    parse_duration_ms("--ttl", s)
}

/// A positive duration given as a number and a unit (`90s`, `15m`, `1h`, `7d`).
pub fn parse_duration_ms(flag: &str, s: &str) -> anyhow::Result<u64> {
    let d = humantime::parse_duration(s)
        .map_err(|e| Exit::usage(format!("{flag} {s:?}: {e} (e.g. 90s, 15m, 1h, 7d)")))?;
    if d.is_zero() {
        return Err(Exit::usage(format!("{flag} must be > 0")).into());
    }
    Ok(d.as_millis() as u64)
}

pub fn data_dir_default(role: &str) -> PathBuf {
    let _ = role;
    PathBuf::from(config::DEFAULT_DATA_DIR)
}

/// An error and its causes on one line, each text once: an error whose message already
/// quotes its source (`storage engine: disk I/O error` over `disk I/O error`) is not
/// followed by that source again, as `{:#}` would.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod error_line_tests {
    #[derive(Debug, thiserror::Error)]
    #[error("storage engine: {0}")]
    struct Quoting(#[source] std::io::Error);

    #[test]
    fn each_text_is_said_once() {
        let io = std::io::Error::other("disk I/O error");
        let e = anyhow::Error::new(Quoting(io)).context("opening the store in /x");
        assert_eq!(
            format!("{e:#}"),
            "opening the store in /x: storage engine: disk I/O error: disk I/O error"
        );
        assert_eq!(
            super::error_line(&e),
            "opening the store in /x: storage engine: disk I/O error"
        );
    }
}
