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
        let dir = std::env::current_dir()?.join(DEV_DIR);
        let cfg = dir.join("outpost.toml");
        if !cfg.exists() {
            super::init::init(super::init::InitArgs {
                role: "node".into(),
                node_id: "node:dev".into(),
                data_dir: Some(dir.join("data")),
                config: Some(cfg.clone()),
                listen: None,
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

pub fn open_store(cfg: &Config) -> anyhow::Result<Store> {
    app::open_store(cfg, crate::clock::system())
        .with_context(|| format!("opening the store in {}", cfg.data_dir.display()))
}

pub fn load_keys(cfg: &Config) -> anyhow::Result<Keys> {
    let p = app::keyfile::keys_path(&cfg.data_dir);
    Keys::load(&p).with_context(|| format!("loading keys from {}", p.display()))
}

pub fn load_identity(cfg: &Config) -> anyhow::Result<IdentityDocument> {
    app::keyfile::read_identity(&cfg.data_dir)
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
    let d = humantime::parse_duration(s)
        .map_err(|e| Exit::usage(format!("--ttl {s:?}: {e} (e.g. 90s, 15m, 1h, 7d)")))?;
    if d.is_zero() {
        return Err(Exit::usage("--ttl must be > 0").into());
    }
    Ok(d.as_millis() as u64)
}

pub fn data_dir_default(role: &str) -> PathBuf {
    let _ = role;
    PathBuf::from(config::DEFAULT_DATA_DIR)
}
